/* preload.c — the LD_PRELOAD half of the shim: libc entry points that C
 * programs and Python use to look at files, answered from the lookup table.
 *
 * Rules (docs/loader.md):
 *  - bundled path -> stat answers from the table, opens of the staged copy;
 *    known missing -> the native errno without a syscall; unknown -> the real
 *    function with the original path, untouched.
 *  - opens for writing, O_DIRECTORY/O_PATH opens and dirfd-relative paths
 *    pass through.
 *  - the lookup path allocates nothing and takes no lock: it is safe in
 *    threads, in signal handlers, after fork and in a vfork child.
 *  - no fd is held after start-up (apps close_range() everything).
 *
 * One table of intercepted functions (SHIM_FUNCS) names every real function
 * we forward to; they are resolved once with dlsym(RTLD_NEXT) at start-up so
 * that a vfork child never calls into the dynamic linker.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <gnu/libc-version.h>
#include <limits.h>
#include <link.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <utime.h>
#include <sys/time.h>
#include <stdint.h>

/* Read-your-writes (docs/loader.md): the directories this process (or an
 * ancestor, through DLBUNDLE_DIRTY) wrote into. table.h's walk asks
 * DLB_DIRTY for every prefix it resolves and leaves a dirty one, and all
 * below it, to the kernel. A fixed table, no allocation: DIRTY_MAX
 * directories, their names in dirty_env (which is also the environment
 * string children inherit); on overflow everything is dirty (the shim then
 * passes every lookup through, as without an image). */
#define DIRTY_MAX 64
struct dirty_dir { uint64_t hash; uint32_t off, len, kind; };
static struct dirty_dir dirty_set[DIRTY_MAX];
static unsigned dirty_n;  /* entries below it are immutable (release/acquire) */
static int dirty_all;     /* "/" was written into, or the set overflowed */
static char dirty_env[32768] = "DLBUNDLE_DIRTY=";
static size_t dirty_end = 15; /* strlen(dirty_env) */
static int dirty_is(const char *p, size_t n, uint64_t h);
static int listing_is(const char *p, size_t n, uint64_t h);
static size_t dirty_cover(const char *p, size_t n);
#define DLB_DIRTY(p, n, h) (__atomic_load_n(&dirty_n, __ATOMIC_ACQUIRE) && dirty_is(p, n, h))
#define DLB_LISTING(p, n, h) listing_is(p, n, h)
#define DLB_DIRTY_ANY() (__atomic_load_n(&dirty_n, __ATOMIC_ACQUIRE) != 0)
#define DLB_DIRTY_ALL() __atomic_load_n(&dirty_all, __ATOMIC_ACQUIRE)
static int cwd_prefix(const char *p, size_t n);
#define DLB_REALDIR(p, n) cwd_prefix(p, n)
struct dlb_entry;
static int search_ok(const struct dlb_entry *e);
#define DLB_SEARCH(e) search_ok(e)
#define DLB_SEARCH_ALL(e) ((e)->flags & DLB_FLAG_SEARCHABLE)
#include "table.h"
#include "report.h"

/* The one table of intercepted functions: name, return type, parameters.
 * Each X() declares real_<name>, a pointer to the next definition (libc's). */
#define SHIM_FUNCS(X)                                                                  \
	X(open, int, (const char *, int, ...))                                         \
	X(open64, int, (const char *, int, ...))                                       \
	X(openat, int, (int, const char *, int, ...))                                  \
	X(openat64, int, (int, const char *, int, ...))                                \
	X(__open_2, int, (const char *, int))                                          \
	X(__open64_2, int, (const char *, int))                                        \
	X(__openat_2, int, (int, const char *, int))                                   \
	X(__openat64_2, int, (int, const char *, int))                                 \
	X(fopen, FILE *, (const char *, const char *))                                 \
	X(fopen64, FILE *, (const char *, const char *))                               \
	X(freopen, FILE *, (const char *, const char *, FILE *))                       \
	X(freopen64, FILE *, (const char *, const char *, FILE *))                     \
	X(stat, int, (const char *, struct stat *))                                    \
	X(stat64, int, (const char *, struct stat64 *))                                \
	X(lstat, int, (const char *, struct stat *))                                   \
	X(lstat64, int, (const char *, struct stat64 *))                               \
	X(fstatat, int, (int, const char *, struct stat *, int))                       \
	X(fstatat64, int, (int, const char *, struct stat64 *, int))                   \
	X(statx, int, (int, const char *, int, unsigned, struct statx *))              \
	X(access, int, (const char *, int))                                            \
	X(faccessat, int, (int, const char *, int, int))                               \
	X(euidaccess, int, (const char *, int))                                        \
	X(eaccess, int, (const char *, int))                                           \
	X(readlink, ssize_t, (const char *, char *, size_t))                           \
	X(readlinkat, ssize_t, (int, const char *, char *, size_t))                    \
	X(realpath, char *, (const char *, char *))                                    \
	X(statfs, int, (const char *, struct statfs *))                                \
	X(statvfs, int, (const char *, struct statvfs *))                              \
	X(canonicalize_file_name, char *, (const char *))                              \
	X(opendir, DIR *, (const char *))                                              \
	X(execve, int, (const char *, char *const[], char *const[]))                   \
	X(execv, int, (const char *, char *const[]))                                   \
	X(execvp, int, (const char *, char *const[]))                                  \
	X(execvpe, int, (const char *, char *const[], char *const[]))                  \
	X(dlerror, char *, (void))                                                     \
	X(dlinfo, int, (void *, int, void *))                                          \
	X(dlclose, int, (void *))                                                      \
	X(posix_spawn, int, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
			     const posix_spawnattr_t *, char *const[], char *const[]))         \
	X(posix_spawnp, int, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
			      const posix_spawnattr_t *, char *const[], char *const[]))

/* Calls that write (read-your-writes), the readdir family (listings from
 * the table) and fstat (staged fds): the fidelity section at the end of this
 * file. */
#define FIDELITY_FUNCS(X)                                                          \
	X(creat, int, (const char *, mode_t))                                   \
	X(creat64, int, (const char *, mode_t))                                 \
	X(rename, int, (const char *, const char *))                            \
	X(renameat, int, (int, const char *, int, const char *))                \
	X(renameat2, int, (int, const char *, int, const char *, unsigned))     \
	X(unlink, int, (const char *))                                          \
	X(unlinkat, int, (int, const char *, int))                              \
	X(remove, int, (const char *))                                          \
	X(mkdir, int, (const char *, mode_t))                                   \
	X(mkdirat, int, (int, const char *, mode_t))                            \
	X(rmdir, int, (const char *))                                           \
	X(symlink, int, (const char *, const char *))                           \
	X(symlinkat, int, (const char *, int, const char *))                    \
	X(link, int, (const char *, const char *))                              \
	X(linkat, int, (int, const char *, int, const char *, int))             \
	X(truncate, int, (const char *, off_t))                                 \
	X(truncate64, int, (const char *, off64_t))                             \
	X(utime, int, (const char *, const struct utimbuf *))                   \
	X(utimes, int, (const char *, const struct timeval *))                  \
	X(lutimes, int, (const char *, const struct timeval *))                 \
	X(futimesat, int, (int, const char *, const struct timeval *))          \
	X(utimensat, int, (int, const char *, const struct timespec *, int))    \
	X(chmod, int, (const char *, mode_t))                                   \
	X(fchmodat, int, (int, const char *, mode_t, int))                      \
	X(chown, int, (const char *, uid_t, gid_t))                             \
	X(lchown, int, (const char *, uid_t, gid_t))                            \
	X(fchownat, int, (int, const char *, uid_t, gid_t, int))                \
	X(mknod, int, (const char *, mode_t, dev_t))                            \
	X(mknodat, int, (int, const char *, mode_t, dev_t))                     \
	X(mkfifo, int, (const char *, mode_t))                                  \
	X(mkfifoat, int, (int, const char *, mode_t))                           \
	X(fstat, int, (int, struct stat *))                                     \
	X(fstat64, int, (int, struct stat64 *))                                 \
	X(readdir, struct dirent *, (DIR *))                                    \
	X(readdir64, struct dirent64 *, (DIR *))                                \
	X(readdir_r, int, (DIR *, struct dirent *, struct dirent **))           \
	X(readdir64_r, int, (DIR *, struct dirent64 *, struct dirent64 **))     \
	X(telldir, long, (DIR *))                                               \
	X(seekdir, void, (DIR *, long))                                         \
	X(rewinddir, void, (DIR *))                                             \
	X(fdopendir, DIR *, (int))                                              \
	X(getdents64, ssize_t, (int, void *, size_t))                           \
	X(fchdir, int, (int))                                                   \
	X(glob, int, (const char *, int, int (*)(const char *, int), glob_t *)) \
	X(glob64, int, (const char *, int, int (*)(const char *, int), glob64_t *)) \
	X(bindtextdomain, char *, (const char *, const char *))                 \
	X(closedir, int, (DIR *))

#define DECLARE_REAL(name, ret, args) static ret(*real_##name) args;
SHIM_FUNCS(DECLARE_REAL)
FIDELITY_FUNCS(DECLARE_REAL)
/* What a call that writes did to a name (marked()): changed it, created
 * it, removed it, or opened it for writing (created unless it existed). */
enum { W_CHANGE, W_CREATE, W_REMOVE, W_OPEN };
static void marked(long rc, int dirfd, const char *path, int follow_last, int what);
static int in_stage(const char *p, size_t n);
static int stage_readable(void);
static void dirty_inherit(void);
static void fd_note(int fd, const struct dlb_entry *e);
static DIR *dir_open(const struct dlb_entry *e, const char *canon, size_t n);
static size_t dir_fd_path(int fd, char *out, size_t cap);
static const struct dlb_entry *dir_fd_entry(int fd, const struct stat *st);
static void fstat_fix(int fd, struct stat *st);
static void proc_stat_fix(const char *path, struct stat *st);
static const struct dlb_entry *entry_via_link(const char *link, const struct stat *st);
static const struct dlb_entry *fd_staged(int fd, const struct stat *st);
static int rp_walk(const char *path, char *res, int *native, char *first);
static dev_t stage_dev;

/* glibc < 2.33 exports only the versioned __xstat family (compat symbols in
 * newer glibc, invisible to a plain dlsym). We answer them ourselves and
 * forward through the plain stat functions: on x86_64 and aarch64 the
 * _STAT_VER layout equals struct stat. */

/* ---- state, set once by shim_init ---- */
static const void *table;
static char stage_root[1024]; /* $DLBUNDLE_STAGE/root */
static size_t stage_root_len;
static int debug_on;
static char debug_dir[512];
static int inactive = -1; /* the shim has a stage but no table: the FB_* reason, else -1 */
static uid_t init_uid, init_euid; /* the ids that read the stage at start-up */
static char stage_table[1100];     /* $DLBUNDLE_STAGE/table */
static void debug_note(const char *what, const char *p, size_t n, const char *why);

static void resolve_reals(void)
{
#define RESOLVE(name, ret, args) real_##name = (ret(*) args)dlsym(RTLD_NEXT, #name);
	SHIM_FUNCS(RESOLVE)
	FIDELITY_FUNCS(RESOLVE)
}

/* ---- LD_LIBRARY_PATH: ld.so searches the stage, the app sees its own ----
 *
 * dlbundle exec maps each LD_LIBRARY_PATH entry that the image bundles as a
 * directory to its staged copy (loader.ShimEnv), so that ld.so's own probes
 * (the stat of a failed candidate's directory, which no audit module sees)
 * stay on the node-local stage. DLBUNDLE_NATIVE_ENV holds the app's own entry
 * verbatim, DLBUNDLE_MAPPED_ENV the mapped one. The audit module already
 * points environ's slot at the app's entry before any constructor runs
 * (audit.c); this is the fallback. Children that inherit the app's value
 * unchanged get the mapped one back (env_mapped). Pointer swaps only: no
 * allocation. */
extern char **environ;
static char *llp_mapped; /* "LD_LIBRARY_PATH=<mapped>", inside DLBUNDLE_MAPPED_ENV */
static char *llp_native; /* "LD_LIBRARY_PATH=<the app's own>", inside DLBUNDLE_NATIVE_ENV */

static void restore_native_env(void)
{
	char *n = getenv("DLBUNDLE_NATIVE_ENV"), *m = getenv("DLBUNDLE_MAPPED_ENV");
	if (!n || !m || strncmp(n, "LD_LIBRARY_PATH=", 16) != 0 || strncmp(m, "LD_LIBRARY_PATH=", 16) != 0 || !environ)
		return;
	for (char **e = environ; *e; e++) {
		if (strncmp(*e, "LD_LIBRARY_PATH=", 16) != 0) continue;
		/* Anything else was set by a parent after dlbundle exec: leave it. */
		if (*e == n || !strcmp(*e, m)) {
			llp_mapped = m;
			llp_native = n;
			*e = n;
		}
		return;
	}
}

/* env_for_child: the number of entries of envp, and whether it holds the
 * app's own LD_LIBRARY_PATH (unchanged) that env_mapped then swaps back. */
static int env_for_child(char *const envp[], size_t *n)
{
	int hit = 0, dirty = __atomic_load_n(&dirty_n, __ATOMIC_ACQUIRE) || __atomic_load_n(&dirty_all, __ATOMIC_ACQUIRE);
	*n = 0;
	if ((!llp_native && !dirty) || !envp) return 0;
	for (; envp[*n]; (*n)++) {
		if (llp_native && (envp[*n] == llp_native || !strcmp(envp[*n], llp_native))) hit = 1;
		/* read-your-writes: the child gets this process's dirty set (an
		 * envp copied before a write holds an older one) */
		if (dirty && !strncmp(envp[*n], "DLBUNDLE_DIRTY=", 15) && envp[*n] != dirty_env) hit = 1;
	}
	return hit;
}
/* env_mapped fills v (n + 1 slots) with envp, the mapped LD_LIBRARY_PATH and
 * the current DLBUNDLE_DIRTY swapped in. */
static char *const *env_mapped(char *const envp[], char **v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		v[i] = llp_native && (envp[i] == llp_native || !strcmp(envp[i], llp_native)) ? llp_mapped : envp[i];
		if (!strncmp(envp[i], "DLBUNDLE_DIRTY=", 15) && dirty_end > 15) v[i] = dirty_env;
	}
	v[n] = NULL;
	return v;
}

/* shim_init maps the table (one open, one mmap, one close: no fd is kept).
 * It runs as a constructor, but other libraries' constructors may call us
 * first, so every entry point calls ensure_init(). Two threads racing here do
 * the same idempotent work; the losing mapping is simply leaked. */
static volatile int init_done;
static void shim_init(void)
{
	resolve_reals();
	const char *stage = getenv("DLBUNDLE_STAGE");
	const char *dbg = getenv("DLBUNDLE_DEBUG");
	debug_on = dbg && dbg[0] == '1';
	const char *dd = getenv("DLBUNDLE_DEBUG_DIR");
	if (dd && strlen(dd) < sizeof debug_dir) strcpy(debug_dir, dd);
	if (stage && strlen(stage) > DLB_STAGE_MAX) {
		/* dlbundle exec refuses such a stage dir; say why nothing is answered. */
		static const char msg[] = "dlbundle: DLBUNDLE_STAGE is longer than 1000 bytes; the shim is "
					  "inactive and this process reads the original files (use a shorter --stage-dir)\n";
		syscall(SYS_write, 2, msg, sizeof msg - 1);
		stage = NULL;
		inactive = FB_STAGE_TOO_LONG;
	}
	_Static_assert(DLB_STAGE_MAX + 8 < sizeof stage_root, "stage_root holds DLBUNDLE_STAGE/root");
	if (stage && stage[0] == '/') {
		stage_root_len = (size_t)snprintf(stage_root, sizeof stage_root, "%s/root", stage);
		char *path = stage_table;
		snprintf(path, sizeof stage_table, "%s/table", stage);
		init_uid = (uid_t)syscall(SYS_getuid);
		init_euid = (uid_t)syscall(SYS_geteuid);
		int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd >= 0 && syscall(SYS_fstat, fd, &st) == 0 && st.st_size > 0) {
			/* MAP_POPULATE for a table of at most DLB_POPULATE_MAX bytes
			 * (table.h); this is a mapping of its own, not audit.so's. */
			int pop = (uint64_t)st.st_size <= DLB_POPULATE_MAX ? MAP_POPULATE : 0;
			void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | pop, fd, 0);
			if (m != MAP_FAILED && dlb_check(m, (size_t)st.st_size)) { table = m; stage_dev = st.st_dev; }
			else if (m != MAP_FAILED) { munmap(m, (size_t)st.st_size); inactive = FB_BAD_TABLE; }
		}
		if (fd >= 0) syscall(SYS_close, fd);
		if (!table && inactive < 0) inactive = FB_NO_TABLE;
	}
	restore_native_env();
	dirty_inherit();
	report_init();
	if (inactive >= 0) debug_note("inactive", stage ? stage : "", stage && strlen(stage) <= DLB_STAGE_MAX ? strlen(stage) : 0,
				      inactive == FB_NO_TABLE ? "the table cannot be opened or mapped (no-table); every lookup goes to the file system"
				      : inactive == FB_BAD_TABLE ? "the table is damaged or of another version (bad-table); every lookup goes to the file system"
								 : "DLBUNDLE_STAGE is too long (stage-too-long); every lookup goes to the file system");
	__atomic_store_n(&init_done, 1, __ATOMIC_RELEASE);
}
/* ---- argv[0] of a program its launcher started from the stage ----
 *
 * dlbundle exec runs a bundled executable from its staged copy with argv[0]
 * as given. A launcher that knows only a path (slurmstepd execs the path it
 * passes as argv[0], and the Slurm plugin points that at the staged copy so
 * that the kernel reads the program from the stage) starts it with argv[0]
 * = $DLBUNDLE_STAGE/root<original>. The app must see what it sees natively:
 * argv[0] is pointed at the original path, the tail of that same string
 * (no copy, no allocation), and so is glibc's program_invocation_name, which
 * glibc set from argv[0] before any constructor ran (error(3), err(3)).
 * /proc/self/cmdline still shows the staged path; /proc/self/exe is
 * answered with the original path as for exec (proc_readlink). glibc calls
 * an ELF constructor with (argc, argv, envp) on every architecture it
 * supports, and main later gets the same argv array. */
extern char *program_invocation_name;
static void unstage_argv0(int argc, char **argv)
{
	if (argc < 1 || !argv || !argv[0] || !stage_root_len || inactive >= 0) return;
	char *a = argv[0];
	if (strncmp(a, stage_root, stage_root_len) != 0 || a[stage_root_len] != '/') return;
	if (program_invocation_name == a) program_invocation_name = a + stage_root_len;
	argv[0] = a + stage_root_len;
}

__attribute__((constructor)) static void shim_ctor(int argc, char **argv, char **envp)
{
	(void)envp;
	if (!__atomic_load_n(&init_done, __ATOMIC_ACQUIRE)) shim_init();
	unstage_argv0(argc, argv);
}
static inline void ensure_init(void) { if (__builtin_expect(!__atomic_load_n(&init_done, __ATOMIC_ACQUIRE), 0)) shim_init(); }

/* ---- debug log: one write per decision, stderr or DEBUG_DIR/<pid>.log ---- */
static void debug_write(const char *line, size_t n);
static void debug_log(const char *what, const char *fn, const char *path, const char *to)
{
	if (!debug_on) return;
	char line[2 * PATH_MAX + 128];
	int n = snprintf(line, sizeof line, "dlbundle[%d]: %s %s %s%s%s\n", (int)syscall(SYS_getpid), fn, what,
			 path ? path : "(null)", to ? " -> " : "", to ? to : "");
	if (n < 0) return;
	if ((size_t)n >= sizeof line) n = sizeof line - 1;
	debug_write(line, (size_t)n);
}
static void debug_write(const char *line, size_t n)
{
	int fd = 2, close_it = 0;
	if (debug_dir[0]) {
		char p[600];
		snprintf(p, sizeof p, "%s/%d.log", debug_dir, (int)syscall(SYS_getpid));
		/* O_NONBLOCK, then a regular file of our own only: a FIFO there
		 * must not hang the app, another user's file gets nothing (as
		 * report.c). */
		fd = (int)syscall(SYS_openat, AT_FDCWD, p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0644);
		close_it = fd >= 0;
		struct stat st;
		if (fd >= 0 && (syscall(SYS_fstat, fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != (uid_t)syscall(SYS_geteuid))) {
			syscall(SYS_close, fd);
			fd = -1, close_it = 0;
		}
	}
	if (fd >= 0) syscall(SYS_write, fd, line, n);
	if (close_it) syscall(SYS_close, fd);
}

/* debug_note: a line that says when and why lookups start going to the
 * file system (docs/loader.md, "Reports and debugging"). */
static void debug_note(const char *what, const char *p, size_t n, const char *why)
{
	if (!debug_on) return;
	char line[DLB_PATH_MAX + 256];
	if (n > DLB_PATH_MAX) n = DLB_PATH_MAX;
	int k = snprintf(line, sizeof line, "dlbundle[%d]: %s %.*s: %s\n", (int)syscall(SYS_getpid), what, (int)n, p, why);
	if (k > 0) debug_write(line, (size_t)k < sizeof line ? (size_t)k : sizeof line - 1);
}

/* fallback counts a lookup passed through for a reason other than the
 * image lacking the path (report.h); r: the resolver's answer, canon its
 * output. Returns 1 when counted. */
static int fallback(const struct dlb_res *r, const char *canon)
{
	switch (r->why) {
	case DLB_WHY_WRITTEN: report_fallback(FB_WRITTEN, canon, r->why_len); return 1;
	case DLB_WHY_WRITTEN_ALL: report_fallback(FB_WRITTEN_ALL, "/", 1); return 1;
	case DLB_WHY_GROUPS: report_fallback(FB_GROUPS, "", 0); return 1;
	case DLB_WHY_TOO_LONG: report_fallback(FB_TOO_LONG, "", 0); return 1;
	}
	return 0;
}

/* ---- the lookup ---- */

/* lookup resolves *pp (relative to dirfd) against the table. Only absolute
 * paths and cwd-relative ones are looked up (getcwd is one cheap local
 * syscall); any other dirfd-relative path is DLB_UNKNOWN. When the answer is
 * DLB_UNKNOWN but the table's symlinks were followed, *pp is pointed at canon,
 * an equivalent path that does not walk them again on the original file
 * system; the caller passes *pp to the real function. */
static int lookup(const char *fn, int dirfd, const char **pp, int follow, char *canon, struct dlb_res *r)
{
	const char *path = *pp;
	r->rewritten = 0;
	r->why = DLB_WHY_LACKS;
	ensure_init();
	if (!path || !path[0]) return DLB_UNKNOWN;
	if (!table) {
		if (inactive >= 0) report_fallback(inactive, stage_root, stage_root_len > 5 ? stage_root_len - 5 : 0);
		return DLB_UNKNOWN;
	}
	char abs[DLB_PATH_MAX];
	const char *p = path;
	size_t known = 0; /* getcwd's answer is real directories: ".." over them is decided */
	int at_dir = 0;   /* relative to the fd of a listing the shim serves */
	if (path[0] != '/' && dirfd != AT_FDCWD) {
		/* dirfd(d) of a bundled directory's stream is its staged copy: look
		 * the name up as the original's (its table path is canonical), and
		 * pass an undecided one through by that absolute path, as natively
		 * the fd would name the original directory. Any other directory fd
		 * is the file system's to resolve (a fallback the report counts). */
		size_t n = dir_fd_path(dirfd, abs, sizeof abs);
		size_t pl = strlen(path);
		if (!n) {
			report_fallback(FB_DIRFD, "", 0);
			debug_log("pass", fn, path, 0);
			return DLB_UNKNOWN;
		}
		if (n + 1 + pl >= sizeof abs) {
			r->why = DLB_WHY_TOO_LONG;
			goto unknown;
		}
		if (n > 1) abs[n++] = '/';
		memcpy(abs + n, path, pl + 1);
		known = n > 1 ? n - 1 : 1;
		p = abs;
		at_dir = 1;
	} else if (path[0] != '/') {
		long n = syscall(SYS_getcwd, abs, sizeof abs);
		size_t pl = strlen(path);
		if (n > 0 && abs[0] == '/' && (size_t)n + pl + 1 >= sizeof abs) r->why = DLB_WHY_TOO_LONG;
		if (n <= 0 || abs[0] != '/' || (size_t)n + pl + 1 >= sizeof abs) goto unknown;
		known = (size_t)n - 1;
		abs[n - 1] = '/';
		memcpy(abs + n, path, pl + 1);
		p = abs;
	}
	/* The stage itself is never looked up: it may lie below a directory
	 * whose listing was taken before it existed. */
	if (!strncmp(p, stage_root, stage_root_len - 5) && (p[stage_root_len - 5] == '/' || !p[stage_root_len - 5]))
		goto unknown;
	int rc = dlb_resolve_known(table, p, known, follow, canon, r);
	/* A caller that passes a bundled name through (a directory opened)
	 * must not reach the staged copy by the fd: the original, canonical. */
	if (at_dir && rc != DLB_UNKNOWN) *pp = canon;
	if (rc == DLB_BUNDLED) { report_count(REPORT_ANSWERED, NULL); debug_log("bundled", fn, path, canon); }
	else if (rc == DLB_KNOWN_ERR) { report_count(REPORT_MISSING, NULL); debug_log("missing", fn, path, 0); }
	else goto unknown;
	return rc;
unknown:
	if (at_dir && !r->rewritten) { /* the original, by its absolute path */
		memcpy(canon, abs, strlen(abs) + 1);
		r->rewritten = 1;
	}
	if (r->rewritten) *pp = canon;
	/* The report names the path that reaches the file system, made
	 * absolute against the cwd of the moment: a relative name read after a
	 * chdir means nothing to a reader of the report. */
	if (!fallback(r, canon)) report_count(REPORT_PASSED, r->rewritten ? *pp : p);
	debug_log("pass", fn, path, r->rewritten ? canon : 0);
	return DLB_UNKNOWN;
}

/* staged builds stage_root + canon. */
static int staged(char *out, size_t outsz, const char *canon, size_t n)
{
	if (stage_root_len + n + 1 > outsz) return -1;
	memcpy(out, stage_root, stage_root_len);
	memcpy(out + stage_root_len, canon, n + 1);
	return 0;
}

/* strip_stage turns a staged path (as the kernel reports it) back into the
 * original, in place. Returns the new length. */
static size_t strip_stage(char *s, size_t n)
{
	if (stage_root_len && n > stage_root_len && memcmp(s, stage_root, stage_root_len) == 0 && s[stage_root_len] == '/') {
		memmove(s, s + stage_root_len, n - stage_root_len);
		return n - stage_root_len;
	}
	return n;
}

static int set_errno(int e) { errno = e; return -1; }

/* ---- stat ---- */

/* glibc < 2.33 exports no stat/lstat/fstatat functions (only __xstat & co.,
 * which we answer ourselves), and glibc < 2.28 no statx: pass through with
 * the system call then. On x86_64 and aarch64 struct stat is the kernel's. */
static int sys_fstatat(int dirfd, const char *path, void *st, int flags)
{
	long rc = syscall(SYS_newfstatat, dirfd, path, st, flags);
	return rc < 0 ? -1 : 0; /* syscall() already set errno */
}

/* st_blocks as the build recorded it; images without it: ext4-like values,
 * 4 KiB blocks, and none for a symlink short enough to live in the inode
 * ("fast" symlink). */
static long long blocks_of(const struct dlb_entry *e)
{
	if (e->flags & DLB_FLAG_BLOCKS) return e->blocks;
	if ((e->mode & S_IFMT) == S_IFLNK && e->size < 60) return 0;
	return ((e->size + 4095) / 4096) * 8;
}

static void fill_stat(struct stat *st, const struct dlb_entry *e)
{
	memset(st, 0, sizeof *st);
	st->st_dev = (dev_t)e->dev;
	st->st_ino = (ino_t)e->ino;
	st->st_mode = e->mode;
	st->st_nlink = e->nlink;
	st->st_uid = e->uid;
	st->st_gid = e->gid;
	st->st_size = e->size;
	st->st_blksize = 4096;
	st->st_blocks = blocks_of(e);
	st->st_atim.tv_sec = e->atime_ns / 1000000000; st->st_atim.tv_nsec = e->atime_ns % 1000000000;
	st->st_mtim.tv_sec = e->mtime_ns / 1000000000; st->st_mtim.tv_nsec = e->mtime_ns % 1000000000;
	st->st_ctim.tv_sec = e->ctime_ns / 1000000000; st->st_ctim.tv_nsec = e->ctime_ns % 1000000000;
}

/* do_stat answers a path stat; returns 1 when answered (result in *rc). */
static int do_stat(const char *fn, int dirfd, const char **pp, char *canon, int follow, struct stat *st, int *rc)
{
	struct dlb_res r;
	switch (lookup(fn, dirfd, pp, follow, canon, &r)) {
	case DLB_BUNDLED: fill_stat(st, r.ent); *rc = 0; return 1;
	case DLB_KNOWN_ERR: *rc = set_errno(r.err); return 1;
	}
	return 0;
}

int stat(const char *path, struct stat *st)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_stat("stat", AT_FDCWD, &path, canon, 1, st, &rc)) return rc;
	rc = real_stat ? real_stat(path, st) : sys_fstatat(AT_FDCWD, path, st, 0);
	if (rc == 0) proc_stat_fix(path, st);
	return rc;
}
int stat64(const char *path, struct stat64 *st)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_stat("stat64", AT_FDCWD, &path, canon, 1, (struct stat *)st, &rc)) return rc;
	rc = real_stat64 ? real_stat64(path, st) : sys_fstatat(AT_FDCWD, path, st, 0);
	if (rc == 0) proc_stat_fix(path, (struct stat *)st);
	return rc;
}
int lstat(const char *path, struct stat *st)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_stat("lstat", AT_FDCWD, &path, canon, 0, st, &rc)) return rc;
	return real_lstat ? real_lstat(path, st) : sys_fstatat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
}
int lstat64(const char *path, struct stat64 *st)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_stat("lstat64", AT_FDCWD, &path, canon, 0, (struct stat *)st, &rc)) return rc;
	return real_lstat64 ? real_lstat64(path, st) : sys_fstatat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
}
/* STAT_FLAGS: what fstatat accepts; others are EINVAL before any lookup. */
#define STAT_FLAGS (AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_EMPTY_PATH)
int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if ((!(flags & AT_EMPTY_PATH) || (path && path[0])) && !(flags & ~STAT_FLAGS))
		if (do_stat("fstatat", dirfd, &path, canon, !(flags & AT_SYMLINK_NOFOLLOW), st, &rc)) return rc;
	rc = real_fstatat ? real_fstatat(dirfd, path, st, flags) : sys_fstatat(dirfd, path, st, flags);
	if (rc == 0 && (flags & AT_EMPTY_PATH) && path && !path[0]) fstat_fix(dirfd, st);
	else if (rc == 0 && !(flags & AT_SYMLINK_NOFOLLOW)) proc_stat_fix(path, st);
	return rc;
}
int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if ((!(flags & AT_EMPTY_PATH) || (path && path[0])) && !(flags & ~STAT_FLAGS))
		if (do_stat("fstatat64", dirfd, &path, canon, !(flags & AT_SYMLINK_NOFOLLOW), (struct stat *)st, &rc)) return rc;
	rc = real_fstatat64 ? real_fstatat64(dirfd, path, st, flags) : sys_fstatat(dirfd, path, st, flags);
	if (rc == 0 && (flags & AT_EMPTY_PATH) && path && !path[0]) fstat_fix(dirfd, (struct stat *)st);
	else if (rc == 0 && !(flags & AT_SYMLINK_NOFOLLOW)) proc_stat_fix(path, (struct stat *)st);
	return rc;
}
/* Compat entry points of glibc < 2.33 (binaries built there still call them). */
int __xstat(int ver, const char *path, struct stat *st) { (void)ver; return stat(path, st); }
int __xstat64(int ver, const char *path, struct stat64 *st) { (void)ver; return stat64(path, st); }
int __lxstat(int ver, const char *path, struct stat *st) { (void)ver; return lstat(path, st); }
int __lxstat64(int ver, const char *path, struct stat64 *st) { (void)ver; return lstat64(path, st); }
int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags) { (void)ver; return fstatat(dirfd, path, st, flags); }
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags) { (void)ver; return fstatat64(dirfd, path, st, flags); }

static void fill_statx(struct statx *sx, const struct dlb_entry *e)
{
			memset(sx, 0, sizeof *sx);
			sx->stx_mask = STATX_BASIC_STATS;
			sx->stx_blksize = 4096;
			sx->stx_nlink = e->nlink;
			sx->stx_uid = e->uid;
			sx->stx_gid = e->gid;
			sx->stx_mode = (uint16_t)e->mode;
			sx->stx_ino = e->ino;
			sx->stx_size = (uint64_t)e->size;
			sx->stx_blocks = (uint64_t)blocks_of(e);
			sx->stx_atime.tv_sec = e->atime_ns / 1000000000; sx->stx_atime.tv_nsec = (uint32_t)(e->atime_ns % 1000000000);
			sx->stx_mtime.tv_sec = e->mtime_ns / 1000000000; sx->stx_mtime.tv_nsec = (uint32_t)(e->mtime_ns % 1000000000);
			sx->stx_ctime.tv_sec = e->ctime_ns / 1000000000; sx->stx_ctime.tv_nsec = (uint32_t)(e->ctime_ns % 1000000000);
			sx->stx_dev_major = major(e->dev);
			sx->stx_dev_minor = minor(e->dev);
}

int statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *sx)
{
	char canon[DLB_PATH_MAX];
	int valid = !(flags & ~(STAT_FLAGS | AT_STATX_SYNC_TYPE)) && (flags & AT_STATX_SYNC_TYPE) != AT_STATX_SYNC_TYPE &&
		    !(mask & STATX__RESERVED);
	if ((!(flags & AT_EMPTY_PATH) || (path && path[0])) && valid) {
		struct dlb_res r;
		switch (lookup("statx", dirfd, &path, !(flags & AT_SYMLINK_NOFOLLOW), canon, &r)) {
		case DLB_BUNDLED: fill_statx(sx, r.ent); (void)mask; return 0;
		case DLB_KNOWN_ERR: return set_errno(r.err);
		}
	}
	int rc = real_statx ? real_statx(dirfd, path, flags, mask, sx)
			    : (syscall(SYS_statx, dirfd, path, flags, mask, sx) < 0 ? -1 : 0);
	int empty = (flags & AT_EMPTY_PATH) && path && !path[0];
	if (rc == 0 && stage_dev && (empty || (!(flags & AT_SYMLINK_NOFOLLOW) && path && !strncmp(path, "/proc/", 6)))) {
		/* statx of a staged fd, or through a /proc link to a staged copy:
		 * the original's attributes, as fstat. */
		struct stat st;
		st.st_dev = makedev(sx->stx_dev_major, sx->stx_dev_minor);
		st.st_mode = sx->stx_mode;
		st.st_size = (off_t)sx->stx_size;
		st.st_mtim.tv_sec = sx->stx_mtime.tv_sec;
		st.st_mtim.tv_nsec = sx->stx_mtime.tv_nsec;
		const struct dlb_entry *e = empty ? fd_staged(dirfd, &st) : entry_via_link(path, &st);
		if (e) fill_statx(sx, e);
	}
	return rc;
}

/* ---- access ---- */

/* access_check answers from the table's mode and owner what the kernel would
 * for the original file: root passes R/W, and X when any x bit is set (or a dir).
 * Returns 0, -1 (errno set) or ACCESS_UNDECIDED: the caller then passes the
 * call through, so that the kernel decides. */
#define ACCESS_UNDECIDED (-2)
#define GROUPS_ON_STACK 1024 /* Linux allows 65536 supplementary groups */
static int access_check(const struct dlb_entry *e, int mode, int effective)
{
	if (mode == F_OK) return 0;
	uid_t uid = effective ? geteuid() : getuid();
	gid_t gid = effective ? getegid() : getgid();
	unsigned m = e->mode;
	if (uid == 0) {
		if ((mode & X_OK) && !(m & 0111) && (m & S_IFMT) != S_IFDIR) return set_errno(EACCES);
		return 0;
	}
	unsigned bits;
	if (uid == e->uid) bits = (m >> 6) & 7;
	else {
		int in_group = gid == e->gid;
		if (!in_group) {
			/* Any number of groups, no allocation: ask for the count, read
			 * them onto the stack; with more than GROUPS_ON_STACK (or if
			 * they changed in between: EINVAL) the kernel decides. */
			int n = getgroups(0, NULL);
			if (n < 0 || n > GROUPS_ON_STACK) return ACCESS_UNDECIDED;
			gid_t groups[n ? n : 1];
			if (n && (n = getgroups(n, groups)) < 0) return ACCESS_UNDECIDED;
			for (int i = 0; i < n; i++) if (groups[i] == e->gid) in_group = 1;
		}
		bits = in_group ? (m >> 3) & 7 : m & 7;
	}
	if ((mode & R_OK && !(bits & 4)) || (mode & W_OK && !(bits & 2)) || (mode & X_OK && !(bits & 1)))
		return set_errno(EACCES);
	return 0;
}

/* search_ok: the process may search the bundled directory e (1), may not
 * (0: EACCES), or the kernel must decide (-1). The kernel's path walk uses
 * the effective (fs) ids, and root searches every directory. errno is left
 * as it was: lookups that succeed do not touch it. */
static int search_ok(const struct dlb_entry *e)
{
	int saved = errno, a = access_check(e, X_OK, 1);
	errno = saved;
	return a == 0 ? 1 : a == ACCESS_UNDECIDED ? -1 : 0;
}

/* readable_original: the process may read the original of bundled file e
 * (1), may not (0, errno EACCES), or the kernel must decide (-1). The staged
 * copy belongs to the stage's user, so open, fopen and opendir of it ask the
 * table instead; only entries without the world-read bit need the check
 * (and its getuid calls). */
static int readable_original(const struct dlb_entry *e)
{
	if (e->mode & 04) return 1;
	int a = access_check(e, R_OK, 1);
	return a == 0 ? 1 : a == ACCESS_UNDECIDED ? -1 : 0;
}

static int do_access(const char *fn, int dirfd, const char **pp, char *canon, int mode, int flags, int *rc)
{
	struct dlb_res r;
	/* The kernel refuses bad modes and flags (EINVAL) before it looks at
	 * the path: let it. */
	if ((mode & ~(R_OK | W_OK | X_OK)) || (flags & ~(AT_EACCESS | AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH))) return 0;
	const char *path = *pp;
	switch (lookup(fn, dirfd, pp, !(flags & AT_SYMLINK_NOFOLLOW), canon, &r)) {
	case DLB_BUNDLED:
		*rc = access_check(r.ent, mode, flags & AT_EACCESS);
		return *rc != ACCESS_UNDECIDED;
	case DLB_KNOWN_ERR: *rc = set_errno(r.err); return 1;
	}
	/* access("/proc/self/exe", W_OK) of a staged executable: the kernel
	 * would check the staged copy, which is ours (writable); answer for
	 * the original, as proc_stat_fix does for stat. One stat, only for
	 * /proc paths that ask more than existence. */
	if (mode != F_OK && !(flags & AT_SYMLINK_NOFOLLOW) && path && !strncmp(path, "/proc/", 6) && stage_dev) {
		struct stat st;
		int saved = errno, s = sys_fstatat(AT_FDCWD, path, &st, 0);
		errno = saved;
		const struct dlb_entry *e = s == 0 ? entry_via_link(path, &st) : NULL;
		if (e) {
			*rc = access_check(e, mode, flags & AT_EACCESS);
			return *rc != ACCESS_UNDECIDED;
		}
	}
	return 0;
}
int access(const char *path, int mode)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_access("access", AT_FDCWD, &path, canon, mode, 0, &rc)) return rc;
	return real_access(path, mode);
}
int faccessat(int dirfd, const char *path, int mode, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_access("faccessat", dirfd, &path, canon, mode, flags, &rc)) return rc;
	return real_faccessat(dirfd, path, mode, flags);
}
int euidaccess(const char *path, int mode)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_access("euidaccess", AT_FDCWD, &path, canon, mode, AT_EACCESS, &rc)) return rc;
	return real_euidaccess(path, mode);
}
int eaccess(const char *path, int mode) { return euidaccess(path, mode); }

/* ---- /proc/self/maps: served with staged paths turned back into originals ---- */

static int is_self_proc(const char *path, const char *leaf)
{
	if (strncmp(path, "/proc/", 6) != 0) return 0;
	const char *p = path + 6, *slash = strchr(p, '/');
	if (!slash || strcmp(slash + 1, leaf) != 0) return 0;
	size_t n = (size_t)(slash - p);
	if ((n == 4 && !memcmp(p, "self", 4)) || (n == 11 && !memcmp(p, "thread-self", 11))) return 1;
	char pid[16];
	int pn = snprintf(pid, sizeof pid, "%d", (int)syscall(SYS_getpid));
	return (size_t)pn == n && !memcmp(p, pid, n);
}

/* maps_line copies one line of maps/smaps (l bytes, with its newline) to
 * out and returns the length written: every stage_root prefix removed, and
 * on a mapping of a staged copy the device and inode columns the
 * original's (the kernel's format: fs/proc/task_mmu.c show_map_vma, the
 * path padded to column 73). */
static size_t maps_line(const char *in, size_t l, char *out)
{
	const char *f[5];
	size_t fl[5], i = 0;
	for (int k = 0; k < 5; k++) {
		while (i < l && in[i] == ' ') i++;
		f[k] = in + i;
		while (i < l && in[i] != ' ' && in[i] != '\n') i++;
		fl[k] = (size_t)(in + i - f[k]);
	}
	size_t p = i;
	while (p < l && in[p] == ' ') p++;
	size_t pl = l - p;
	if (pl && in[l - 1] == '\n') pl--;
	const struct dlb_entry *e = NULL;
	if (fl[3] && memchr(f[0], '-', fl[0]) && pl > stage_root_len && !memcmp(in + p, stage_root, stage_root_len) &&
	    in[p + stage_root_len] == '/')
		e = dlb_lookup(table, in + p + stage_root_len, pl - stage_root_len);
	if (!e || e->type != DLB_REG) {
		size_t o = 0;
		for (size_t k = 0; k < l;) {
			if (l - k > stage_root_len && !memcmp(in + k, stage_root, stage_root_len) && in[k + stage_root_len] == '/') {
				k += stage_root_len;
				continue;
			}
			out[o++] = in[k++];
		}
		return o;
	}
	int o = snprintf(out, 200, "%.*s %.*s %.*s %02x:%02x %llu ", (int)fl[0], f[0], (int)fl[1], f[1], (int)fl[2], f[2],
			 major(e->dev), minor(e->dev), (unsigned long long)e->ino);
	if (o < 0) return 0;
	while (o < 73) out[o++] = ' ';
	out[o++] = ' ';
	size_t ol = pl - stage_root_len;
	memcpy(out + o, in + p + stage_root_len, ol);
	o += (int)ol;
	out[o++] = '\n';
	return (size_t)o;
}

/* serve_maps reads the real file and returns a memfd holding it with every
 * stage_root prefix removed and the staged copies' device and inode numbers
 * the originals' (anonymous mmap as the buffer: no malloc). */
static int serve_maps(const char *path, int flags)
{
	int in = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (in < 0) return -1;
	size_t cap = 1 << 20, len = 0;
	char *buf = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) { syscall(SYS_close, in); return -1; }
	for (;;) {
		if (cap - len < 65536) {
			char *nb = mremap(buf, cap, cap * 2, MREMAP_MAYMOVE);
			if (nb == MAP_FAILED) break;
			buf = nb; cap *= 2;
		}
		long n = syscall(SYS_read, in, buf + len, cap - len);
		if (n <= 0) break;
		len += (size_t)n;
	}
	syscall(SYS_close, in);
	/* The output: each line at most 40 bytes longer (dev and inode). */
	size_t ocap = len * 2 + 4096;
	char *ob = mmap(NULL, ocap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (ob == MAP_FAILED) { munmap(buf, cap); return -1; }
	size_t out = 0;
	for (size_t i = 0; i < len;) {
		char *nl = memchr(buf + i, '\n', len - i);
		size_t l = nl ? (size_t)(nl - (buf + i)) + 1 : len - i;
		out += maps_line(buf + i, l, ob + out);
		i += l;
	}
	int fd = (int)syscall(SYS_memfd_create, "maps", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
	if (fd >= 0) {
		for (size_t off = 0; off < out;) {
			long n = syscall(SYS_write, fd, ob + off, out - off);
			if (n <= 0) break;
			off += (size_t)n;
		}
		lseek(fd, 0, SEEK_SET);
	}
	munmap(buf, cap);
	munmap(ob, ocap);
	return fd;
}

static int wants_maps(const char *path) { return stage_root_len && path && (is_self_proc(path, "maps") || is_self_proc(path, "smaps")); }

/* ---- open ---- */

#define WRITE_FLAGS (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND | __O_TMPFILE)

/* do_open decides an open; returns 1 when answered (fd or -1 in *rc), 0 to
 * pass the original through. */
static int do_open(const char *fn, int dirfd, const char **pp, char *canon, int flags, int *rc)
{
	const char *path = *pp;
	ensure_init();
	if (!path) return 0;
	if (wants_maps(path) && !(flags & WRITE_FLAGS)) { *rc = serve_maps(path, flags); return 1; }
	if (flags & WRITE_FLAGS & ~O_DIRECTORY) return 0; /* open_marked, after the real call */
	if (flags & (O_DIRECTORY | O_PATH)) return 0;
	char sp[DLB_PATH_MAX + 1024];
	struct dlb_res r;
	switch (lookup(fn, dirfd, pp, !(flags & O_NOFOLLOW), canon, &r)) {
	case DLB_BUNDLED:
		if (r.ent->type == DLB_SYMLINK) { *rc = set_errno(ELOOP); return 1; } /* O_NOFOLLOW on a symlink */
		if (r.ent->type != DLB_REG) return 0; /* directories: a dir fd would expose the stage */
		switch (readable_original(r.ent)) {
		case -1: return 0;
		case 0: *rc = -1; return 1;
		}
		if (staged(sp, sizeof sp, canon, r.len) != 0) return 0;
		*rc = (int)syscall(SYS_openat, AT_FDCWD, sp, flags, 0); /* syscall(): -1 and errno on error */
		if (*rc >= 0) fd_note(*rc, r.ent);
		/* ids changed since start-up (setuid without exec): the stage is
		 * not ours to read any more; the original is. */
		else if (errno == EACCES && !stage_readable()) {
			report_fallback(FB_OTHER_UID, stage_root, stage_root_len - 5);
			*pp = path;
			return 0;
		}
		return 1;
	case DLB_KNOWN_ERR:
		*rc = set_errno(r.err);
		return 1;
	}
	return 0;
}

/* open_marked: an open that may write changes the file system there: the
 * name it opened (created, or whose content it may change) is marked
 * (marked(), read-your-writes). O_CREAT|O_EXCL and O_NOFOLLOW do not follow
 * a symlink in the last component. glibc's __O_TMPFILE includes
 * O_DIRECTORY: a plain directory open is no write, nor is an unnamed file
 * (O_TMPFILE). */
static int open_marked(int rc, int dirfd, const char *path, int flags)
{
	if ((flags & WRITE_FLAGS & ~O_DIRECTORY) && (flags & O_TMPFILE) != O_TMPFILE &&
	    (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND)))
		marked(rc, dirfd, path, !(flags & O_NOFOLLOW) && (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL),
		       (flags & O_CREAT) ? W_OPEN : W_CHANGE);
	return rc;
}

static mode_t vmode(int flags, va_list ap) { return (flags & (O_CREAT | __O_TMPFILE)) ? va_arg(ap, mode_t) : 0; }

int open(const char *path, int flags, ...)
{
	va_list ap; va_start(ap, flags); mode_t m = vmode(flags, ap); va_end(ap);
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("open", AT_FDCWD, &path, canon, flags, &rc)) return rc;
	return open_marked(real_open(path, flags, m), AT_FDCWD, path, flags);
}
int open64(const char *path, int flags, ...)
{
	va_list ap; va_start(ap, flags); mode_t m = vmode(flags, ap); va_end(ap);
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("open64", AT_FDCWD, &path, canon, flags, &rc)) return rc;
	return open_marked(real_open64(path, flags, m), AT_FDCWD, path, flags);
}
int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap; va_start(ap, flags); mode_t m = vmode(flags, ap); va_end(ap);
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("openat", dirfd, &path, canon, flags, &rc)) return rc;
	return open_marked(real_openat(dirfd, path, flags, m), dirfd, path, flags);
}
int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap; va_start(ap, flags); mode_t m = vmode(flags, ap); va_end(ap);
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("openat64", dirfd, &path, canon, flags, &rc)) return rc;
	return open_marked(real_openat64(dirfd, path, flags, m), dirfd, path, flags);
}
/* _FORTIFY_SOURCE variants (no mode argument by definition). */
int __open_2(const char *path, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("__open_2", AT_FDCWD, &path, canon, flags, &rc)) return rc;
	return open_marked(real___open_2(path, flags), AT_FDCWD, path, flags);
}
int __open64_2(const char *path, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("__open64_2", AT_FDCWD, &path, canon, flags, &rc)) return rc;
	return open_marked(real___open64_2(path, flags), AT_FDCWD, path, flags);
}
int __openat_2(int dirfd, const char *path, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("__openat_2", dirfd, &path, canon, flags, &rc)) return rc;
	return open_marked(real___openat_2(dirfd, path, flags), dirfd, path, flags);
}
int __openat64_2(int dirfd, const char *path, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("__openat64_2", dirfd, &path, canon, flags, &rc)) return rc;
	return open_marked(real___openat64_2(dirfd, path, flags), dirfd, path, flags);
}

/* fopen's internal open bypasses our open(), so fopen is decided here. A mode
 * with w, a or + writes and passes through. */
static int fopen_decide(const char *fn, const char **pp, char *canon, const char *mode, char *sp, size_t spsz, int *err, int *maps,
			const struct dlb_entry **ent)
{
	const char *path = *pp;
	ensure_init();
	*maps = 0;
	*ent = NULL;
	if (!path || !mode || strpbrk(mode, "wa+")) return DLB_UNKNOWN;
	if (wants_maps(path)) { *maps = 1; return DLB_BUNDLED; }
	struct dlb_res r;
	int rc = lookup(fn, AT_FDCWD, pp, 1, canon, &r);
	if (rc == DLB_KNOWN_ERR) { *err = r.err; return rc; }
	if (rc != DLB_BUNDLED || r.ent->type != DLB_REG) return DLB_UNKNOWN;
	switch (readable_original(r.ent)) {
	case -1: return DLB_UNKNOWN;
	case 0: *err = EACCES; return DLB_KNOWN_ERR;
	}
	if (staged(sp, spsz, canon, r.len) == 0) { *ent = r.ent; return rc; }
	return DLB_UNKNOWN;
}
/* fopen_marked: a mode with w, a or + may write (open_marked): "w" and "a"
 * create (O_CREAT), "x" does not follow a symlink (O_EXCL). */
static void fopen_marked(FILE *f, const char *path, const char *mode)
{
	if (!path || !mode || !strpbrk(mode, "wa+")) return;
	int creates = strpbrk(mode, "wa") != NULL;
	marked(f ? 0 : -1, AT_FDCWD, path, !strchr(mode, 'x'), creates ? W_OPEN : W_CHANGE);
}
static FILE *do_fopen(FILE *(*real)(const char *, const char *), const char *fn, const char *path, const char *mode)
{
	char sp[DLB_PATH_MAX + 1024], canon[DLB_PATH_MAX];
	int err = 0, maps = 0;
	const struct dlb_entry *ent;
	switch (fopen_decide(fn, &path, canon, mode, sp, sizeof sp, &err, &maps, &ent)) {
	case DLB_BUNDLED:
		if (maps) {
			int fd = serve_maps(path, strchr(mode, 'e') ? O_CLOEXEC : 0);
			return fd < 0 ? NULL : fdopen(fd, mode);
		}
		FILE *f = real(sp, mode);
		if (f) fd_note(fileno(f), ent);
		else if (errno == EACCES && !stage_readable()) { /* ids changed: the original */
			report_fallback(FB_OTHER_UID, stage_root, stage_root_len - 5);
			return real(path, mode);
		}
		return f;
	case DLB_KNOWN_ERR: errno = err; return NULL;
	}
	FILE *f = real(path, mode);
	fopen_marked(f, path, mode);
	return f;
}
FILE *fopen(const char *path, const char *mode) { ensure_init(); return do_fopen(real_fopen, "fopen", path, mode); }
FILE *fopen64(const char *path, const char *mode) { ensure_init(); return do_fopen(real_fopen64, "fopen64", path, mode); }
static FILE *do_freopen(FILE *(*real)(const char *, const char *, FILE *), const char *fn, const char *path, const char *mode, FILE *f)
{
	char sp[DLB_PATH_MAX + 1024], canon[DLB_PATH_MAX];
	int err = 0, maps = 0;
	const struct dlb_entry *ent;
	switch (path ? fopen_decide(fn, &path, canon, mode, sp, sizeof sp, &err, &maps, &ent) : DLB_UNKNOWN) {
	case DLB_BUNDLED:
		if (!maps) {
			FILE *g = real(sp, mode, f);
			if (g) fd_note(fileno(g), ent);
			return g;
		}
		break; /* freopen of /proc/self/maps: rare; native */
	case DLB_KNOWN_ERR: errno = err; fclose(f); return NULL;
	}
	FILE *g = real(path, mode, f);
	if (path) fopen_marked(g, path, mode);
	return g;
}
FILE *freopen(const char *path, const char *mode, FILE *f) { ensure_init(); return do_freopen(real_freopen, "freopen", path, mode, f); }
FILE *freopen64(const char *path, const char *mode, FILE *f) { ensure_init(); return do_freopen(real_freopen64, "freopen64", path, mode, f); }

/* ---- readlink, realpath ---- */

/* proc_readlink: links under /proc (self/exe, self/fd/N, ...) name staged
 * files when the app runs from the stage; show the original names. */
static ssize_t proc_readlink(int dirfd, const char *path, char *buf, size_t size)
{
	char tmp[DLB_PATH_MAX + 1024];
	long n = syscall(SYS_readlinkat, dirfd, path, tmp, sizeof tmp);
	if (n < 0) return -1; /* syscall() has set errno */
	size_t l = strip_stage(tmp, (size_t)n);
	if (l > size) l = size;
	memcpy(buf, tmp, l);
	return (ssize_t)l;
}

static int do_readlink(const char *fn, int dirfd, const char **pp, char *canon, char *buf, size_t size, ssize_t *rc)
{
	const char *path = *pp;
	ensure_init();
	if (!path || size == 0 || size > SSIZE_MAX) return 0; /* EINVAL from the kernel */
	if (stage_root_len && !strncmp(path, "/proc/", 6)) { *rc = proc_readlink(dirfd, path, buf, size); return 1; }
	struct dlb_res r;
	switch (lookup(fn, dirfd, pp, 0, canon, &r)) {
	case DLB_BUNDLED:
		if (r.ent->type != DLB_SYMLINK) { *rc = set_errno(EINVAL); return 1; }
		size_t l = r.ent->target_len < size ? r.ent->target_len : size;
		memcpy(buf, dlb_str(table, r.ent->target), l);
		*rc = (ssize_t)l;
		return 1;
	case DLB_KNOWN_ERR: *rc = set_errno(r.err); return 1;
	}
	return 0;
}
ssize_t readlink(const char *path, char *buf, size_t size)
{
	ssize_t rc;
	char canon[DLB_PATH_MAX];
	if (do_readlink("readlink", AT_FDCWD, &path, canon, buf, size, &rc)) return rc;
	return real_readlink(path, buf, size);
}
ssize_t readlinkat(int dirfd, const char *path, char *buf, size_t size)
{
	ssize_t rc;
	char canon[DLB_PATH_MAX];
	if (do_readlink("readlinkat", dirfd, &path, canon, buf, size, &rc)) return rc;
	return real_readlinkat(dirfd, path, buf, size);
}

/* realpath: when every component is in the table, the table's canonical path
 * is the answer (allocating only when the caller passed NULL, as libc does). */
char *realpath(const char *path, char *resolved)
{
	char canon[DLB_PATH_MAX];
	struct dlb_res r;
	if (!path) return real_realpath(path, resolved);
	if (!path[0]) { errno = ENOENT; return NULL; } /* glibc: the buffer untouched */
	ensure_init();
	if (table) {
		/* The table decides each component it knows; only the others are
		 * asked of the file system (libc's realpath would readlink all). */
		int native = 0;
		char first[DLB_PATH_MAX];
		int e = rp_walk(path, canon, &native, first);
		if (e >= 0) {
			if (native) {
				size_t fl = strlen(first), cl = dirty_cover(first, fl);
				if (cl == (size_t)-1) report_fallback(FB_WRITTEN_ALL, "/", 1);
				else if (cl) report_fallback(FB_WRITTEN, first, cl);
				else report_count(REPORT_PASSED, first);
				debug_log("pass", "realpath", path, first);
			}
			else if (e) { report_count(REPORT_MISSING, NULL); debug_log("missing", "realpath", path, 0); }
			else { report_count(REPORT_ANSWERED, NULL); debug_log("bundled", "realpath", path, canon); }
			if (e) {
				/* glibc leaves the path as far as it got in the caller's
				 * buffer after ENOENT and EACCES. */
				if (resolved && (e == ENOENT || e == EACCES)) memcpy(resolved, canon, strlen(canon) + 1);
				errno = e;
				return NULL;
			}
			size_t n = strlen(canon);
			if (n >= PATH_MAX) { errno = ENAMETOOLONG; return NULL; }
			if (!resolved && !(resolved = malloc(n + 1))) return NULL;
			memcpy(resolved, canon, n + 1);
			return resolved;
		}
	}
	switch (lookup("realpath", AT_FDCWD, &path, 1, canon, &r)) {
	case DLB_BUNDLED:
		if (r.len >= PATH_MAX) break;
		if (!resolved && !(resolved = malloc(r.len + 1))) return NULL;
		memcpy(resolved, canon, r.len + 1);
		return resolved;
	case DLB_KNOWN_ERR:
		errno = r.err;
		return NULL;
	}
	char *out = real_realpath(path, resolved);
	if (out) out[strip_stage(out, strlen(out))] = 0;
	return out;
}
char *canonicalize_file_name(const char *path) { return realpath(path, NULL); }

/* statfs/statvfs: only a path the table knows is missing is answered (the
 * file system's figures of a bundled path are the original's, which the
 * table does not hold): libselinux probes /selinux in every process. The
 * 64-bit names are aliases of these in glibc on 64-bit targets. */
int statfs(const char *path, struct statfs *buf)
{
	char canon[DLB_PATH_MAX];
	struct dlb_res r;
	if (path && lookup("statfs", AT_FDCWD, &path, 1, canon, &r) == DLB_KNOWN_ERR) return set_errno(r.err);
	return real_statfs(path, buf);
}
int statvfs(const char *path, struct statvfs *buf)
{
	char canon[DLB_PATH_MAX];
	struct dlb_res r;
	if (path && lookup("statvfs", AT_FDCWD, &path, 1, canon, &r) == DLB_KNOWN_ERR) return set_errno(r.err);
	return real_statvfs(path, buf);
}

/* _FORTIFY_SOURCE builds (Debian's python3.11) call the checking variants,
 * which glibc implements with its internal realpath/readlink: out of reach
 * unless wrapped too. Same checks as glibc (debug/realpath_chk.c and friends). */
extern void __chk_fail(void) __attribute__((noreturn));
char *__realpath_chk(const char *path, char *resolved, size_t resolvedlen)
{
	if (resolvedlen < PATH_MAX) __chk_fail();
	return realpath(path, resolved);
}
ssize_t __readlink_chk(const char *path, char *buf, size_t len, size_t buflen)
{
	if (len > buflen) __chk_fail();
	return readlink(path, buf, len);
}
ssize_t __readlinkat_chk(int dirfd, const char *path, char *buf, size_t len, size_t buflen)
{
	if (len > buflen) __chk_fail();
	return readlinkat(dirfd, path, buf, len);
}

/* ---- opendir: the directory's listing from the table (the readdir family,
 * in the fidelity section) ---- */
DIR *opendir(const char *path)
{
	char canon[DLB_PATH_MAX];
	struct dlb_res r;
	const char *asked = path;
	switch (lookup("opendir", AT_FDCWD, &path, 1, canon, &r)) {
	case DLB_BUNDLED:
		if (r.ent->type != DLB_DIR) { errno = ENOTDIR; return NULL; }
		if (!(r.ent->mode & 04)) { /* the listing is ours; the original may not be readable */
			int a = access_check(r.ent, R_OK, 1);
			if (a == ACCESS_UNDECIDED) break;
			if (a != 0) return NULL;
		}
		{
			DIR *d = dir_open(r.ent, canon, r.len);
			if (d != (DIR *)-1) return d; /* a stream, or NULL with errno */
		}
		path = asked; /* no free stream slot: the original directory */
		break;
	case DLB_KNOWN_ERR:
		errno = r.err;
		return NULL;
	}
	return real_opendir(path);
}

/* ---- exec: a bundled ELF executable runs from the stage ---- */

/* privileged_mode: a file of mode m gains privileges when executed
 * (setuid; setgid with group execute, since setgid without it means
 * mandatory locking, not privilege). m is the original's mode as the
 * builder recorded it in the image (the table's), so that deciding costs
 * no operation on the file system; an image that lies only makes the
 * program run as it would without dlbundle (bit set) or without its
 * privilege (bit cleared), never with more. */
static int privileged_mode(uint32_t m)
{
	return ((m & S_ISUID) && (m & 0111)) || ((m & S_ISGID) && (m & S_IXGRP));
}

/* exec_target returns the staged copy of path when it is a bundled ELF file
 * or, when script is not NULL, a bundled "#!" script (*script = 1; the
 * caller runs its interpreter itself, see script_argv). Other scripts are not
 * redirected: their interpreter would see the staged path in argv. Stack
 * buffers only: this runs in vfork children. */
static const char *exec_target(const char *fn, const char *path, char *sp, size_t spsz, int *err, int *script, int *priv)
{
	char canon[DLB_PATH_MAX];
	struct dlb_res r;
	const char *pp = path; /* not rewritten: the kernel hands the exec'd path to a script's interpreter */
	*err = 0;
	*priv = 0;
	if (script) *script = 0;
	switch (lookup(fn, AT_FDCWD, &pp, 1, canon, &r)) {
	case DLB_BUNDLED:
		if (r.ent->type != DLB_REG) break;
		/* A setuid or setgid original: its staged copy has neither bit
		 * (extraction drops them: an image must not create privileged
		 * files), so `passwd -S` would run as the caller and answer
		 * wrongly. The caller runs the original natively, without the
		 * shim's variables (ld.so ignores them in a secure-execution
		 * process anyway). */
		if (privileged_mode(r.ent->mode)) {
			*priv = 1;
			return path;
		}
		if (staged(sp, spsz, canon, r.len) != 0) break;
		if (!(r.ent->flags & DLB_FLAG_ELF_EXEC)) {
			/* The image may not know the kind: check the magic of the staged copy. */
			char m[4] = {0};
			int fd = (int)syscall(SYS_openat, AT_FDCWD, sp, O_RDONLY | O_CLOEXEC);
			if (fd < 0) break;
			long n = syscall(SYS_read, fd, m, 4);
			syscall(SYS_close, fd);
			if (script && n >= 2 && m[0] == '#' && m[1] == '!' && (r.ent->mode & 0111)) { *script = 1; return sp; }
			if (n != 4 || memcmp(m, "\177ELF", 4) != 0) break;
		}
		return sp;
	case DLB_KNOWN_ERR:
		*err = r.err;
		return NULL;
	}
	return path;
}

/* script_line reads the "#!" line of the staged script sp as the kernel's
 * binfmt_script does (first 256 bytes; the interpreter is the first word,
 * the rest of the line with surrounding blanks trimmed is one optional
 * argument). Returns 0 with *interp (and *arg or NULL) pointing into buf,
 * -1 when the kernel should decide (line longer than the buffer). */
static int script_line(const char *sp, char *buf, size_t bufsz, char **interp, char **arg)
{
	int fd = (int)syscall(SYS_openat, AT_FDCWD, sp, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return -1;
	long n = syscall(SYS_read, fd, buf, bufsz - 1);
	syscall(SYS_close, fd);
	if (n < 2) return -1;
	buf[n] = 0;
	char *nl = memchr(buf, '\n', (size_t)n);
	if (!nl) return -1;
	*nl = 0;
	char *p = buf + 2;
	while (*p == ' ' || *p == '\t') p++;
	if (!*p) return -1;
	*interp = p;
	while (*p && *p != ' ' && *p != '\t') p++;
	char *end = p;
	while (*p == ' ' || *p == '\t') p++;
	*end = 0;
	*arg = NULL;
	if (*p) {
		char *e = p + strlen(p);
		while (e > p && (e[-1] == ' ' || e[-1] == '\t')) e--;
		*e = 0;
		*arg = p;
	}
	return 0;
}

/* ---- a process whose ids cannot read the stage ----
 *
 * A child that changed its ids before exec (subprocess.run(user='nobody'),
 * runuser, su) cannot read a 0700 stage: the staged copy fails with EACCES
 * and ld.so prints "cannot be preloaded" for the shim objects, or exits 127
 * when LD_LIBRARY_PATH names the stage. The exec wrappers then run the
 * original file with the environment the app would have passed natively:
 * the shim's LD_PRELOAD and LD_AUDIT entries, the DLBUNDLE_* variables
 * dropped, and LD_LIBRARY_PATH as the app's own. Stack buffers only: this
 * runs in vfork children. */
/* holds_caps: the process has a permitted, effective or inheritable
 * capability (ambient ones are both permitted and inheritable). capget(2)
 * by raw system call: libcap is not linked, and no allocation (vfork
 * children run this). Version 3 fills two 32-bit words per set. */
static int holds_caps(void)
{
	struct { uint32_t version; int pid; } hdr = {0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0};
	struct { uint32_t eff, prm, inh; } d[2];
	int saved = errno;
	long rc = syscall(SYS_capget, &hdr, d);
	errno = saved;
	if (rc < 0) return 1; /* cannot tell: assume privileged, run natively */
	return (d[0].eff | d[0].prm | d[0].inh | d[1].eff | d[1].prm | d[1].inh) != 0;
}

static int stage_readable(void)
{
	if (!stage_table[0]) return 1;
	uid_t u = (uid_t)syscall(SYS_getuid), e = (uid_t)syscall(SYS_geteuid);
	if (u == init_uid && e == init_euid) return 1;
	/* Ids changed and capabilities kept (PR_SET_KEEPCAPS, as setpriv
	 * --reuid does, or ambient ones): CAP_DAC_* would pass the check below
	 * for a process whose exec'd child, once the kernel drops them, cannot
	 * read the stage; and a child that keeps them (ambient) must not load
	 * code from a stage its new uid may write. Either way: native. */
	if (holds_caps()) return 0;
	int saved = errno;
	long rc = syscall(SYS_faccessat2, AT_FDCWD, stage_table, R_OK, AT_EACCESS);
	if (rc < 0 && errno == ENOSYS) rc = syscall(SYS_faccessat, AT_FDCWD, stage_table, R_OK);
	errno = saved;
	return rc == 0;
}

/* shim_entry: an LD_PRELOAD/LD_AUDIT entry p[0:n] is one of the stage's. */
static int shim_entry(const char *p, size_t n)
{
	size_t sl = stage_root_len > 5 ? stage_root_len - 5 : 0; /* the stage dir */
	return sl && n > sl && !memcmp(p, stage_root, sl) && p[sl] == '/';
}

/* env_native_len: the size of the buffer env_native needs for envp. */
static size_t env_native_len(char *const envp[], size_t *n)
{
	size_t bytes = 0;
	*n = 0;
	for (; envp && envp[*n]; (*n)++)
		if (!strncmp(envp[*n], "LD_PRELOAD=", 11) || !strncmp(envp[*n], "LD_AUDIT=", 9)) bytes += strlen(envp[*n]) + 1;
	return bytes + 1;
}

/* env_native fills v (n + 1 slots) with envp as the app would pass it
 * natively; buf holds the rewritten LD_PRELOAD/LD_AUDIT values. */
static char *const *env_native(char *const envp[], char **v, size_t n, char *buf)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		char *e = envp[i];
		if (!strncmp(e, "DLBUNDLE_", 9)) continue;
		if (llp_mapped && (e == llp_mapped || !strcmp(e, llp_mapped))) e = llp_native;
		size_t nl = !strncmp(e, "LD_PRELOAD=", 11) ? 11 : !strncmp(e, "LD_AUDIT=", 9) ? 9 : 0;
		if (nl) {
			/* keep the entries that are not the shim's (separated by ':'
			 * or, for LD_PRELOAD, blanks) */
			char *o = buf;
			memcpy(o, e, nl);
			o += nl;
			int any = 0;
			for (const char *q = e + nl; *q;) {
				size_t l = strcspn(q, nl == 11 ? ": \t" : ":");
				if (l && !shim_entry(q, l)) {
					if (any) *o++ = ':';
					memcpy(o, q, l);
					o += l;
					any = 1;
				}
				q += l;
				if (*q) q++;
			}
			*o++ = 0;
			if (!any) continue;
			e = buf;
			buf = o;
		}
		v[k++] = e;
	}
	v[k] = NULL;
	return v;
}

/* exec_native: execve of path itself, without the shim, for ids that
 * cannot read the stage. */
static int exec_native(const char *path, char *const argv[], char *const envp[])
{
	size_t n, bytes = env_native_len(envp, &n);
	char *v[n + 1], buf[bytes];
	debug_log("other-uid", "execve", path, 0);
	return real_execve(path, argv, env_native(envp, v, n, buf));
}

/* script_argv fills v (room for argc + 4 pointers) with what the kernel
 * gives a "#!" script's interpreter: interp, its one optional argument,
 * the script's path as given, then argv[1..argc-1]. execve and
 * posix_spawn of a bundled script both build it. */
static void script_argv(char **v, char *interp, char *arg, const char *path, char *const argv[], int argc)
{
	int k = 0;
	v[k++] = interp;
	if (arg) v[k++] = arg;
	v[k++] = (char *)path;
	for (int i = 1; i < argc; i++) v[k++] = argv[i];
	v[k] = NULL;
}

/* execve: a bundled ELF runs from its staged copy; a bundled "#!" script is
 * started as the kernel would start it, with the interpreter (itself looked
 * up here, so a bundled one runs from the stage) and argv = interpreter,
 * optional argument, the script's path AS GIVEN, argv[1..]: the interpreter
 * then reads the script through the shim, and argv, /proc/self/exe and
 * sys.executable are the native ones. At most 4 nested interpreters (the
 * kernel's limit: ELOOP after). */
static int execve_depth(const char *path, char *const argv[], char *const envp[], int depth)
{
	char sp[DLB_PATH_MAX + 1024];
	int err, script, priv;
	if (!stage_readable()) return exec_native(path, argv, envp);
	const char *t = exec_target("execve", path, sp, sizeof sp, &err, &script, &priv);
	if (!t) return set_errno(err);
	if (priv) return exec_native(path, argv, envp);
	if (script) {
		char line[256], *interp, *arg;
		if (script_line(sp, line, sizeof line, &interp, &arg) == 0) {
			if (depth >= 4) return set_errno(ELOOP);
			int argc = 0;
			while (argv && argv[argc]) argc++;
			char *v[argc + 4];
			script_argv(v, interp, arg, path, argv, argc);
			return execve_depth(interp, v, envp, depth + 1);
		}
		t = path; /* the kernel decides */
	}
	size_t n;
	if (env_for_child(envp, &n)) {
		char *v[n + 1]; /* on the stack: this runs in vfork children */
		return real_execve(t, argv, env_mapped(envp, v, n));
	}
	return real_execve(t, argv, envp);
}

int execve(const char *path, char *const argv[], char *const envp[]) { return execve_depth(path, argv, envp, 0); }
int execv(const char *path, char *const argv[]) { return execve(path, argv, environ); }

/* execvp/execvpe: glibc's own PATH search calls its internal execve, which we
 * cannot see, so search PATH here as glibc does: try each candidate, go on
 * after ENOENT/ENOTDIR/EACCES (reporting EACCES if nothing else ran), run a
 * file without an ELF or #! header with /bin/sh (ENOEXEC), as glibc does.
 * Candidates the table knows are missing cost no syscall. */
static int exec_search(const char *file, char *const argv[], char *const envp[])
{
	if (!file || !file[0]) return set_errno(ENOENT);
	if (strchr(file, '/')) return execve(file, argv, envp);
	const char *path = getenv("PATH");
	if (!path) path = "/bin:/usr/bin";
	size_t fl = strlen(file);
	int saw_eacces = 0;
	for (const char *p = path;;) {
		const char *e = strchr(p, ':');
		size_t dl = e ? (size_t)(e - p) : strlen(p);
		char cand[DLB_PATH_MAX];
		if (dl + fl + 2 <= sizeof cand) {
			if (dl) { memcpy(cand, p, dl); cand[dl++] = '/'; } /* "" is the cwd */
			memcpy(cand + dl, file, fl + 1);
			execve(cand, argv, envp);
			if (errno == ENOEXEC) {
				int argc = 0;
				while (argv[argc]) argc++;
				char *sh[argc + 3];
				sh[0] = (char *)"/bin/sh";
				sh[1] = cand;
				for (int i = 1; i <= argc; i++) sh[i + 1] = argv[i];
				execve("/bin/sh", sh, envp);
				return -1;
			}
			if (errno == EACCES) saw_eacces = 1;
			else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ENODEV && errno != ETIMEDOUT)
				return -1;
		}
		if (!e) break;
		p = e + 1;
	}
	return set_errno(saw_eacces ? EACCES : ENOENT);
}
int execvp(const char *file, char *const argv[]) { return exec_search(file, argv, environ); }
int execvpe(const char *file, char *const argv[], char *const envp[]) { return exec_search(file, argv, envp); }

/* shim_from_outside (report.h): l_name of a loaded object names a file ld.so
 * opened from outside the image. Objects ld.so opened from the stage carry
 * their original name (la_objopen), which the table holds as bundled; any
 * other absolute name outside the stage dir is the real file system's.
 * Called once per object at exit, possibly in a signal handler: the table
 * lookup allocates nothing; the static buffer is used by the one report
 * writer only. */
int shim_from_outside(const char *name)
{
	static char canon[DLB_PATH_MAX];
	struct dlb_res r;
	if (!table || !name || name[0] != '/') return 0;
	size_t sl = stage_root_len - 5;
	if (!strncmp(name, stage_root, sl) && name[sl] == '/') return 0; /* the shim's own objects */
	return dlb_resolve(table, name, 1, canon, &r) != DLB_BUNDLED;
}

/* shim_unstage (report.h): the report's exe is what /proc/self/exe names,
 * the staged copy when the executable ran from the stage; the report gives
 * its original path, as readlink of it through the shim does. In place, no
 * allocation (called from the report writer, possibly in a signal handler). */
size_t shim_unstage(char *path, size_t len) { return strip_stage(path, len); }

/* _exit, _Exit: processes that end this way (dash, os._exit, children after
 * fork) skip destructors; write their report first. */
void _exit(int status)
{
	report_write();
	syscall(SYS_exit_group, status);
	__builtin_unreachable();
}
void _Exit(int status) { _exit(status); }

/* dlinfo(RTLD_DI_ORIGIN): ld.so computed the origin of an object loaded from
 * the stage from its staged name; show the original directory. */
int dlinfo(void *handle, int request, void *arg)
{
	ensure_init();
	if (!real_dlinfo) return -1;
	int rc = real_dlinfo(handle, request, arg);
	if (rc == 0 && request == RTLD_DI_ORIGIN && arg) {
		char *o = arg;
		size_t n = strip_stage(o, strlen(o));
		o[n] = 0;
	}
	return rc;
}

/* dlclose: a library from outside the image that is closed before exit is
 * still listed in the report (report.c, outside_list). */
int dlclose(void *handle)
{
	ensure_init();
	struct link_map *lm = NULL;
	if (handle && real_dlinfo && real_dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name)
		report_closing(lm->l_name);
	return real_dlclose ? real_dlclose(handle) : -1;
}

/* dlerror: ld.so's messages name the file it opened, which for a bundled
 * library is the staged copy; show the original (a per-thread copy, as the
 * message itself is per-thread). */
char *dlerror(void)
{
	static __thread char msg[2 * DLB_PATH_MAX];
	ensure_init();
	char *e = real_dlerror();
	/* stage_root minus "/root": the stage dir, for STAGE/nolib/NAME, the
	 * audit object's answer for a dlopen that the table says fails: the
	 * native message names NAME alone. */
	size_t sl = stage_root_len - 5;
	if (!e || !stage_root_len || !memmem(e, strlen(e), stage_root, sl)) return e;
	size_t o = 0;
	for (const char *s = e; *s && o + 1 < sizeof msg;) {
		if (!strncmp(s, stage_root, stage_root_len) && s[stage_root_len] == '/') { s += stage_root_len; continue; }
		if (!strncmp(s, stage_root, sl) && !strncmp(s + sl, "/nolib/", 7)) { s += sl + 7; continue; }
		msg[o++] = *s++;
	}
	msg[o] = 0;
	return msg;
}

/* spawn_native: posix_spawn of path itself with the environment the app
 * would pass natively (exec_native's). */
static int spawn_native(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	size_t n, bytes = env_native_len(envp, &n);
	char *v[n + 1], buf[bytes];
	return real_posix_spawn(pid, path, fa, attr, argv, env_native(envp, v, n, buf));
}

/* spawn_depth: posix_spawn as execve_depth: a bundled ELF from the stage, a
 * bundled "#!" script through its interpreter as the kernel would start it
 * (at most 4 levels). */
static int spawn_depth(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		       const posix_spawnattr_t *attr, char *const argv[], char *const envp[], int depth)
{
	char sp[DLB_PATH_MAX + 1024];
	int err, script, priv;
	const char *t = exec_target("posix_spawn", path, sp, sizeof sp, &err, &script, &priv);
	if (!t) return err;
	if (priv) return spawn_native(pid, path, fa, attr, argv, envp);
	if (script) {
		char line[256], *interp, *arg;
		if (script_line(sp, line, sizeof line, &interp, &arg) == 0) {
			if (depth >= 4) return ELOOP;
			int argc = 0;
			while (argv && argv[argc]) argc++;
			char *v[argc + 4];
			script_argv(v, interp, arg, path, argv, argc);
			return spawn_depth(pid, interp, fa, attr, v, envp, depth + 1);
		}
		t = path; /* the kernel decides */
	}
	size_t n;
	if (env_for_child(envp, &n)) {
		char *v[n + 1];
		return real_posix_spawn(pid, t, fa, attr, argv, env_mapped(envp, v, n));
	}
	return real_posix_spawn(pid, t, fa, attr, argv, envp);
}

int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	if (!stage_readable()) return spawn_native(pid, path, fa, attr, argv, envp);
	return spawn_depth(pid, path, fa, attr, argv, envp, 0);
}

/* posix_spawnp: walk PATH through the table; the first bundled ELF wins, a
 * known-missing candidate is skipped, and the first one the table cannot
 * decide hands the whole search to libc (which then repeats it natively). */
static int spawnp_search(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			 const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	if (!file || !file[0] || strchr(file, '/') || !table)
		return strchr(file ? file : "", '/') ? posix_spawn(pid, file, fa, attr, argv, envp)
						      : real_posix_spawnp(pid, file, fa, attr, argv, envp);
	const char *path = getenv("PATH");
	if (!path) path = "/bin:/usr/bin";
	size_t fl = strlen(file);
	for (const char *p = path;;) {
		const char *e = strchr(p, ':');
		size_t dl = e ? (size_t)(e - p) : strlen(p);
		char cand[DLB_PATH_MAX], sp[DLB_PATH_MAX + 1024];
		if (dl == 0 || p[0] != '/' || dl + fl + 2 > sizeof cand) break; /* "" means cwd: leave it to libc */
		memcpy(cand, p, dl);
		cand[dl] = '/';
		memcpy(cand + dl + 1, file, fl + 1);
		int err, script, priv;
		const char *t = exec_target("posix_spawnp", cand, sp, sizeof sp, &err, &script, &priv);
		if (priv) return spawn_native(pid, cand, fa, attr, argv, envp);
		if (t == sp) return script ? spawn_depth(pid, cand, fa, attr, argv, envp, 0) : real_posix_spawn(pid, t, fa, attr, argv, envp);
		if (t) break; /* undecided */
		if (!e) break;
		p = e + 1;
	}
	return real_posix_spawnp(pid, file, fa, attr, argv, envp);
}

int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
		 const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	ensure_init();
	size_t n;
	if (!stage_readable()) {
		size_t bytes = env_native_len(envp, &n);
		char *v[n + 1], buf[bytes];
		return real_posix_spawnp(pid, file, fa, attr, argv, env_native(envp, v, n, buf));
	}
	if (env_for_child(envp, &n)) {
		char *v[n + 1];
		return spawnp_search(pid, file, fa, attr, argv, env_mapped(envp, v, n));
	}
	return spawnp_search(pid, file, fa, attr, argv, envp);
}

/* ==== Fidelity: read-your-writes, listings' d_ino, fstat of staged fds ==== */

/* ---- the dirty set ----
 *
 * Two kinds of marks (docs/loader.md, "Read-your-writes"): a name (its
 * canonical path) whose entry, and everything below it, the process
 * changed -- created, removed, renamed, written, chmod-ed...: the resolver
 * leaves it and all below it to the kernel (DLB_DIRTY); and a directory
 * whose listing changed (a name created or removed in it): stat and
 * opendir of the directory itself go to the kernel (DLB_LISTING), the names
 * in it that the table holds are still answered, and a name created there
 * is a mark of the first kind. In DLBUNDLE_DIRTY a listing mark is written
 * "+" + path. */
enum { MARK_NAME = 0, MARK_LISTING = 1 };

static int dirty_kind_is(const char *p, size_t n, uint64_t h, unsigned kind)
{
	unsigned k = __atomic_load_n(&dirty_n, __ATOMIC_ACQUIRE);
	for (unsigned i = 0; i < k; i++)
		if (dirty_set[i].hash == h && dirty_set[i].len == n && dirty_set[i].kind == kind &&
		    !memcmp(dirty_env + dirty_set[i].off, p, n))
			return 1;
	return 0;
}
static int dirty_is(const char *p, size_t n, uint64_t h) { return dirty_kind_is(p, n, h, MARK_NAME); }
static int listing_is(const char *p, size_t n, uint64_t h) { return dirty_kind_is(p, n, h, MARK_LISTING); }

/* dirty_covered: p[0:n] or one of its ancestors is marked as a name. */
static int dirty_covered(const char *p, size_t n)
{
	if (__atomic_load_n(&dirty_all, __ATOMIC_ACQUIRE)) return 1;
	if (!__atomic_load_n(&dirty_n, __ATOMIC_ACQUIRE)) return 0;
	uint64_t h = DLB_HASH_INIT;
	for (size_t i = 1; i <= n; i++) {
		if (i == n || p[i] == '/') {
			if (dirty_is(p, i, dlb_hash_more(h, p, i))) return 1;
		}
	}
	return 0;
}

/* dirty_cover: the length of the name mark that covers p[0:n] (itself or
 * an ancestor), (size_t)-1 when everything is marked, 0 for none. */
static size_t dirty_cover(const char *p, size_t n)
{
	if (__atomic_load_n(&dirty_all, __ATOMIC_ACQUIRE)) return (size_t)-1;
	if (!__atomic_load_n(&dirty_n, __ATOMIC_ACQUIRE)) return 0;
	uint64_t h = DLB_HASH_INIT;
	for (size_t i = 1; i <= n; i++)
		if ((i == n || p[i] == '/') && dirty_is(p, i, dlb_hash_more(h, p, i))) return i;
	return 0;
}

static int dirty_lock;

/* dirty_append adds "\n" + [+]p (or that first) to dirty_env so that the
 * string is valid at every moment (a thread may exec meanwhile): the bytes
 * go after the terminator, and one store of the old terminator's byte
 * publishes them. Returns the offset of p in dirty_env. */
static int dirty_append(const char *p, size_t n, unsigned kind)
{
	int first = dirty_end == 15;
	size_t at = dirty_end + (first ? 0 : 1), k = kind == MARK_LISTING;
	if (n == 0 || at + k + n + 1 > sizeof dirty_env - (n == 1 ? 0 : 3)) return -1; /* 3: room for "\n/" */
	char lead = k ? '+' : p[0];
	if (first) {
		if (k) memcpy(dirty_env + at + 1, p, n);
		else memcpy(dirty_env + at + 1, p + 1, n - 1);
	} else {
		if (k) dirty_env[at++] = '+';
		memcpy(dirty_env + at, p, n);
		at -= k;
	}
	dirty_env[at + k + n] = 0;
	__atomic_store_n(&dirty_env[dirty_end], first ? lead : '\n', __ATOMIC_RELEASE);
	dirty_end = at + k + n;
	return (int)(at + k);
}

static void dirty_everything(void)
{
	if (dirty_all) return;
	dirty_append("/", 1, MARK_NAME);
	__atomic_store_n(&dirty_all, 1, __ATOMIC_RELEASE);
	debug_note("written-everything", "/", 1, "from now on every lookup goes to the file system "
						   "(a write the shim could not place, or more than 64 marks)");
}

/* dirty_push records p[0:n] of the given kind; lock held. Returns 0, or
 * -1 when the set is full (the caller makes everything dirty). */
static int dirty_push(const char *p, size_t n, unsigned kind)
{
	if (n == 1 && kind == MARK_NAME) return -1; /* "/" itself: everything */
	if (memchr(p, '\n', n) || dirty_n >= DIRTY_MAX) return -1;
	int at = dirty_append(p, n, kind);
	if (at < 0) return -1;
	dirty_set[dirty_n] = (struct dirty_dir){dlb_hash(p, n), (uint32_t)at, (uint32_t)n, kind};
	__atomic_store_n(&dirty_n, dirty_n + 1, __ATOMIC_RELEASE);
	return 0;
}

/* A directory in which more than SIBLINGS_MAX names are marked is marked
 * whole instead (a process writing many files into one directory fills
 * the fixed set otherwise; everything below it then goes to the kernel). */
#define SIBLINGS_MAX 8

static size_t parent_len(const char *p, size_t n)
{
	while (n > 1 && p[n - 1] != '/') n--;
	return n > 1 ? n - 1 : 1;
}

/* dirty_add marks the canonical path p[0:n] (kind). */
static void dirty_add(const char *p, size_t n, unsigned kind)
{
	if (n == 0 || p[0] != '/' || dirty_covered(p, n)) return;
	if (kind == MARK_LISTING && listing_is(p, n, dlb_hash(p, n))) return;
	/* The lock is held for a few stores; a signal handler that writes
	 * while its thread holds it would spin forever: after a while, give up
	 * and make everything dirty (always correct). */
	for (long spins = 0; __atomic_exchange_n(&dirty_lock, 1, __ATOMIC_ACQUIRE); spins++) {
		if (spins > 100000000) {
			__atomic_store_n(&dirty_all, 1, __ATOMIC_RELEASE);
			return;
		}
	}
	if (kind == MARK_NAME) {
		size_t pl = parent_len(p, n);
		unsigned sib = 0;
		for (unsigned i = 0; i < dirty_n; i++) {
			const char *q = dirty_env + dirty_set[i].off;
			size_t ql = dirty_set[i].len;
			if (dirty_set[i].kind == MARK_NAME && ql > pl && parent_len(q, ql) == pl && !memcmp(q, p, pl)) sib++;
		}
		if (sib >= SIBLINGS_MAX) n = pl; /* the whole directory */
	}
	if (dirty_push(p, n, kind) != 0) dirty_everything();
	__atomic_store_n(&dirty_lock, 0, __ATOMIC_RELEASE);
	debug_note(kind == MARK_LISTING ? "written (listing)" : "written", p, n,
		   kind == MARK_LISTING ? "from now on stat and opendir of this directory go to the file system"
					: "from now on lookups at or below it go to the file system");
}

/* dirty_inherit reads DLBUNDLE_DIRTY (newline-separated marks, from the
 * parent's shim) and points environ's slot at dirty_env, so that every
 * child, however started, inherits the current set. Runs in shim_init. */
static void dirty_inherit(void)
{
	if (!environ) return;
	for (char **e = environ; *e; e++) {
		if (strncmp(*e, "DLBUNDLE_DIRTY=", 15) != 0) continue;
		for (const char *s = *e + 15; *s;) {
			const char *nl = strchr(s, '\n');
			size_t n = nl ? (size_t)(nl - s) : strlen(s);
			unsigned kind = MARK_NAME;
			const char *m = s;
			if (n > 1 && s[0] == '+') { kind = MARK_LISTING; m++; n--; }
			if (n == 1 && m[0] == '/' && kind == MARK_NAME) dirty_everything();
			else if (n >= 1 && m[0] == '/' && dirty_push(m, n, kind) != 0) dirty_everything();
			if (!nl) break;
			s = nl + 1;
		}
		*e = dirty_env;
		return;
	}
}

/* ---- calls that write: the real call, then mark what it changed ----
 *
 * A call that failed changed nothing (the kernel checks before it
 * changes), so it marks nothing; one whose outcome is unknown (EINTR, EIO,
 * an errno not listed here) marks as if it succeeded. What a call marks
 * (docs/loader.md, call by call): the name it created, removed, renamed or
 * changed (after a symlink in the last component, for calls that follow
 * one), with what is below it, when the table holds that name or its
 * directory as bundled; and, for a name created or removed, its
 * directory's listing. Names the table cannot answer need no mark: their
 * lookups reach the kernel anyway. */
static int nothing_changed(int e)
{
	switch (e) {
	case EEXIST: case ENOENT: case ENOTDIR: case EACCES: case EPERM: case EROFS: case ELOOP:
	case ENAMETOOLONG: case EFAULT: case EINVAL: case EISDIR: case EXDEV: case ENOTEMPTY: case EBUSY:
	case ETXTBSY: case EBADF: case EMLINK: case ENOSPC: case EDQUOT: case EMFILE: case ENFILE:
		return 1;
	}
	return 0;
}

/* kernel_canon: the real path of path as the kernel resolves it now (one
 * O_PATH open, its /proc/self/fd link, a close), for a write whose
 * directory the table cannot name: an unknown symlink may lead into the
 * image. Returns the length, 0 if it cannot. */
static size_t kernel_canon(const char *path, int follow, char *out)
{
	int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_PATH | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
	if (fd < 0) return 0;
	char l[40];
	snprintf(l, sizeof l, "/proc/self/fd/%d", fd);
	long n = syscall(SYS_readlinkat, AT_FDCWD, l, out, DLB_PATH_MAX - 1);
	syscall(SYS_close, fd);
	if (n <= 0 || out[0] != '/' || in_stage(out, (size_t)n)) return 0;
	out[n] = 0;
	return (size_t)n;
}

/* canon_dir: the canonical path of the directory abs[0:n] (n == 1: "/"),
 * through the table, or the kernel when the table cannot name it. */
static size_t canon_dir(char *abs, size_t n, size_t known, char *out)
{
	struct dlb_res r;
	char save = abs[n];
	abs[n] = 0;
	int rc = dlb_resolve_known(table, abs, known < n ? known : 0, 1, out, &r);
	size_t len = 0;
	if (rc == DLB_BUNDLED || (rc == DLB_UNKNOWN && !r.outside)) len = r.len;
	else len = kernel_canon(abs, 1, out);
	abs[n] = save;
	return len;
}

/* mark_name applies the rule to the canonical name p[0:n]. */
static void mark_name(const char *p, size_t n, int what)
{
	if (n == 0) return;
	size_t pl = parent_len(p, n);
	const struct dlb_entry *e = dlb_lookup(table, p, n);
	const struct dlb_entry *d = n > 1 ? dlb_lookup(table, p, pl) : NULL;
	int dir_bundled = d && d->type == DLB_DIR;
	if (what == W_OPEN) /* created unless the table holds it as present */
		what = e && e->type != DLB_MISSING ? W_CHANGE : W_CREATE;
	if (e || dir_bundled) dirty_add(p, n, MARK_NAME);
	if (dir_bundled && what != W_CHANGE) dirty_add(p, pl, MARK_LISTING);
}

/* marked is called after every call that may have changed the file system
 * at path (relative to dirfd), with its result rc (< 0: failed, errno).
 * follow_last: the call acts on what a symlink in the last component leads
 * to. Keeps errno. Not on the lookup path: it may make system calls
 * (getcwd, readlink of a dirfd, and kernel_canon). */
static void marked(long rc, int dirfd, const char *path, int follow_last, int what)
{
	int saved = errno;
	if (rc < 0 && nothing_changed(saved)) return;
	ensure_init();
	if (!table || !path || !path[0]) goto out;
	char abs[DLB_PATH_MAX], canon[DLB_PATH_MAX];
	size_t known = 0, pl = strlen(path);
	if (path[0] == '/') {
		if (pl >= sizeof abs) goto out;
		memcpy(abs, path, pl + 1);
	} else {
		long n;
		if (dirfd == AT_FDCWD) n = syscall(SYS_getcwd, abs, sizeof abs);
		else {
			char l[40];
			snprintf(l, sizeof l, "/proc/self/fd/%d", dirfd);
			n = syscall(SYS_readlinkat, AT_FDCWD, l, abs, sizeof abs - 1);
			if (n > 0) abs[n++] = 0;
		}
		if (n <= 1 || abs[0] != '/' || (size_t)n + pl + 1 >= sizeof abs) {
			dirty_everything(); /* cannot tell where */
			goto out;
		}
		known = (size_t)n - 1;
		abs[n - 1] = '/';
		memcpy(abs + n, path, pl + 1);
	}
	size_t an = strlen(abs);
	while (an > 1 && abs[an - 1] == '/') abs[--an] = 0;
	size_t slash = an;
	while (slash > 0 && abs[slash - 1] != '/') slash--;
	const char *last = abs + slash;
	size_t cn;
	if (!*last || !strcmp(last, ".") || !strcmp(last, "..")) {
		/* The path names a directory by itself ("/", "x/.."): that one. */
		cn = canon_dir(abs, an, known, canon);
	} else {
		size_t dn = slash > 1 ? slash - 1 : 1; /* the directory part ("/" for "/name") */
		cn = canon_dir(abs, dn, known, canon);
		if (cn && cn + 1 + (an - slash) < sizeof canon) {
			if (cn > 1) canon[cn++] = '/';
			memcpy(canon + cn, last, an - slash + 1);
			cn += an - slash;
		} else cn = 0;
		if (cn && follow_last) {
			/* What a symlink there leads to is what changed. */
			struct dlb_res r;
			char t[DLB_PATH_MAX];
			int rr = dlb_resolve(table, canon, 1, t, &r);
			if (rr == DLB_BUNDLED || (rr == DLB_KNOWN_ERR && r.err == DLB_ENOENT && r.len)) {
				memcpy(canon, t, r.len);
				canon[cn = r.len] = 0;
			} else if (rr == DLB_UNKNOWN && r.outside) {
				size_t k = kernel_canon(canon, 1, t);
				if (k) memcpy(canon, t, (cn = k) + 1);
			}
		}
	}
	if (!cn) dirty_everything(); /* cannot name it: everything */
	else mark_name(canon, cn, what);
out:
	errno = saved;
}

/* Each wrapper falls back to the system call where this glibc lacks the
 * function (renameat2 before 2.28, mknod before 2.33 ...). */
#define W0(call) long rc = (call)
int creat(const char *p, mode_t m)
{
	W0(real_creat ? real_creat(p, m) : (int)syscall(SYS_openat, AT_FDCWD, p, O_CREAT | O_WRONLY | O_TRUNC, m));
	marked(rc, AT_FDCWD, p, 1, W_OPEN);
	return (int)rc;
}
int creat64(const char *p, mode_t m)
{
	W0(real_creat64 ? real_creat64(p, m) : (int)syscall(SYS_openat, AT_FDCWD, p, O_CREAT | O_WRONLY | O_TRUNC, m));
	marked(rc, AT_FDCWD, p, 1, W_OPEN);
	return (int)rc;
}
int rename(const char *a, const char *b)
{
	W0(real_rename(a, b));
	marked(rc, AT_FDCWD, a, 0, W_REMOVE);
	marked(rc, AT_FDCWD, b, 0, W_CREATE);
	return (int)rc;
}
int renameat(int fa, const char *a, int fb, const char *b)
{
	W0(real_renameat(fa, a, fb, b));
	marked(rc, fa, a, 0, W_REMOVE);
	marked(rc, fb, b, 0, W_CREATE);
	return (int)rc;
}
int renameat2(int fa, const char *a, int fb, const char *b, unsigned fl)
{
	W0(real_renameat2 ? real_renameat2(fa, a, fb, b, fl) : (int)syscall(SYS_renameat2, fa, a, fb, b, fl));
	marked(rc, fa, a, 0, W_REMOVE); /* RENAME_EXCHANGE: both names change */
	marked(rc, fb, b, 0, W_CREATE);
	return (int)rc;
}
int unlink(const char *p) { W0(real_unlink(p)); marked(rc, AT_FDCWD, p, 0, W_REMOVE); return (int)rc; }
int unlinkat(int fd, const char *p, int fl) { W0(real_unlinkat(fd, p, fl)); marked(rc, fd, p, 0, W_REMOVE); return (int)rc; }
int remove(const char *p) { W0(real_remove(p)); marked(rc, AT_FDCWD, p, 0, W_REMOVE); return (int)rc; }
int mkdir(const char *p, mode_t m) { W0(real_mkdir(p, m)); marked(rc, AT_FDCWD, p, 0, W_CREATE); return (int)rc; }
int mkdirat(int fd, const char *p, mode_t m) { W0(real_mkdirat(fd, p, m)); marked(rc, fd, p, 0, W_CREATE); return (int)rc; }
int rmdir(const char *p) { W0(real_rmdir(p)); marked(rc, AT_FDCWD, p, 0, W_REMOVE); return (int)rc; }
int symlink(const char *t, const char *p) { W0(real_symlink(t, p)); marked(rc, AT_FDCWD, p, 0, W_CREATE); return (int)rc; }
int symlinkat(const char *t, int fd, const char *p) { W0(real_symlinkat(t, fd, p)); marked(rc, fd, p, 0, W_CREATE); return (int)rc; }
int link(const char *a, const char *b)
{
	/* The source's nlink and ctime change too (link(2) does not follow a
	 * symlink on Linux). */
	W0(real_link(a, b));
	marked(rc, AT_FDCWD, a, 0, W_CHANGE);
	marked(rc, AT_FDCWD, b, 0, W_CREATE);
	return (int)rc;
}
int linkat(int fa, const char *a, int fb, const char *b, int fl)
{
	W0(real_linkat(fa, a, fb, b, fl));
	if (!((fl & AT_EMPTY_PATH) && a && !a[0])) marked(rc, fa, a, !!(fl & AT_SYMLINK_FOLLOW), W_CHANGE);
	marked(rc, fb, b, 0, W_CREATE);
	return (int)rc;
}
int truncate(const char *p, off_t n) { W0(real_truncate(p, n)); marked(rc, AT_FDCWD, p, 1, W_CHANGE); return (int)rc; }
int truncate64(const char *p, off64_t n) { W0(real_truncate64(p, n)); marked(rc, AT_FDCWD, p, 1, W_CHANGE); return (int)rc; }
int utime(const char *p, const struct utimbuf *t) { W0(real_utime(p, t)); marked(rc, AT_FDCWD, p, 1, W_CHANGE); return (int)rc; }
int utimes(const char *p, const struct timeval t[2]) { W0(real_utimes(p, t)); marked(rc, AT_FDCWD, p, 1, W_CHANGE); return (int)rc; }
int lutimes(const char *p, const struct timeval t[2]) { W0(real_lutimes(p, t)); marked(rc, AT_FDCWD, p, 0, W_CHANGE); return (int)rc; }
int futimesat(int fd, const char *p, const struct timeval t[2])
{
	W0(real_futimesat(fd, p, t));
	if (p) marked(rc, fd, p, 1, W_CHANGE); /* NULL: futimes of fd */
	return (int)rc;
}
int utimensat(int fd, const char *p, const struct timespec t[2], int fl)
{
	W0(real_utimensat(fd, p, t, fl));
	if (p) marked(rc, fd, p, !(fl & AT_SYMLINK_NOFOLLOW), W_CHANGE); /* NULL: futimens of fd */
	return (int)rc;
}
int chmod(const char *p, mode_t m) { W0(real_chmod(p, m)); marked(rc, AT_FDCWD, p, 1, W_CHANGE); return (int)rc; }
int fchmodat(int fd, const char *p, mode_t m, int fl) { W0(real_fchmodat(fd, p, m, fl)); marked(rc, fd, p, !(fl & AT_SYMLINK_NOFOLLOW), W_CHANGE); return (int)rc; }
int chown(const char *p, uid_t u, gid_t g) { W0(real_chown(p, u, g)); marked(rc, AT_FDCWD, p, 1, W_CHANGE); return (int)rc; }
int lchown(const char *p, uid_t u, gid_t g) { W0(real_lchown(p, u, g)); marked(rc, AT_FDCWD, p, 0, W_CHANGE); return (int)rc; }
int fchownat(int fd, const char *p, uid_t u, gid_t g, int fl)
{
	W0(real_fchownat(fd, p, u, g, fl));
	if (!((fl & AT_EMPTY_PATH) && p && !p[0])) marked(rc, fd, p, !(fl & AT_SYMLINK_NOFOLLOW), W_CHANGE);
	return (int)rc;
}
int mknod(const char *p, mode_t m, dev_t d)
{
	W0(real_mknod ? real_mknod(p, m, d) : (int)syscall(SYS_mknodat, AT_FDCWD, p, m, d));
	marked(rc, AT_FDCWD, p, 0, W_CREATE);
	return (int)rc;
}
int mknodat(int fd, const char *p, mode_t m, dev_t d)
{
	W0(real_mknodat ? real_mknodat(fd, p, m, d) : (int)syscall(SYS_mknodat, fd, p, m, d));
	marked(rc, fd, p, 0, W_CREATE);
	return (int)rc;
}
int mkfifo(const char *p, mode_t m) { W0(real_mkfifo(p, m)); marked(rc, AT_FDCWD, p, 0, W_CREATE); return (int)rc; }
int mkfifoat(int fd, const char *p, mode_t m) { W0(real_mkfifoat(fd, p, m)); marked(rc, fd, p, 0, W_CREATE); return (int)rc; }
/* ---- the readdir family: a bundled directory's listing from the table ----
 *
 * opendir of a bundled directory opens its staged copy, one real directory,
 * and makes a glibc DIR of it with fdopendir, so that dirfd(), fstat (the
 * original's attributes, fstat_fix), fchdir and openat(dirfd(d), name) (the
 * name looked up as the original's, lookup) behave as on the original. The
 * stream never reads that copy: readdir, readdir64, readdir(64)_r, telldir,
 * seekdir, rewinddir and getdents64 on its fd serve the directory's listing
 * from the table: the names, "." and ".." included, in the order the
 * build's read of the original returned them (native order), each with the
 * d_type and d_ino of that read. fdopendir of a descriptor of a staged
 * directory (a dup of dirfd(d), openat(dirfd(d), "sub", O_DIRECTORY)) serves
 * it the same way.
 *
 * The streams are kept in a fixed table (DIR_TRACK slots, claimed with a
 * compare-and-swap; no allocation but glibc's own DIR). When every slot is
 * taken, opendir opens the original directory: the native answer, from the
 * file system. A stream's position is its record index: telldir returns it
 * (natively an opaque cookie of the file system), seekdir takes it, d_off
 * is the next one. As with glibc, one stream is not for two threads at once.
 */
#define DIR_TRACK 128
#define DIR_CLAIMED ((DIR *)-1)
struct dir_stream {
	DIR *d; /* NULL: free; DIR_CLAIMED: being set up */
	const struct dlb_entry *e;
	const struct dlb_record *rec;
	uint32_t n, pos; /* records, and the next one */
	int fd;          /* dirfd(d): the staged copy ... */
	dev_t dev;       /* ... which is still it when fstat says so */
	ino_t ino;
	struct dirent64 de; /* readdir's answer (struct dirent has its layout here) */
};
_Static_assert(sizeof(struct dirent) == sizeof(struct dirent64) && offsetof(struct dirent, d_name) == offsetof(struct dirent64, d_name),
	       "readdir and readdir64 share one record (LP64 glibc)");
static struct dir_stream dir_streams[DIR_TRACK];
static unsigned dir_streams_open; /* slots in use: 0 skips every search */

static struct dir_stream *stream_of(DIR *d)
{
	if (!d || !__atomic_load_n(&dir_streams_open, __ATOMIC_ACQUIRE)) return NULL;
	for (int i = 0; i < DIR_TRACK; i++)
		if (__atomic_load_n(&dir_streams[i].d, __ATOMIC_ACQUIRE) == d) return &dir_streams[i];
	return NULL;
}

/* stream_of_fd finds the stream whose fd is fd, if fd still names its staged
 * directory (an fd closed behind the stream's back may have been reused). */
static struct dir_stream *stream_of_fd(int fd, const struct stat *known)
{
	if (fd < 0 || !__atomic_load_n(&dir_streams_open, __ATOMIC_ACQUIRE)) return NULL;
	for (int i = 0; i < DIR_TRACK; i++) {
		struct dir_stream *s = &dir_streams[i];
		DIR *d = __atomic_load_n(&s->d, __ATOMIC_ACQUIRE);
		if (!d || d == DIR_CLAIMED || s->fd != fd) continue;
		struct stat st;
		if (!known) {
			if (syscall(SYS_fstat, fd, &st) != 0) return NULL;
			known = &st;
		}
		return known->st_dev == s->dev && known->st_ino == s->ino ? s : NULL;
	}
	return NULL;
}

static struct dir_stream *stream_claim(void)
{
	for (int i = 0; i < DIR_TRACK; i++) {
		DIR *none = NULL;
		if (__atomic_compare_exchange_n(&dir_streams[i].d, &none, DIR_CLAIMED, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			__atomic_add_fetch(&dir_streams_open, 1, __ATOMIC_ACQ_REL);
			return &dir_streams[i];
		}
	}
	return NULL;
}

static void stream_release(struct dir_stream *s)
{
	__atomic_store_n(&s->d, NULL, __ATOMIC_RELEASE);
	__atomic_sub_fetch(&dir_streams_open, 1, __ATOMIC_ACQ_REL);
}

/* stream_serve makes s (claimed) serve directory e's listing on d, whose fd
 * is the staged copy fd with attributes st. */
static void stream_serve(struct dir_stream *s, DIR *d, int fd, const struct stat *st, const struct dlb_entry *e)
{
	s->e = e;
	s->rec = dlb_listing(table, e, &s->n);
	s->pos = 0;
	s->fd = fd;
	s->dev = st->st_dev;
	s->ino = st->st_ino;
	__atomic_store_n(&s->d, d, __ATOMIC_RELEASE);
}

/* dir_open opens a stream on bundled directory e (canon[0:n], its canonical
 * original path): NULL with errno as the original would fail (EACCES from the
 * table's mode and owner, since the staged copy is ours), or (DIR *)-1 when
 * the caller should open the original (no free slot, or the kernel must
 * decide the permission). */
static DIR *dir_open(const struct dlb_entry *e, const char *canon, size_t n)
{
	char sp[DLB_PATH_MAX + 1024];
	switch (readable_original(e)) { /* opendir needs read permission on the original */
	case -1: return (DIR *)-1;
	case 0: return NULL;
	}
	if (staged(sp, sizeof sp, canon, n) != 0) return (DIR *)-1;
	struct dir_stream *s = stream_claim();
	if (!s) return (DIR *)-1;
	/* the flags glibc's opendir uses */
	int fd = (int)syscall(SYS_openat, AT_FDCWD, sp, O_RDONLY | O_NONBLOCK | O_DIRECTORY | O_CLOEXEC);
	struct stat st;
	DIR *d = NULL;
	if (fd >= 0 && syscall(SYS_fstat, fd, &st) == 0) d = real_fdopendir(fd);
	if (!d) {
		int err = errno;
		if (fd >= 0) syscall(SYS_close, fd);
		stream_release(s);
		errno = err;
		return NULL;
	}
	stream_serve(s, d, fd, &st, e);
	return d;
}

/* staged_dir_entry: the bundled directory whose staged copy fd is (st: its
 * fstat), found by the path the kernel gives for it; NULL for anything else. */
static const struct dlb_entry *staged_dir_entry(int fd, const struct stat *st)
{
	if (!table || !stage_dev || st->st_dev != stage_dev || !S_ISDIR(st->st_mode)) return NULL;
	char l[32], p[DLB_PATH_MAX + 1024];
	snprintf(l, sizeof l, "/proc/self/fd/%d", fd);
	long n = syscall(SYS_readlinkat, AT_FDCWD, l, p, sizeof p - 1);
	if (n <= 0 || (size_t)n < stage_root_len || memcmp(p, stage_root, stage_root_len) != 0) return NULL;
	p[n] = 0;
	const char *orig = p + stage_root_len;
	if (!*orig) orig = "/"; /* STAGE/root itself is "/" */
	else if (*orig != '/') return NULL;
	const struct dlb_entry *e = dlb_lookup(table, orig, strlen(orig));
	return e && e->type == DLB_DIR ? e : NULL;
}

DIR *fdopendir(int fd)
{
	ensure_init();
	DIR *d = real_fdopendir(fd);
	struct stat st;
	if (!d || !table || syscall(SYS_fstat, fd, &st) != 0) return d;
	const struct dlb_entry *e = staged_dir_entry(fd, &st);
	struct dir_stream *s = e ? stream_claim() : NULL;
	if (s) stream_serve(s, d, fd, &st, e);
	return d;
}

/* dir_fd_path copies the original path of the directory whose served
 * stream's fd is fd into out; 0 when fd is no such fd. */
static size_t dir_fd_path(int fd, char *out, size_t cap)
{
	struct dir_stream *s = stream_of_fd(fd, NULL);
	if (!s || s->e->path_len >= cap) return 0;
	memcpy(out, dlb_str(table, s->e->path), s->e->path_len + 1);
	return s->e->path_len;
}

/* dir_fd_entry: fstat of a served stream's fd shows its directory's entry. */
static const struct dlb_entry *dir_fd_entry(int fd, const struct stat *st)
{
	struct dir_stream *s = S_ISDIR(st->st_mode) ? stream_of_fd(fd, st) : NULL;
	return s ? s->e : NULL;
}

/* record_ino: the d_ino of record k. Images before listings kept inode
 * numbers have 0 there: the directory's own for ".", the name's own row,
 * else the staged copy's (".." of a directory whose parent is not in the
 * table). */
static uint64_t record_ino(struct dir_stream *s, uint32_t k, const char *name)
{
	uint64_t ino = s->rec[k].ino;
	size_t nn = s->rec[k].name_len;
	if (ino) return ino;
	if (nn == 1 && name[0] == '.') ino = s->e->ino;
	else if (!(nn == 2 && name[0] == '.' && name[1] == '.')) {
		char p[DLB_PATH_MAX];
		size_t dn = s->e->path_len;
		if (dn + 1 + nn < sizeof p) {
			memcpy(p, dlb_str(table, s->e->path), dn);
			if (dn > 1) p[dn++] = '/';
			memcpy(p + dn, name, nn);
			const struct dlb_entry *c = dlb_lookup(table, p, dn + nn);
			if (c) ino = c->ino;
		}
	}
	struct stat st;
	if (!ino && syscall(SYS_newfstatat, s->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) ino = st.st_ino;
	return ino;
}

/* other_type: the d_type of a name the image lists as "other" (a socket,
 * fifo or device: DT_UNKNOWN in the table), from an lstat of the original,
 * which the image does not hold (one call on the file system per such name;
 * the stage has nothing there). */
static unsigned char other_type(struct dir_stream *s, const char *name, size_t nn)
{
	char p[DLB_PATH_MAX];
	size_t dn = s->e->path_len;
	struct stat st;
	if (dn + 1 + nn >= sizeof p) return DT_UNKNOWN;
	memcpy(p, dlb_str(table, s->e->path), dn);
	if (dn > 1) p[dn++] = '/';
	memcpy(p + dn, name, nn + 1);
	if (syscall(SYS_newfstatat, AT_FDCWD, p, &st, AT_SYMLINK_NOFOLLOW) != 0) return DT_UNKNOWN;
	return (unsigned char)IFTODT(st.st_mode);
}

/* stream_next fills out with the next record of s (a kernel-style record:
 * d_reclen as getdents64 sets it); 0 at the end. */
static int stream_next(struct dir_stream *s, struct dirent64 *out)
{
	while (s->pos < s->n) {
		uint32_t k = s->pos++;
		const char *name = dlb_record_name(table, &s->rec[k]);
		if (!name) continue; /* damaged: passed over */
		size_t nn = s->rec[k].name_len;
		out->d_ino = record_ino(s, k, name);
		out->d_off = (off64_t)k + 1;
		out->d_reclen = (unsigned short)((offsetof(struct dirent64, d_name) + nn + 1 + 7) & ~(size_t)7);
		out->d_type = s->rec[k].d_type ? s->rec[k].d_type : other_type(s, name, nn);
		memcpy(out->d_name, name, nn);
		out->d_name[nn] = 0;
		return 1;
	}
	return 0;
}

struct dirent64 *readdir64(DIR *d)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	if (!s) return real_readdir64(d);
	return stream_next(s, &s->de) ? &s->de : NULL; /* the end: NULL, errno untouched */
}
struct dirent *readdir(DIR *d)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	if (!s) return real_readdir(d);
	return stream_next(s, &s->de) ? (struct dirent *)&s->de : NULL;
}
int readdir64_r(DIR *d, struct dirent64 *entry, struct dirent64 **result)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	if (!s) return real_readdir64_r(d, entry, result);
	*result = stream_next(s, entry) ? entry : NULL;
	return 0;
}
int readdir_r(DIR *d, struct dirent *entry, struct dirent **result)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	if (!s) return real_readdir_r(d, entry, result);
	*result = stream_next(s, (struct dirent64 *)entry) ? entry : NULL;
	return 0;
}
long telldir(DIR *d)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	return s ? (long)s->pos : real_telldir(d);
}
void seekdir(DIR *d, long loc)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	if (!s) { real_seekdir(d, loc); return; }
	s->pos = loc < 0 ? 0 : loc > (long)s->n ? s->n : (uint32_t)loc;
}
void rewinddir(DIR *d)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	if (!s) { real_rewinddir(d); return; }
	s->pos = 0;
}
int closedir(DIR *d)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	if (s) stream_release(s); /* before glibc frees d: its address may be reused */
	return real_closedir(d);
}

/* getdents64 (glibc >= 2.30) on a served stream's fd: the same records as
 * the kernel lays them out (struct linux_dirent64), from the stream's
 * position; EINVAL when not even the next one fits, as the kernel. */
ssize_t getdents64(int fd, void *buf, size_t len)
{
	ensure_init();
	struct dir_stream *s = stream_of_fd(fd, NULL);
	if (!s) return real_getdents64 ? real_getdents64(fd, buf, len) : syscall(SYS_getdents64, fd, buf, len);
	struct dirent64 de;
	size_t o = 0;
	for (uint32_t at = s->pos; stream_next(s, &de); at = s->pos) {
		if (o + de.d_reclen > len) {
			s->pos = at; /* keep it for the next call */
			break;
		}
		memcpy((char *)buf + o, &de, offsetof(struct dirent64, d_name) + strlen(de.d_name) + 1);
		o += de.d_reclen;
	}
	if (o == 0 && s->pos < s->n) return set_errno(EINVAL);
	return (ssize_t)o;
}

/* fchdir to a served stream's fd: the process's working directory becomes
 * the original directory (one chdir, by its path), so that getcwd, relative
 * lookups and children see it as natively, not the staged copy. If the
 * original cannot be entered, the staged copy is. */
int fchdir(int fd)
{
	ensure_init();
	char p[DLB_PATH_MAX];
	if (dir_fd_path(fd, p, sizeof p) && syscall(SYS_chdir, p) == 0) return 0;
	return real_fchdir ? real_fchdir(fd) : (int)syscall(SYS_fchdir, fd);
}

/* ---- glob, scandir: glibc's own directory walks, over the readdir above ----
 *
 * glibc's scandir and glob open and read directories with internal calls
 * that no preload sees, so they would list the original (the native answer,
 * but on the shared file system). scandir, scandir64 and scandirat are made
 * here over opendir/readdir above, as glibc makes them (dirent/scandir-tail-
 * common.c, 2.36: the same errno rules, allocations and qsort). glob and
 * glob64 call glibc's with GLOB_ALTDIRFUNC and the functions above, which
 * glob (posix/glob.c) uses exactly where it would use its own, and the flag
 * is taken off gl_flags again; not on glibc < 2.27, whose glob with that flag
 * checks a pattern without wildcards with gl_stat, not lstat (a dangling
 * symlink would differ). An app's own GLOB_ALTDIRFUNC is left alone. nftw
 * and fts walk by descriptors (openat, getdents64 inside glibc): they still
 * list the original. */
static int glob_alt = -1; /* glibc's glob takes gl_lstat with GLOB_ALTDIRFUNC (>= 2.27) */
static int glob_alt_ok(void)
{
	if (glob_alt < 0) {
		int maj = 0, min = 0;
		glob_alt = sscanf(gnu_get_libc_version(), "%d.%d", &maj, &min) == 2 && (maj > 2 || (maj == 2 && min >= 27));
	}
	return glob_alt;
}

/* glob's callbacks take void * streams */
static void *glob_opendir(const char *p) { return opendir(p); }
static struct dirent *glob_readdir(void *d) { return readdir(d); }
static struct dirent64 *glob_readdir64(void *d) { return readdir64(d); }
static void glob_closedir(void *d) { closedir(d); }

int glob(const char *pattern, int flags, int (*errfunc)(const char *, int), glob_t *pglob)
{
	ensure_init();
	if (!table || !pglob || (flags & GLOB_ALTDIRFUNC) || !glob_alt_ok()) return real_glob(pattern, flags, errfunc, pglob);
	pglob->gl_opendir = glob_opendir;
	pglob->gl_readdir = glob_readdir;
	pglob->gl_closedir = glob_closedir;
	pglob->gl_lstat = lstat;
	pglob->gl_stat = stat;
	int rc = real_glob(pattern, flags | GLOB_ALTDIRFUNC, errfunc, pglob);
	pglob->gl_flags &= ~GLOB_ALTDIRFUNC;
	return rc;
}
int glob64(const char *pattern, int flags, int (*errfunc)(const char *, int), glob64_t *pglob)
{
	ensure_init();
	if (!table || !pglob || (flags & GLOB_ALTDIRFUNC) || !glob_alt_ok()) return real_glob64(pattern, flags, errfunc, pglob);
	pglob->gl_opendir = glob_opendir;
	pglob->gl_readdir = glob_readdir64;
	pglob->gl_closedir = glob_closedir;
	pglob->gl_lstat = lstat64;
	pglob->gl_stat = stat64;
	int rc = real_glob64(pattern, flags | GLOB_ALTDIRFUNC, errfunc, pglob);
	pglob->gl_flags &= ~GLOB_ALTDIRFUNC;
	return rc;
}

/* scandir_tail is glibc's: select's errno is not an error, a failed
 * allocation ends the list with the error (all freed), the list is sorted
 * with cmp. struct dirent is struct dirent64 here (LP64). */
static int scandir_tail(DIR *dp, struct dirent64 ***namelist, int (*sel)(const struct dirent64 *),
			int (*cmp)(const struct dirent64 **, const struct dirent64 **))
{
	if (!dp) return -1;
	int save = errno;
	errno = 0;
	struct dirent64 **v = NULL, *d;
	size_t vsize = 0, cnt = 0;
	while ((d = readdir64(dp))) {
		if (sel) {
			int selected = sel(d);
			errno = 0;
			if (!selected) continue;
		}
		if (cnt == vsize) {
			vsize = vsize ? 2 * vsize : 10;
			struct dirent64 **nv = realloc(v, vsize * sizeof *v);
			if (!nv) break;
			v = nv;
		}
		size_t dsize = d->d_reclen; /* glibc: &d->d_name[_D_ALLOC_NAMLEN (d)] - (char *) d */
		struct dirent64 *x = malloc(dsize);
		if (!x) break;
		v[cnt++] = memcpy(x, d, dsize);
		errno = 0;
	}
	if (errno != 0) {
		int e = errno;
		while (cnt > 0) free(v[--cnt]);
		free(v);
		closedir(dp);
		errno = e;
		return -1;
	}
	closedir(dp);
	if (cmp) qsort(v, cnt, sizeof *v, (int (*)(const void *, const void *))cmp);
	*namelist = v;
	errno = save;
	return (int)cnt;
}

int scandir64(const char *dir, struct dirent64 ***namelist, int (*sel)(const struct dirent64 *),
	      int (*cmp)(const struct dirent64 **, const struct dirent64 **))
{
	return scandir_tail(opendir(dir), namelist, sel, cmp);
}
int scandir(const char *dir, struct dirent ***namelist, int (*sel)(const struct dirent *),
	    int (*cmp)(const struct dirent **, const struct dirent **))
{
	return scandir64(dir, (struct dirent64 ***)namelist, (int (*)(const struct dirent64 *))sel,
			 (int (*)(const struct dirent64 **, const struct dirent64 **))cmp);
}
/* scandirat: glibc's __opendirat is openat(dfd, dir, the flags of opendir)
 * and a stream on the fd; below a served stream's fd, the original path's
 * opendir (served from the table when bundled). */
int scandirat64(int dfd, const char *dir, struct dirent64 ***namelist, int (*sel)(const struct dirent64 *),
		int (*cmp)(const struct dirent64 **, const struct dirent64 **))
{
	if (dfd == AT_FDCWD || (dir && dir[0] == '/')) return scandir64(dir, namelist, sel, cmp);
	char p[DLB_PATH_MAX];
	size_t n = dir && dir[0] ? dir_fd_path(dfd, p, sizeof p) : 0;
	if (n && n + 1 + strlen(dir) < sizeof p) { /* below a served stream's directory: by its path */
		if (n > 1) p[n++] = '/';
		memcpy(p + n, dir, strlen(dir) + 1);
		return scandir64(p, namelist, sel, cmp);
	}
	int fd = openat(dfd, dir, O_RDONLY | O_NONBLOCK | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) return -1;
	DIR *dp = fdopendir(fd);
	if (!dp) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return scandir_tail(dp, namelist, sel, cmp);
}
int scandirat(int dfd, const char *dir, struct dirent ***namelist, int (*sel)(const struct dirent *),
	      int (*cmp)(const struct dirent **, const struct dirent **))
{
	return scandirat64(dfd, dir, (struct dirent64 ***)namelist, (int (*)(const struct dirent64 *))sel,
			   (int (*)(const struct dirent64 **, const struct dirent64 **))cmp);
}

/* ---- fstat of a staged fd: the original's attributes ----
 *
 * An open served from the stage remembers fd -> entry (fds below FD_TRACK).
 * fstat of such an fd makes the real call and, when the result is still the
 * staged copy of that entry (the stage's st_dev, same size and mtime: the fd
 * may have been closed behind our back, e.g. by fclose, and reused), answers
 * with the table's attributes: ino, dev, nlink, times as the original. */
#define FD_TRACK 1024
static const struct dlb_entry *fd_track[FD_TRACK];
static uint64_t fd_ino[FD_TRACK]; /* the staged copy's inode: an fd closed behind our back
				     (fclose, close_range) and reused for another file on the
				     stage's device with the same size and mtime is not it */
static void fd_note(int fd, const struct dlb_entry *e)
{
	struct stat st;
	if (fd < 0 || fd >= FD_TRACK) return;
	int saved = errno;
	long rc = syscall(SYS_fstat, fd, &st);
	errno = saved;
	__atomic_store_n(&fd_track[fd], NULL, __ATOMIC_RELEASE);
	if (rc != 0) return;
	__atomic_store_n(&fd_ino[fd], (uint64_t)st.st_ino, __ATOMIC_RELEASE);
	__atomic_store_n(&fd_track[fd], e, __ATOMIC_RELEASE);
}

/* same_copy: st is the staged copy of entry e (the stage's device, e's size
 * and mtime, which staging keeps). */
static int same_copy(const struct dlb_entry *e, const struct stat *st)
{
	return e && e->type == DLB_REG && st->st_dev == stage_dev && S_ISREG(st->st_mode) && st->st_size == e->size &&
	       (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec == e->mtime_ns;
}

/* entry_via_link: the entry whose staged copy st is, named by the /proc
 * magic link link (/proc/self/fd/N, /proc/self/exe ...): the kernel's name
 * of the file is the staged path. One readlink, only for a file on the
 * stage's device: an fd this process did not open (inherited, a dup, an
 * fd of 1024 or more), /proc/self/exe of a staged executable. */
static const struct dlb_entry *entry_via_link(const char *link, const struct stat *st)
{
	char tmp[DLB_PATH_MAX + 1024];
	if (!table || !stage_dev || st->st_dev != stage_dev || !S_ISREG(st->st_mode)) return NULL;
	int saved = errno;
	long n = syscall(SYS_readlinkat, AT_FDCWD, link, tmp, sizeof tmp - 1);
	errno = saved;
	if (n <= (long)stage_root_len || memcmp(tmp, stage_root, stage_root_len) != 0 || tmp[stage_root_len] != '/') return NULL;
	const struct dlb_entry *e = dlb_lookup(table, tmp + stage_root_len, (size_t)n - stage_root_len);
	return same_copy(e, st) ? e : NULL;
}

static const struct dlb_entry *fd_staged(int fd, const struct stat *st)
{
	if (fd < 0 || !stage_dev || st->st_dev != stage_dev) return NULL;
	const struct dlb_entry *e = fd < FD_TRACK ? __atomic_load_n(&fd_track[fd], __ATOMIC_ACQUIRE) : NULL;
	if (e && __atomic_load_n(&fd_ino[fd], __ATOMIC_ACQUIRE) == (uint64_t)st->st_ino && same_copy(e, st)) return e;
	char l[40];
	snprintf(l, sizeof l, "/proc/self/fd/%d", fd);
	return entry_via_link(l, st);
}

/* proc_stat_fix: a stat that followed a /proc magic link to a staged copy
 * (os.stat('/proc/self/fd/N'), '/proc/self/exe') shows the original's. */
static void proc_stat_fix(const char *path, struct stat *st)
{
	if (path && !strncmp(path, "/proc/", 6) && stage_dev && st->st_dev == stage_dev) {
		const struct dlb_entry *e = entry_via_link(path, st);
		if (e) fill_stat(st, e);
	}
}

static void fstat_fix(int fd, struct stat *st)
{
	const struct dlb_entry *e = fd_staged(fd, st);
	if (!e) e = dir_fd_entry(fd, st); /* dirfd() of a served listing */
	if (e) fill_stat(st, e);
}

int fstat(int fd, struct stat *st)
{
	ensure_init();
	int rc = real_fstat ? real_fstat(fd, st) : sys_fstatat(fd, "", st, AT_EMPTY_PATH);
	if (rc == 0) fstat_fix(fd, st);
	return rc;
}
int fstat64(int fd, struct stat64 *st) { return fstat(fd, (struct stat *)st); }
int __fxstat(int ver, int fd, struct stat *st) { (void)ver; return fstat(fd, st); }
int __fxstat64(int ver, int fd, struct stat64 *st) { (void)ver; return fstat(fd, (struct stat *)st); }

/* ---- realpath: glibc's algorithm, the table answering its system calls ----
 *
 * glibc's realpath (stdlib/canonicalize.c, 2.33 and later) builds the
 * answer in a buffer rname, component by component: "." is skipped, ".."
 * drops the last component of rname without any system call (rname holds
 * no symlink, so that is the parent), and any other component is appended
 * and readlink(rname) decides: a symlink's text is spliced in front of the
 * rest of the path (an absolute one restarts rname at "/", a relative one
 * drops the link's name); EINVAL (not a symlink) goes on; any other error
 * ends it. When what follows the component is a trailing "/" or a "." or
 * ".." component, readlink's error does not count and faccessat(rname "/",
 * F_OK, AT_EACCESS) decides instead (dir_check). After ENOENT or EACCES,
 * a caller's buffer receives rname as far as it got (up to and including
 * the failing component): programs print it. More than 40 symlinks: ELOOP.
 *
 * rp_walk runs the same steps with the table answering readlink and
 * faccessat where it can (rp_step below); res is rname, kept exactly as
 * glibc keeps it (a trailing "/" after ".." or a relative symlink). Only
 * what the table cannot decide (a component outside the image with no
 * deeper table key on the path as written, an external symlink, a
 * directory the process wrote into) is asked of the file system, for that
 * component alone; *native counts those calls, first names the first.
 * Returns 0 (res is the answer), a positive errno (res is the partial
 * path), or -1 when it cannot (a path or link text longer than its
 * buffers, the stage itself, a permission it cannot decide): the caller
 * uses libc's, which makes the same calls on the file system. */
static int in_stage(const char *p, size_t n)
{
	size_t sl = stage_root_len > 5 ? stage_root_len - 5 : 0;
	return sl && n >= sl && !memcmp(p, stage_root, sl) && (n == sl || p[sl] == '/');
}

/* glibc's suffix_requires_dir_check: end ("" or starting with '/') is a
 * trailing "/", or has a "." or ".." component before any other. */
static int rp_suffix_dir_check(const char *end)
{
	while (*end == '/') {
		do end++;
		while (*end == '/');
		switch (*end++) {
		default: return 0;
		case 0: return 1;
		case '.': break;
		}
		if (!*end || (*end == '.' && (!end[1] || end[1] == '/'))) return 1;
	}
	return 0;
}

/* What the table knows of the directory rname stands in: a bundled
 * directory whose lookups it answers (cur), a known non-directory (the
 * next step is ENOTDIR), or undecided (outside the image, an external
 * name, a directory written into: the file system decides, unless a
 * deeper table key on the path shows the way). */
enum { RP_UNDECIDED, RP_DIR, RP_NONDIR };

static size_t rp_key(const char *res, size_t on) { return on > 1 && res[on - 1] == '/' ? on - 1 : on; }

/* rp_state: the state of rname reached other than by a step from its
 * parent (the start, "..", a symlink): always a directory. */
static int rp_state(const char *res, size_t on, const struct dlb_entry **cur)
{
	size_t k = rp_key(res, on);
	const struct dlb_entry *e = dirty_covered(res, k) ? NULL : dlb_lookup(table, res, k);
	*cur = e && e->type == DLB_DIR ? e : NULL;
	return *cur ? RP_DIR : RP_UNDECIDED;
}

/* rp_search: may the process search the bundled directory e (1, 0), or
 * cannot the table tell (-1)? */
static int rp_search(const struct dlb_entry *e) { return !e || (e->mode & 1) ? 1 : search_ok(e); }

/* rp_step answers readlink(res[0:on]) (the component res[pn:on] just
 * appended to a directory in state *st, entry *cur) and, when dircheck, the
 * faccessat of dir_check after it; it sets the component's state. Returns
 * the symlink text's length (text in link), RP_NOTLINK, or a negative
 * errno (-1000 - errno) ... see the constants. */
#define RP_NOTLINK (-1)
#define RP_ERR(e) (-1000 - (e))
#define RP_FALLBACK (-2)
static long rp_step(char *res, size_t pn, size_t on, const char *ahead, size_t an, int dircheck, int *st,
		    const struct dlb_entry **cur, char *link, size_t linksz, int *native, char *first)
{
	size_t cn = on - pn;
	int decided = 1, s = *st;
	const struct dlb_entry *e = NULL;
	long rc;
	if (in_stage(res, on)) return RP_FALLBACK;
	if (s == RP_NONDIR) { rc = RP_ERR(ENOTDIR); goto out; }
	if (s == RP_DIR) {
		int ok = rp_search(*cur);
		if (ok < 0) return RP_FALLBACK;
		if (!ok) { rc = RP_ERR(EACCES); goto out; }
		if (cn > DLB_NAME_MAX) { rc = RP_ERR(ENAMETOOLONG); goto out; }
	}
	if (!dirty_covered(res, on)) e = dlb_lookup(table, res, on);
	if (!e && s == RP_DIR && !dirty_covered(res, on)) { rc = RP_ERR(ENOENT); goto out; } /* absent from a complete listing */
	if (!e && s == RP_UNDECIDED && !DLB_DIRTY_ALL()) {
		/* A prefix outside the image (e.g. /home above a bundled tree):
		 * when a deeper component of the path as written is a table
		 * key, this one is a real directory (keys are real paths). The
		 * look-ahead writes past on and puts the terminator back. */
		size_t tn = on, tp = 0;
		int found = 0;
		for (;;) {
			while (tp < an && ahead[tp] == '/') tp++;
			size_t tq = tp;
			while (tq < an && ahead[tq] != '/') tq++;
			if (tq == tp || (tq - tp == 1 && ahead[tp] == '.') || (tq - tp == 2 && ahead[tp] == '.' && ahead[tp + 1] == '.'))
				break;
			if (tn + 1 + (tq - tp) >= DLB_PATH_MAX) break;
			res[tn] = '/';
			memcpy(res + tn + 1, ahead + tp, tq - tp);
			tn += 1 + (tq - tp);
			if (dirty_covered(res, tn)) break;
			if (dlb_lookup(table, res, tn)) { found = 1; break; }
			tp = tq;
		}
		res[on] = 0;
		if (found) { *st = RP_UNDECIDED; *cur = NULL; return RP_NOTLINK; }
	}
	if (e) {
		switch (e->type) {
		case DLB_MISSING: rc = RP_ERR(ENOENT); goto out;
		case DLB_DIR:
			*cur = e;
			*st = RP_DIR;
			rc = RP_NOTLINK;
			goto out;
		case DLB_REG: *st = RP_NONDIR; rc = RP_NOTLINK; goto out;
		case DLB_SYMLINK:
			if (e->target_len >= linksz) return RP_FALLBACK;
			memcpy(link, dlb_str(table, e->target), e->target_len + 1);
			return (long)e->target_len;
		case DLB_EXTERNAL:
			switch (e->mode & S_IFMT) {
			case 0: case S_IFLNK: break; /* the file system's text */
			case S_IFDIR: *st = RP_UNDECIDED; *cur = NULL; rc = RP_NOTLINK; goto out;
			default: *st = RP_NONDIR; rc = RP_NOTLINK; goto out;
			}
			break;
		}
	}
	/* The file system decides. */
	decided = 0;
	if (!(*native)++) memcpy(first, res, on + 1);
	rc = syscall(SYS_readlinkat, AT_FDCWD, res, link, linksz - 1);
	if (rc >= 0) {
		if ((size_t)rc >= linksz - 1) return RP_FALLBACK;
		link[rc] = 0;
		return rc;
	}
	rc = errno == EINVAL ? RP_NOTLINK : RP_ERR(errno);
	*st = RP_UNDECIDED;
	*cur = NULL;
out:
	if (!dircheck) return rc;
	/* dir_check: faccessat(rname "/", F_OK, AT_EACCESS) decides, not
	 * readlink's error. */
	if (decided) {
		if (rc == RP_NOTLINK && *st == RP_NONDIR) return RP_ERR(ENOTDIR);
		return rc;
	}
	if (on + 1 >= DLB_PATH_MAX) return RP_ERR(ENAMETOOLONG);
	res[on] = '/';
	res[on + 1] = 0;
	++*native;
	long a = syscall(SYS_faccessat, AT_FDCWD, res, F_OK, AT_EACCESS); /* faccessat2's flags: glibc emulates them for F_OK */
	int ae = errno;
	res[on] = 0;
	return a == 0 ? RP_NOTLINK : RP_ERR(ae);
}

static int rp_walk(const char *path, char *res, int *native, char *first)
{
	char rest[DLB_PATH_MAX], link[DLB_PATH_MAX];
	size_t rn = strlen(path), on, p = 0;
	int links = 0;
	*native = 0;
	if (rn == 0) return ENOENT;
	if (rn >= DLB_PATH_MAX) return -1;
	memcpy(rest, path, rn + 1);
	size_t deny = 0; /* res[0:deny] is a bundled directory the process may not search (from getcwd) */
	if (path[0] == '/') {
		res[0] = '/';
		res[1] = 0;
		on = 1;
	} else {
		long n = syscall(SYS_getcwd, res, DLB_PATH_MAX);
		if (n <= 1 || res[0] != '/') return -1;
		on = (size_t)n - 1;
		if (in_stage(res, on)) return -1;
		/* glibc asks readlink of absolute names: each directory of the
		 * cwd must let us search it, as for a step. */
		const struct dlb_entry *d = dlb_lookup(table, res, on);
		if (!d || d->type != DLB_DIR || !(d->flags & DLB_FLAG_SEARCHABLE) || !(d->mode & 1)) {
			for (size_t i = 1; i <= on && !deny; i++) {
				if (i > 1 && i < on && res[i] != '/') continue; /* "/", then each "/a", "/a/b", ... */
				d = dlb_lookup(table, res, i);
				int ok = d && d->type == DLB_DIR ? rp_search(d) : 1;
				if (ok < 0) return -1;
				if (!ok) deny = i;
			}
		}
	}
	if (in_stage(path, rn)) return -1;
	if (path[0] == '/') {
		/* Fast: a path the resolver answers as bundled (a clean bundled
		 * path is one lookup) is canonical as it says. */
		struct dlb_res r;
		if (dlb_resolve(table, path, 1, res, &r) == DLB_BUNDLED) return 0;
		res[0] = '/';
		res[1] = 0;
	}
	const struct dlb_entry *cur;
	int st = rp_state(res, on, &cur);
	for (;;) {
		while (p < rn && rest[p] == '/') p++;
		if (p >= rn) break;
		size_t q = p;
		while (q < rn && rest[q] != '/') q++;
		size_t cn = q - p;
		if (cn == 1 && rest[p] == '.') { p = q; continue; }
		if (cn == 2 && rest[p] == '.' && rest[p + 1] == '.') {
			if (on > 1) {
				for (--on; on > 0 && res[on - 1] != '/'; --on) {}
				res[on] = 0;
			}
			if (deny && rp_key(res, on) < deny) deny = 0;
			st = rp_state(res, on, &cur);
			p = q;
			continue;
		}
		size_t pn = on;
		if (res[on - 1] != '/') pn++;
		if (pn + cn >= DLB_PATH_MAX) return ENAMETOOLONG; /* readlink's answer: the name is too long */
		res[on] = '/';
		memcpy(res + pn, rest + p, cn);
		on = pn + cn;
		res[on] = 0;
		int pst = st;
		const struct dlb_entry *pcur = cur;
		long rc;
		if (deny && rp_key(res, pn) >= deny) rc = RP_ERR(EACCES);
		else
			rc = rp_step(res, pn, on, rest + q, rn - q, rp_suffix_dir_check(rest + q), &st, &cur, link, sizeof link,
				     native, first);
		if (rc == RP_FALLBACK) return -1;
		if (rc <= RP_ERR(0)) return (int)(-1000 - rc);
		if (rc >= 0) {
			if (++links > 40) return ELOOP;
			size_t tn = (size_t)rc, an = rn - q;
			if (tn + an >= sizeof link) return -1;
			memcpy(link + tn, rest + q, an + 1);
			memcpy(rest, link, tn + an + 1);
			rn = tn + an;
			p = 0;
			if (link[0] == '/') {
				on = 1;
				res[1] = 0;
				deny = 0;
				st = rp_state(res, on, &cur);
			} else {
				if (on > 1)
					for (--on; on > 0 && res[on - 1] != '/'; --on) {}
				res[on] = 0;
				st = pst;
				cur = pcur;
			}
			continue;
		}
		p = q;
	}
	if (on > 1 && res[on - 1] == '/') on--;
	res[on] = 0;
	return 0;
}
/* cwd_prefix: p[0:n] is the working directory or one of its ancestors
 * (getcwd: one local system call, asked only for ".." over a component the
 * table does not know). */
static int cwd_prefix(const char *p, size_t n)
{
	char cwd[DLB_PATH_MAX];
	long k = syscall(SYS_getcwd, cwd, sizeof cwd);
	if (k <= 1 || cwd[0] != '/' || (size_t)k - 1 < n) return 0;
	return !memcmp(cwd, p, n) && (cwd[n] == '/' || cwd[n] == 0);
}

/* ---- gettext: an app's own message catalogs from the stage ----
 *
 * glibc's gettext opens DIRNAME/<language variant>/LC_MESSAGES/DOMAIN.mo
 * with internal calls (__open_nocancel in _nl_load_domain) that no preload
 * sees; DIRNAME comes from the app's bindtextdomain. So bindtextdomain is
 * where the stage can be put in: glibc is given STAGE/root + DIRNAME (its
 * canonical form) when the table decides, for every name in DIRNAME's
 * listing, what NAME/LC_MESSAGES/DOMAIN.mo is (bundled, or known missing):
 * glibc builds its candidates from LANGUAGE and the locale at lookup time,
 * any language may be asked for later, and a candidate whose language is
 * not in the listing is ENOENT natively and in the stage alike (a bundled
 * directory is staged with what the table holds, which for these names is
 * what the original holds). Anything less (a relative DIRNAME, which glibc
 * joins to the cwd at lookup time; NULL, a query; a tree the table does not
 * decide) passes through unchanged.
 *
 * What the app sees stays its own: glibc returns its own copy of the
 * dirname it was given (set_binding_values strdup()s it, and frees it at
 * the next binding of the domain), and bindtextdomain(DOMAIN, NULL)
 * returns that copy too. The copy glibc holds is the staged name, so both
 * answers are mapped back to the dirname the app gave, kept in a small
 * fixed table (no allocation; a domain beyond BIND_MAX is simply not
 * redirected). Like glibc's pointer, ours stays valid until the domain is
 * bound again. */
#define BIND_MAX 16
#define BIND_DOMAIN_MAX 128
static struct bind_slot {
	char domain[BIND_DOMAIN_MAX]; /* "" = free */
	char orig[DLB_PATH_MAX];      /* what the app passed, returned to it */
	char staged[DLB_PATH_MAX + sizeof stage_root]; /* what glibc holds */
} bind_slots[BIND_MAX];
static int bind_lock; /* glibc serialises bindtextdomain itself; our table too */

static void bind_enter(void) { while (__atomic_test_and_set(&bind_lock, __ATOMIC_ACQUIRE)) ; }
static void bind_leave(void) { __atomic_clear(&bind_lock, __ATOMIC_RELEASE); }

/* catalog_decided: the table decides dir[0:n]/a/b/<domain>.mo. */
static int catalog_decided(const char *dir, size_t n, const char *a, size_t an, const char *b, size_t bn, const char *domain, size_t dn)
{
	char p[DLB_PATH_MAX], out[DLB_PATH_MAX];
	struct dlb_res res;
	if (n + an + bn + dn + 6 >= sizeof p) return 0;
	size_t q = 0;
	memcpy(p, dir, n), q = n, p[q++] = '/';
	memcpy(p + q, a, an), q += an, p[q++] = '/';
	memcpy(p + q, b, bn), q += bn, p[q++] = '/';
	memcpy(p + q, domain, dn), q += dn;
	memcpy(p + q, ".mo", 4);
	return dlb_resolve(table, p, 1, out, &res) != DLB_UNKNOWN;
}

/* catalogs_decided: dir[0:n] (canonical) is a bundled directory, and for
 * every NAME of its listing the table decides NAME/LC_MESSAGES/<domain>.mo
 * and, where NAME is a bundled directory, NAME/<C>/<domain>.mo for every C
 * it lists (dcgettext's other categories, LC_TIME...: glibc reads those
 * from the same directory). */
static int catalogs_decided(const char *dir, size_t n, const char *domain)
{
	const struct dlb_entry *d = dlb_lookup(table, dir, n);
	uint32_t k;
	const struct dlb_record *r = dlb_listing(table, d, &k);
	if (!r) return 0;
	size_t dn = strlen(domain);
	char sub[DLB_PATH_MAX];
	for (uint32_t i = 0; i < k; i++) {
		const char *name = dlb_record_name(table, &r[i]);
		if (!name) return 0;
		size_t nn = r[i].name_len;
		if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
		if (!catalog_decided(dir, n, name, nn, "LC_MESSAGES", 11, domain, dn)) return 0;
		if (n + 1 + nn >= sizeof sub) return 0;
		memcpy(sub, dir, n), sub[n] = '/', memcpy(sub + n + 1, name, nn + 1);
		char out[DLB_PATH_MAX];
		struct dlb_res res;
		if (dlb_resolve(table, sub, 1, out, &res) != DLB_BUNDLED || res.ent->type != DLB_DIR) continue;
		uint32_t ck;
		const struct dlb_record *c = dlb_listing(table, res.ent, &ck);
		for (uint32_t j = 0; c && j < ck; j++) {
			const char *cat = dlb_record_name(table, &c[j]);
			if (!cat) return 0;
			if (!strcmp(cat, ".") || !strcmp(cat, "..") || !strcmp(cat, "LC_MESSAGES")) continue; /* checked above */
			if (!catalog_decided(dir, n, name, nn, cat, c[j].name_len, domain, dn)) return 0;
		}
	}
	return 1;
}

/* bind_find: the slot of domain, or NULL. Under bind_lock. */
static struct bind_slot *bind_find(const char *domain)
{
	for (int i = 0; i < BIND_MAX; i++)
		if (bind_slots[i].domain[0] && !strcmp(bind_slots[i].domain, domain)) return &bind_slots[i];
	return NULL;
}

char *bindtextdomain(const char *domain, const char *dirname)
{
	ensure_init();
	if (!real_bindtextdomain) return NULL;
	if (!domain || !domain[0] || strlen(domain) >= BIND_DOMAIN_MAX)
		return real_bindtextdomain(domain, dirname); /* glibc's answer (NULL, EINVAL) */
	if (!dirname) {
		/* A query: glibc's current binding, or the app's name for ours. */
		char *cur = real_bindtextdomain(domain, NULL);
		bind_enter();
		struct bind_slot *s = bind_find(domain);
		if (s && cur && !strcmp(cur, s->staged)) cur = s->orig;
		bind_leave();
		return cur;
	}
	size_t dl = strlen(dirname);
	/* glibc joins each LANGUAGE entry to the dirname as it is, ".." and "/"
	 * included (2.36: LANGUAGE=../other/de opens DIR/../other/de/...), which
	 * may reach what the listing does not decide: then no redirection. */
	const char *language = getenv("LANGUAGE");
	int lang_ok = !(language && strchr(language, '/'));
	/* The same binding again (an app may bind before every lookup): the
	 * table has not changed, and the process wrote nothing. The check of
	 * every language costs ~0.7 us per language, glibc's answer to a
	 * repeated binding ~0.03 us. */
	bind_enter();
	struct bind_slot *same = bind_find(domain);
	if (same && lang_ok && !strcmp(same->orig, dirname) && !DLB_DIRTY_ANY() && !DLB_DIRTY_ALL()) {
		char *ret = real_bindtextdomain(domain, same->staged);
		if (ret) ret = same->orig;
		bind_leave();
		return ret;
	}
	bind_leave();
	char canon[DLB_PATH_MAX];
	struct dlb_res r;
	int redirect = table && dirname[0] == '/' && dl < sizeof canon && lang_ok &&
		       dlb_resolve(table, dirname, 1, canon, &r) == DLB_BUNDLED && r.ent->type == DLB_DIR &&
		       catalogs_decided(canon, r.len, domain);
	bind_enter();
	struct bind_slot *s = bind_find(domain);
	if (!redirect) {
		if (s) s->domain[0] = 0; /* glibc now holds the app's own name */
		bind_leave();
		debug_log("pass", "bindtextdomain", dirname, 0);
		return real_bindtextdomain(domain, dirname);
	}
	if (!s)
		for (int i = 0; i < BIND_MAX && !s; i++)
			if (!bind_slots[i].domain[0]) s = &bind_slots[i];
	if (!s || staged(s->staged, sizeof s->staged, canon, r.len) != 0) {
		if (s) s->domain[0] = 0; /* glibc gets the app's own name */
		bind_leave();
		debug_log("pass", "bindtextdomain", dirname, 0); /* the table is full */
		return real_bindtextdomain(domain, dirname);
	}
	memcpy(s->orig, dirname, dl + 1);
	memcpy(s->domain, domain, strlen(domain) + 1);
	char *ret = real_bindtextdomain(domain, s->staged);
	/* glibc failed (ENOMEM): it keeps the old binding, which is not ours. */
	if (!ret) s->domain[0] = 0;
	else ret = s->orig;
	bind_leave();
	debug_log("bundled", "bindtextdomain", dirname, s->staged);
	return ret;
}

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
#include <limits.h>
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
	X(posix_spawn, int, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
			     const posix_spawnattr_t *, char *const[], char *const[]))         \
	X(posix_spawnp, int, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
			      const posix_spawnattr_t *, char *const[], char *const[]))

#define DECLARE_REAL(name, ret, args) static ret(*real_##name) args;
SHIM_FUNCS(DECLARE_REAL)

/* glibc < 2.33 exports only the versioned __xstat family (compat symbols in
 * newer glibc, invisible to a plain dlsym). We answer them ourselves and
 * forward through the plain stat functions: on x86_64 and aarch64 the
 * _STAT_VER layout equals struct stat. */

/* ---- state, set once by shim_init ---- */
static const void *table;
static char stage_root[1024]; /* $DLBUNDLE_STAGE/root */
static size_t stage_root_len;
static char stage_list[1024]; /* $DLBUNDLE_STAGE/list */
static size_t stage_list_len;
static int debug_on;
static char debug_dir[512];

static void resolve_reals(void)
{
#define RESOLVE(name, ret, args) real_##name = (ret(*) args)dlsym(RTLD_NEXT, #name);
	SHIM_FUNCS(RESOLVE)
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
	int hit = 0;
	*n = 0;
	if (!llp_native || !envp) return 0;
	for (; envp[*n]; (*n)++)
		if (envp[*n] == llp_native || !strcmp(envp[*n], llp_native)) hit = 1;
	return hit;
}
static char *const *env_mapped(char *const envp[], char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		v[i] = envp[i] == llp_native || !strcmp(envp[i], llp_native) ? llp_mapped : envp[i];
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
	if (stage && stage[0] == '/' && strlen(stage) + 8 < sizeof stage_root) {
		stage_root_len = (size_t)snprintf(stage_root, sizeof stage_root, "%s/root", stage);
		stage_list_len = (size_t)snprintf(stage_list, sizeof stage_list, "%s/list", stage);
		char path[1100];
		snprintf(path, sizeof path, "%s/table", stage);
		int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd >= 0 && syscall(SYS_fstat, fd, &st) == 0 && st.st_size > 0) {
			void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
			if (m != MAP_FAILED && dlb_check(m, (size_t)st.st_size)) table = m;
			else if (m != MAP_FAILED) munmap(m, (size_t)st.st_size);
		}
		if (fd >= 0) syscall(SYS_close, fd);
	}
	restore_native_env();
	report_init();
	__atomic_store_n(&init_done, 1, __ATOMIC_RELEASE);
}
__attribute__((constructor)) static void shim_ctor(void) { if (!__atomic_load_n(&init_done, __ATOMIC_ACQUIRE)) shim_init(); }
static inline void ensure_init(void) { if (__builtin_expect(!__atomic_load_n(&init_done, __ATOMIC_ACQUIRE), 0)) shim_init(); }

/* ---- debug log: one write per decision, stderr or DEBUG_DIR/<pid>.log ---- */
static void debug_log(const char *what, const char *fn, const char *path, const char *to)
{
	if (!debug_on) return;
	char line[2 * PATH_MAX + 128];
	int n = snprintf(line, sizeof line, "dlbundle[%d]: %s %s %s%s%s\n", (int)syscall(SYS_getpid), fn, what,
			 path ? path : "(null)", to ? " -> " : "", to ? to : "");
	if (n < 0) return;
	if ((size_t)n >= sizeof line) n = sizeof line - 1;
	int fd = 2, close_it = 0;
	if (debug_dir[0]) {
		char p[600];
		snprintf(p, sizeof p, "%s/%d.log", debug_dir, (int)syscall(SYS_getpid));
		fd = (int)syscall(SYS_openat, AT_FDCWD, p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		close_it = fd >= 0;
	}
	if (fd >= 0) syscall(SYS_write, fd, line, (size_t)n);
	if (close_it) syscall(SYS_close, fd);
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
	ensure_init();
	if (!table || !path || !path[0]) return DLB_UNKNOWN;
	char abs[DLB_PATH_MAX];
	const char *p = path;
	if (path[0] != '/') {
		if (dirfd != AT_FDCWD) goto unknown;
		long n = syscall(SYS_getcwd, abs, sizeof abs);
		size_t pl = strlen(path);
		if (n <= 0 || abs[0] != '/' || (size_t)n + pl + 1 >= sizeof abs) goto unknown;
		abs[n - 1] = '/';
		memcpy(abs + n, path, pl + 1);
		p = abs;
	}
	/* The stage itself is never looked up: it may lie below a directory
	 * whose listing was taken before it existed. */
	if (!strncmp(p, stage_root, stage_root_len - 5) && (p[stage_root_len - 5] == '/' || !p[stage_root_len - 5]))
		goto unknown;
	int rc = dlb_resolve(table, p, follow, canon, r);
	if (rc == DLB_BUNDLED) { report_count(REPORT_ANSWERED, NULL); debug_log("bundled", fn, path, canon); }
	else if (rc == DLB_KNOWN_ERR) { report_count(REPORT_MISSING, NULL); debug_log("missing", fn, path, 0); }
	else goto unknown;
	return rc;
unknown:
	if (r->rewritten) *pp = canon;
	report_count(REPORT_PASSED, *pp); /* the path that reaches the file system */
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

/* The table has no block counts: ext4-like values, 4 KiB blocks, and none
 * for a symlink short enough to live in the inode ("fast" symlink). */
static long long blocks_of(const struct dlb_entry *e)
{
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
	return real_stat ? real_stat(path, st) : sys_fstatat(AT_FDCWD, path, st, 0);
}
int stat64(const char *path, struct stat64 *st)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_stat("stat64", AT_FDCWD, &path, canon, 1, (struct stat *)st, &rc)) return rc;
	return real_stat64 ? real_stat64(path, st) : sys_fstatat(AT_FDCWD, path, st, 0);
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
int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (!(flags & AT_EMPTY_PATH) || (path && path[0]))
		if (do_stat("fstatat", dirfd, &path, canon, !(flags & AT_SYMLINK_NOFOLLOW), st, &rc)) return rc;
	return real_fstatat ? real_fstatat(dirfd, path, st, flags) : sys_fstatat(dirfd, path, st, flags);
}
int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (!(flags & AT_EMPTY_PATH) || (path && path[0]))
		if (do_stat("fstatat64", dirfd, &path, canon, !(flags & AT_SYMLINK_NOFOLLOW), (struct stat *)st, &rc)) return rc;
	return real_fstatat64 ? real_fstatat64(dirfd, path, st, flags) : sys_fstatat(dirfd, path, st, flags);
}
/* Compat entry points of glibc < 2.33 (binaries built there still call them). */
int __xstat(int ver, const char *path, struct stat *st) { (void)ver; return stat(path, st); }
int __xstat64(int ver, const char *path, struct stat64 *st) { (void)ver; return stat64(path, st); }
int __lxstat(int ver, const char *path, struct stat *st) { (void)ver; return lstat(path, st); }
int __lxstat64(int ver, const char *path, struct stat64 *st) { (void)ver; return lstat64(path, st); }
int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags) { (void)ver; return fstatat(dirfd, path, st, flags); }
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags) { (void)ver; return fstatat64(dirfd, path, st, flags); }

int statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *sx)
{
	char canon[DLB_PATH_MAX];
	if (!(flags & AT_EMPTY_PATH) || (path && path[0])) {
		struct dlb_res r;
		switch (lookup("statx", dirfd, &path, !(flags & AT_SYMLINK_NOFOLLOW), canon, &r)) {
		case DLB_BUNDLED: {
			const struct dlb_entry *e = r.ent;
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
			(void)mask;
			return 0;
		}
		case DLB_KNOWN_ERR: return set_errno(r.err);
		}
	}
	if (!real_statx) return syscall(SYS_statx, dirfd, path, flags, mask, sx) < 0 ? -1 : 0;
	return real_statx(dirfd, path, flags, mask, sx);
}

/* ---- access ---- */

/* access_check answers from the table's mode and owner what the kernel would
 * for the original file: root passes R/W, and X when any x bit is set (or a dir). */
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
			gid_t groups[256];
			int n = getgroups(256, groups);
			for (int i = 0; i < n; i++) if (groups[i] == e->gid) in_group = 1;
		}
		bits = in_group ? (m >> 3) & 7 : m & 7;
	}
	if ((mode & R_OK && !(bits & 4)) || (mode & W_OK && !(bits & 2)) || (mode & X_OK && !(bits & 1)))
		return set_errno(EACCES);
	return 0;
}

static int do_access(const char *fn, int dirfd, const char **pp, char *canon, int mode, int flags, int *rc)
{
	struct dlb_res r;
	switch (lookup(fn, dirfd, pp, !(flags & AT_SYMLINK_NOFOLLOW), canon, &r)) {
	case DLB_BUNDLED: *rc = access_check(r.ent, mode, flags & AT_EACCESS); return 1;
	case DLB_KNOWN_ERR: *rc = set_errno(r.err); return 1;
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

/* serve_maps reads the real file and returns a memfd holding it with every
 * stage_root prefix removed (anonymous mmap as the buffer: no malloc). */
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
	size_t out = 0;
	for (size_t i = 0; i < len;) {
		if (len - i > stage_root_len && memcmp(buf + i, stage_root, stage_root_len) == 0 && buf[i + stage_root_len] == '/') {
			i += stage_root_len;
			continue;
		}
		buf[out++] = buf[i++];
	}
	int fd = (int)syscall(SYS_memfd_create, "maps", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
	if (fd >= 0) {
		for (size_t off = 0; off < out;) {
			long n = syscall(SYS_write, fd, buf + off, out - off);
			if (n <= 0) break;
			off += (size_t)n;
		}
		lseek(fd, 0, SEEK_SET);
	}
	munmap(buf, cap);
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
	if (flags & (WRITE_FLAGS | O_DIRECTORY | O_PATH)) return 0;
	char sp[DLB_PATH_MAX + 1024];
	struct dlb_res r;
	switch (lookup(fn, dirfd, pp, !(flags & O_NOFOLLOW), canon, &r)) {
	case DLB_BUNDLED:
		if (r.ent->type == DLB_SYMLINK) { *rc = set_errno(ELOOP); return 1; } /* O_NOFOLLOW on a symlink */
		if (r.ent->type != DLB_REG) return 0; /* directories: a dir fd would expose the stage */
		/* The staged copy belongs to us; the original may not be readable by
		 * us: answer EACCES as the original would (only files without the
		 * world-read bit need the check, and its getuid calls). */
		if (!(r.ent->mode & 04) && access_check(r.ent, R_OK, 1) != 0) { *rc = -1; return 1; }
		if (staged(sp, sizeof sp, canon, r.len) != 0) return 0;
		*rc = (int)syscall(SYS_openat, AT_FDCWD, sp, flags, 0);
		if (*rc < 0) { errno = -*rc; *rc = -1; }
		return 1;
	case DLB_KNOWN_ERR:
		*rc = set_errno(r.err);
		return 1;
	}
	return 0;
}

static mode_t vmode(int flags, va_list ap) { return (flags & (O_CREAT | __O_TMPFILE)) ? va_arg(ap, mode_t) : 0; }

int open(const char *path, int flags, ...)
{
	va_list ap; va_start(ap, flags); mode_t m = vmode(flags, ap); va_end(ap);
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("open", AT_FDCWD, &path, canon, flags, &rc)) return rc;
	return real_open(path, flags, m);
}
int open64(const char *path, int flags, ...)
{
	va_list ap; va_start(ap, flags); mode_t m = vmode(flags, ap); va_end(ap);
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("open64", AT_FDCWD, &path, canon, flags, &rc)) return rc;
	return real_open64(path, flags, m);
}
int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap; va_start(ap, flags); mode_t m = vmode(flags, ap); va_end(ap);
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("openat", dirfd, &path, canon, flags, &rc)) return rc;
	return real_openat(dirfd, path, flags, m);
}
int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap; va_start(ap, flags); mode_t m = vmode(flags, ap); va_end(ap);
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("openat64", dirfd, &path, canon, flags, &rc)) return rc;
	return real_openat64(dirfd, path, flags, m);
}
/* _FORTIFY_SOURCE variants (no mode argument by definition). */
int __open_2(const char *path, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("__open_2", AT_FDCWD, &path, canon, flags, &rc)) return rc;
	return real___open_2(path, flags);
}
int __open64_2(const char *path, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("__open64_2", AT_FDCWD, &path, canon, flags, &rc)) return rc;
	return real___open64_2(path, flags);
}
int __openat_2(int dirfd, const char *path, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("__openat_2", dirfd, &path, canon, flags, &rc)) return rc;
	return real___openat_2(dirfd, path, flags);
}
int __openat64_2(int dirfd, const char *path, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("__openat64_2", dirfd, &path, canon, flags, &rc)) return rc;
	return real___openat64_2(dirfd, path, flags);
}

/* fopen's internal open bypasses our open(), so fopen is decided here. A mode
 * with w, a or + writes and passes through. */
static int fopen_decide(const char *fn, const char **pp, char *canon, const char *mode, char *sp, size_t spsz, int *err, int *maps)
{
	const char *path = *pp;
	ensure_init();
	*maps = 0;
	if (!path || !mode || strpbrk(mode, "wa+")) return DLB_UNKNOWN;
	if (wants_maps(path)) { *maps = 1; return DLB_BUNDLED; }
	struct dlb_res r;
	int rc = lookup(fn, AT_FDCWD, pp, 1, canon, &r);
	if (rc == DLB_KNOWN_ERR) { *err = r.err; return rc; }
	if (rc == DLB_BUNDLED && r.ent->type == DLB_REG && staged(sp, spsz, canon, r.len) == 0) return rc;
	return DLB_UNKNOWN;
}
static FILE *do_fopen(FILE *(*real)(const char *, const char *), const char *fn, const char *path, const char *mode)
{
	char sp[DLB_PATH_MAX + 1024], canon[DLB_PATH_MAX];
	int err = 0, maps = 0;
	switch (fopen_decide(fn, &path, canon, mode, sp, sizeof sp, &err, &maps)) {
	case DLB_BUNDLED:
		if (maps) {
			int fd = serve_maps(path, strchr(mode, 'e') ? O_CLOEXEC : 0);
			return fd < 0 ? NULL : fdopen(fd, mode);
		}
		return real(sp, mode);
	case DLB_KNOWN_ERR: errno = err; return NULL;
	}
	return real(path, mode);
}
FILE *fopen(const char *path, const char *mode) { ensure_init(); return do_fopen(real_fopen, "fopen", path, mode); }
FILE *fopen64(const char *path, const char *mode) { ensure_init(); return do_fopen(real_fopen64, "fopen64", path, mode); }
static FILE *do_freopen(FILE *(*real)(const char *, const char *, FILE *), const char *fn, const char *path, const char *mode, FILE *f)
{
	char sp[DLB_PATH_MAX + 1024], canon[DLB_PATH_MAX];
	int err = 0, maps = 0;
	switch (path ? fopen_decide(fn, &path, canon, mode, sp, sizeof sp, &err, &maps) : DLB_UNKNOWN) {
	case DLB_BUNDLED:
		if (!maps) return real(sp, mode, f);
		break; /* freopen of /proc/self/maps: rare; native */
	case DLB_KNOWN_ERR: errno = err; fclose(f); return NULL;
	}
	return real(path, mode, f);
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
	if (n < 0) return set_errno((int)-n);
	size_t l = strip_stage(tmp, (size_t)n);
	if (l > size) l = size;
	memcpy(buf, tmp, l);
	return (ssize_t)l;
}

static int do_readlink(const char *fn, int dirfd, const char **pp, char *canon, char *buf, size_t size, ssize_t *rc)
{
	const char *path = *pp;
	ensure_init();
	if (!path) return 0;
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

/* ---- opendir: the complete listing, with d_type, from $STAGE/list ---- */
DIR *opendir(const char *path)
{
	char canon[DLB_PATH_MAX], lp[DLB_PATH_MAX + 1024];
	struct dlb_res r;
	switch (lookup("opendir", AT_FDCWD, &path, 1, canon, &r)) {
	case DLB_BUNDLED:
		if (r.ent->type != DLB_DIR) { errno = ENOTDIR; return NULL; }
		if (stage_list_len + r.len + 1 > sizeof lp) break;
		memcpy(lp, stage_list, stage_list_len);
		memcpy(lp + stage_list_len, canon, r.len + 1);
		return real_opendir(lp);
	case DLB_KNOWN_ERR:
		errno = r.err;
		return NULL;
	}
	return real_opendir(path);
}

/* ---- exec: a bundled ELF executable runs from the stage ---- */

/* exec_target returns the staged copy of path when it is a bundled ELF file
 * or, when script is not NULL, a bundled "#!" script (*script = 1; the
 * caller runs its interpreter itself, see script_argv). Other scripts are not
 * redirected: their interpreter would see the staged path in argv. Stack
 * buffers only: this runs in vfork children. */
static const char *exec_target(const char *fn, const char *path, char *sp, size_t spsz, int *err, int *script)
{
	char canon[DLB_PATH_MAX];
	struct dlb_res r;
	const char *pp = path; /* not rewritten: the kernel hands the exec'd path to a script's interpreter */
	*err = 0;
	if (script) *script = 0;
	switch (lookup(fn, AT_FDCWD, &pp, 1, canon, &r)) {
	case DLB_BUNDLED:
		if (r.ent->type != DLB_REG || staged(sp, spsz, canon, r.len) != 0) break;
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
	int err, script;
	const char *t = exec_target("execve", path, sp, sizeof sp, &err, &script);
	if (!t) return set_errno(err);
	if (script) {
		char line[256], *interp, *arg;
		if (script_line(sp, line, sizeof line, &interp, &arg) == 0) {
			if (depth >= 4) return set_errno(ELOOP);
			int argc = 0;
			while (argv && argv[argc]) argc++;
			char *v[argc + 4];
			int k = 0;
			v[k++] = interp;
			if (arg) v[k++] = arg;
			v[k++] = (char *)path;
			for (int i = 1; i < argc; i++) v[k++] = argv[i];
			v[k] = NULL;
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

int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	char sp[DLB_PATH_MAX + 1024];
	int err;
	const char *t = exec_target("posix_spawn", path, sp, sizeof sp, &err, NULL);
	if (!t) return err;
	size_t n;
	if (env_for_child(envp, &n)) {
		char *v[n + 1];
		return real_posix_spawn(pid, t, fa, attr, argv, env_mapped(envp, v, n));
	}
	return real_posix_spawn(pid, t, fa, attr, argv, envp);
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
		int err;
		const char *t = exec_target("posix_spawnp", cand, sp, sizeof sp, &err, NULL);
		if (t == sp) return real_posix_spawn(pid, t, fa, attr, argv, envp);
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
	if (env_for_child(envp, &n)) {
		char *v[n + 1];
		return spawnp_search(pid, file, fa, attr, argv, env_mapped(envp, v, n));
	}
	return spawnp_search(pid, file, fa, attr, argv, envp);
}

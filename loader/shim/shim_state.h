/* shim_state.h — what the preload object's files share: its state, set
 * once by shim_init (lookup.c), and the functions one file calls in
 * another. Every .c file of the preload object includes it first.
 *
 * The preload object is the LD_PRELOAD half of the shim: libc entry points
 * that C programs and Python use to look at files, answered from the lookup
 * table. Rules (docs/loader.md):
 *  - bundled path -> stat answers from the table, opens of the staged copy;
 *    known missing -> the native errno without a syscall; unknown -> the real
 *    function with the original path, untouched.
 *  - opens for writing, O_DIRECTORY/O_PATH opens and dirfd-relative paths
 *    pass through.
 *  - the lookup path allocates nothing and takes no lock: it is safe in
 *    threads, in signal handlers, after fork and in a vfork child.
 *  - no fd is held after start-up (apps close_range() everything).
 *  - every entry point is in the one table, intercept.h.
 *
 * Everything declared between the visibility pragmas below is hidden: the
 * files link into one object that exports the entry points of intercept.h
 * only, as a single file with static functions did.
 */
#ifndef DLB_SHIM_STATE_H
#define DLB_SHIM_STATE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <gnu/libc-version.h>
#include <limits.h>
#include <link.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
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
#include "intercept.h"

/* The entry points, declared from the table: a definition that differs from
 * its line in intercept.h is a compile error. */
#define DLB_DECLARE_ENTRY(name, ret, args) ret name args;
SHIM_FUNCS(DLB_DECLARE_ENTRY)
SHIM_OWN(DLB_DECLARE_ENTRY)

#pragma GCC visibility push(hidden)

/* Read-your-writes (docs/loader.md): the directories this process (or an
 * ancestor, through DLBUNDLE_DIRTY) wrote into (writes.c). table.h's walk
 * asks (struct dlb_asks, lookup.c) for every prefix it resolves and leaves
 * a dirty one, and all below it, to the kernel. A fixed table, no allocation: DIRTY_MAX
 * directories, their names in dirty_env (which is also the environment
 * string children inherit); on overflow everything is dirty (the shim then
 * passes every lookup through, as without an image). */
extern unsigned dirty_n;   /* entries below it are immutable (release/acquire) */
extern int dirty_all;      /* "/" was written into, or the set overflowed */
extern char dirty_env[32768]; /* "DLBUNDLE_DIRTY=..." */
extern size_t dirty_end;   /* strlen(dirty_env) */
/* Some directory is written into; everything is (acquire: see dirty_n). */
static inline int shim_dirty_any(void) { return __atomic_load_n(&dirty_n, __ATOMIC_ACQUIRE) != 0; }
static inline int shim_dirty_all(void) { return __atomic_load_n(&dirty_all, __ATOMIC_ACQUIRE); }
int dirty_is(const char *p, size_t n, uint64_t h);
int listing_is(const char *p, size_t n, uint64_t h);
size_t dirty_cover(const char *p, size_t n);
int dirty_covered(const char *p, size_t n);
void dirty_inherit(char **slot);
/* What a call that writes did to a name (marked()): changed it, created
 * it, removed it, or opened it for writing (created unless it existed). */
enum { W_CHANGE, W_CREATE, W_REMOVE, W_OPEN };
void marked(long rc, int dirfd, const char *path, int follow_last, int what);

/* More of the walk's questions (table.h, struct dlb_asks; lookup.c asks). */
struct dlb_entry;
int cwd_prefix(const char *p, size_t n);           /* realpath.c */
int search_ok(const struct dlb_entry *e);          /* statopen.c */
#pragma GCC visibility pop
#include "table.h"

#pragma GCC visibility push(hidden)
/* The report's functions are the object's own, like the rest: exported,
 * they would replace an app library's functions of the same names
 * (report_init, report_write...) in every served process. */
#include "report.h"

/* real_<name> for every entry of SHIM_FUNCS (lookup.c defines them). */
#define DLB_DECLARE_REAL(name, ret, args) extern ret(*real_##name) args;
SHIM_FUNCS(DLB_DECLARE_REAL)

/* ---- state, set once by shim_init (lookup.c) ---- */
extern const void *table;
extern char stage_root[1024]; /* $DLBUNDLE_STAGE/root */
extern size_t stage_root_len;
extern dev_t stage_dev;       /* the device of the stage's files */
extern int debug_on;
extern int inactive;          /* the shim has a stage but no table: the FB_* reason, else -1 */
extern uid_t init_uid, init_euid; /* the ids that read the stage at start-up */
extern volatile int init_done;
void stage_table_path(char *out); /* $DLBUNDLE_STAGE/table, DLB_STAGE_MAX + 8 bytes */

/* lookup.c: start-up, the debug log, the lookup */
void shim_init(void);
/* shim_init runs as a constructor, but other libraries' constructors may
 * call us first, so every entry point calls ensure_init(). */
static inline void ensure_init(void) { if (__builtin_expect(!__atomic_load_n(&init_done, __ATOMIC_ACQUIRE), 0)) shim_init(); }
void debug_log(const char *what, const char *fn, const char *path, const char *to);
void debug_note(const char *what, const char *p, size_t n, const char *why);
int fallback(const struct dlb_res *r, const char *canon);
int lookup(const char *fn, int dirfd, const char **pp, int follow, char *canon, struct dlb_res *r);
void note_dir_open(const char *path);
/* shim_resolve: table.h's dlb_resolve_known against the mapped table (which
 * the caller has checked is there); the walk's one copy in the object. */
int shim_resolve(const char *in, size_t known, int follow, char *out, struct dlb_res *r);
int staged(char *out, size_t outsz, const char *canon, size_t n);
size_t strip_stage(char *s, size_t n);
static inline int set_errno(int e) { errno = e; return -1; }

/* DLB_COLD: a large buffer that most processes never touch (or touch only
 * on a rare path). The build sorts .bss by alignment, largest first
 * (build.sh), so these page-aligned ones come ahead of everything else,
 * and the state every process writes at start-up and exit (the smaller
 * arrays and the scalars) lies together after them, from a page boundary
 * when the last of them is a whole number of pages: one page, where it
 * was spread over 8 (each page first touched costs a process a fault).
 * Keep it under 4 KB: a path buffer there would take a page of its own. */
#define DLB_COLD __attribute__((aligned(4096)))

/* The shim's variables, read in one pass over environ at start-up:
 * getenv for each would scan the whole environment ten times, and a batch
 * job's environment holds hundreds of entries. Each is the first entry of
 * its name, as getenv's answer; the value after '=' (NULL: not set). */
struct shim_env {
	const char *stage, *debug, *debug_dir, *native_env, *mapped_env, *report, *report_max, *run;
	char **dirty; /* the first DLBUNDLE_DIRTY= entry's slot in environ */
	char **llp;   /* the first LD_LIBRARY_PATH= entry's slot */
};

/* exec.c: the environment a child gets, argv[0], who may read the stage */
void restore_native_env(const struct shim_env *v);
void unstage_argv0(int argc, char **argv);
int stage_readable(void);

/* statopen.c: permissions from the table, fstat of staged fds */
#define ACCESS_UNDECIDED (-2)
int access_check(const struct dlb_entry *e, int mode, int effective);
int readable_original(const struct dlb_entry *e);
void fd_note(int fd, const struct dlb_entry *e);
void fstat_fix(int fd, struct stat *st);
void proc_stat_fix(const char *path, struct stat *st);
const struct dlb_entry *entry_via_link(const char *link, const struct stat *st);
const struct dlb_entry *fd_staged(int fd, const struct stat *st);

/* realpath.c */
ssize_t proc_readlink(int dirfd, const char *path, char *buf, size_t size);
int in_stage(const char *p, size_t n);
int rp_walk(const char *path, char *res, int *native, char *first);

/* listings.c: directory streams the shim serves */
DIR *dir_open(const struct dlb_entry *e, const char *canon, size_t n);
size_t dir_fd_path(int fd, char *out, size_t cap);
const struct dlb_entry *dir_fd_entry(int fd, const struct stat *st);

#pragma GCC visibility pop

#endif

/* report.c — see report.h; the line itself is written by reportfmt.h. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "report.h"
#include "reportfmt.h"
#include "table.h"

/* Bounds (docs/loader.md, "Reports"): the first MAX_PATHS distinct
 * passed-through paths are kept whole in ARENA bytes; distinctness is
 * tracked for SEEN_MAX paths. Everything lives in .bss: pages never written
 * cost nothing. */
#define MAX_PATHS 512
#define ARENA (256u << 10)
#define SEEN_MAX 4096
#define LINE_CAP (512u << 10)
#define OUTSIDE_MAX 256 /* libraries from outside the image listed per process */

static char report_file[DLB_PATH_MAX];
static uint64_t counts[3];
static uint64_t seen[SEEN_MAX]; /* open-addressing set of hashes of passed-through paths */
static struct slot {
	uint32_t off, len1; /* len1 = length + 1, stored last: 0 while a thread still copies */
} slots[MAX_PATHS];
static char arena[ARENA];
static uint32_t nslots, nseen;
static uint64_t arena_used;
static uint64_t dropped;
static pid_t report_pid; /* the process whose counts these are */

/* After fork the child starts counting afresh (the parent reports its own). */
static void report_child_reset(void)
{
	report_pid = (pid_t)syscall(SYS_getpid);
	memset(counts, 0, sizeof counts);
	if (nseen) { /* (untouched .bss stays unwritten: no page faults per fork) */
		memset(seen, 0, sizeof seen);
		memset(slots, 0, sizeof slots);
	}
	nslots = nseen = 0;
	arena_used = 0;
	dropped = 0;
}

/* ---- fatal signals: a process killed by SIGTERM (Slurm's time limit, a
 * scheduler's cancel) or that abort()s runs no destructor and no _exit. With
 * a report file only, report_init installs report_fatal for the signals
 * below whose disposition is SIG_DFL: an app's own handler (installed before
 * us, or later: it simply replaces ours) and ignored signals are left
 * alone. report_fatal writes the report, restores SIG_DFL and sends the
 * signal again to its thread; the signal is blocked in the handler, so it is
 * delivered when the handler returns and the process ends by it, exactly as
 * without us (exit status, core dump). A fault (SIGSEGV...) raised again by
 * the faulting instruction ends the same way. SIGINT is not among them:
 * Python installs its KeyboardInterrupt handler only where SIGINT is
 * SIG_DFL. What an app can observe: sigaction() reports our handler instead
 * of SIG_DFL for these signals (docs/loader.md, "Reports"). */
static const int fatal_sigs[] = {SIGTERM, SIGHUP, SIGQUIT, SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGXCPU};

static void report_fatal(int sig)
{
	report_write();
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	sigaction(sig, &dfl, NULL);
	syscall(SYS_tgkill, syscall(SYS_getpid), syscall(SYS_gettid), sig);
}

static void install_fatal(void)
{
	for (unsigned i = 0; i < sizeof fatal_sigs / sizeof *fatal_sigs; i++) {
		struct sigaction old, sa;
		if (sigaction(fatal_sigs[i], NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
			continue;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = report_fatal;
		sigemptyset(&sa.sa_mask);
		sa.sa_flags = SA_RESTART;
		sigaction(fatal_sigs[i], &sa, NULL);
	}
}

void report_init(void)
{
	const char *f = getenv("DLBUNDLE_REPORT");
	if (!f || !f[0] || strlen(f) >= sizeof report_file) return;
	strcpy(report_file, f);
	report_pid = (pid_t)syscall(SYS_getpid);
	pthread_atfork(NULL, NULL, report_child_reset);
	install_fatal();
}

/* ---- libraries from outside the image ----
 *
 * The audit module answers ld.so's search from the table; what it cannot
 * decide (a directory the image lacks, a dlopen by a path it does not hold)
 * ld.so opens on the real file system. At report time the preload walks the
 * main namespace's link_map list (_r_debug, exported by ld.so) and lists the
 * objects whose name shim_from_outside judges outside the image. No state is
 * shared with the audit module (it lives in its own namespace, without
 * libc): la_objopen gives every object loaded from the stage its original
 * name, which the table holds as bundled. The walk takes no lock (dl_iterate_
 * phdr's lock could deadlock in a signal handler): an object being dlopen'ed
 * by another thread at that moment may be missed, and an object dlclose'd
 * before exit is not listed. Skipped: the executable (empty name), the vDSO
 * (no '/'), ld.so itself (AT_BASE; it is the node's, by design). */
extern struct r_debug _r_debug;

static uint32_t outside_list(const char **ps, size_t *ls, uint32_t max, uint64_t *left)
{
	uintptr_t ldso = (uintptr_t)getauxval(AT_BASE);
	uint32_t n = 0;
	for (const struct link_map *l = _r_debug.r_map; l; l = l->l_next) {
		if ((ldso && l->l_addr == ldso) || !l->l_name || l->l_name[0] != '/' || !shim_from_outside(l->l_name))
			continue;
		if (n == max) { ++*left; continue; }
		ps[n] = l->l_name;
		ls[n++] = strlen(l->l_name);
	}
	return n;
}

/* keep copies a new distinct path into the arena, or counts it as dropped. */
static void keep(const char *p, size_t n)
{
	/* Claims are made only when they look like they fit, so arena_used
	 * passes ARENA by at most one path per racing thread. */
	if (__atomic_load_n(&nslots, __ATOMIC_RELAXED) >= MAX_PATHS || n > ARENA ||
	    __atomic_load_n(&arena_used, __ATOMIC_RELAXED) > ARENA - n)
		goto drop;
	uint64_t off = __atomic_fetch_add(&arena_used, n, __ATOMIC_RELAXED);
	if (off > ARENA - n) goto drop;
	uint32_t i = __atomic_fetch_add(&nslots, 1, __ATOMIC_RELAXED);
	if (i >= MAX_PATHS) goto drop;
	memcpy(arena + off, p, n);
	slots[i].off = (uint32_t)off;
	__atomic_store_n(&slots[i].len1, (uint32_t)n + 1, __ATOMIC_RELEASE);
	return;
drop:
	__atomic_fetch_add(&dropped, 1, __ATOMIC_RELAXED);
}

void report_count(int kind, const char *p)
{
	if (!report_file[0]) return;
	__atomic_fetch_add(&counts[kind], 1, __ATOMIC_RELAXED);
	if (kind != REPORT_PASSED || !p) return;
	size_t n = strlen(p);
	uint64_t h = dlb_hash(p, n) | 1;
	for (uint32_t i = (uint32_t)h % SEEN_MAX, k = 0; k < SEEN_MAX; k++, i = (i + 1) % SEEN_MAX) {
		uint64_t cur = __atomic_load_n(&seen[i], __ATOMIC_RELAXED);
		if (cur == h) return; /* seen */
		if (cur != 0) continue;
		if (__atomic_compare_exchange_n(&seen[i], &cur, h, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
			__atomic_fetch_add(&nseen, 1, __ATOMIC_RELAXED);
			keep(p, n);
			return;
		}
		if (cur == h) return;
	}
	/* The set is full (more than SEEN_MAX distinct paths): from here on
	 * "dropped" may count a path more than once (docs/loader.md). */
	__atomic_fetch_add(&dropped, 1, __ATOMIC_RELAXED);
}

/* One JSON line per process (reportfmt.h), written by the destructor (exit),
 * by _exit (preload.c) or by report_fatal. Async-signal-safe: raw system calls and the
 * hand-written formatter only. A vfork child shares the parent's memory and
 * counts: it does not report (its pid differs). */
__attribute__((destructor)) void report_write(void)
{
	/* Static, not on the stack: _exit may run on a small signal stack.
	 * One writer per process (reported). */
	static char line[LINE_CAP], exe[DLB_PATH_MAX];
	static const char *ps[MAX_PATHS], *os[OUTSIDE_MAX];
	static size_t ls[MAX_PATHS], ol[OUTSIDE_MAX];
	static int reported;
	if (!report_file[0] || (pid_t)syscall(SYS_getpid) != report_pid) return;
	if (__atomic_exchange_n(&reported, 1, __ATOMIC_ACQ_REL)) return;
	long en = syscall(SYS_readlinkat, AT_FDCWD, "/proc/self/exe", exe, sizeof exe - 1);
	if (en < 0) en = 0;
	en = (long)shim_unstage(exe, (size_t)en); /* the original path, not the staged copy */
	uint32_t n = __atomic_load_n(&nslots, __ATOMIC_ACQUIRE);
	if (n > MAX_PATHS) n = MAX_PATHS;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t l1 = __atomic_load_n(&slots[i].len1, __ATOMIC_ACQUIRE);
		ps[i] = l1 ? arena + slots[i].off : NULL;
		ls[i] = l1 ? l1 - 1 : 0;
	}
	uint64_t c[3], left = __atomic_load_n(&dropped, __ATOMIC_RELAXED);
	for (int i = 0; i < 3; i++) c[i] = __atomic_load_n(&counts[i], __ATOMIC_RELAXED);
	uint32_t no = outside_list(os, ol, OUTSIDE_MAX, &left);
	size_t len = dlb_report_line(line, sizeof line, (int64_t)report_pid, exe, (size_t)en, c, os, ol, no, ps, ls, n, left);
	/* O_NONBLOCK: a FIFO at the path (a shared path another user chose)
	 * must not hang the process at exit; then only a regular file of this
	 * process's own (effective) uid gets the line: another user's file would
	 * hand them what the app looked up. */
	int fd = (int)syscall(SYS_openat, AT_FDCWD, report_file,
			      O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0644);
	if (fd < 0) return;
	struct stat st;
	if (syscall(SYS_fstat, fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == (uid_t)syscall(SYS_geteuid))
		syscall(SYS_write, fd, line, len);
	syscall(SYS_close, fd);
}

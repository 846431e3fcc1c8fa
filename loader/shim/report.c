/* report.c — see report.h; the line itself is written by reportfmt.h. The
 * report's entry points are here too: _exit, dlclose, and the signal
 * functions (intercept.h, SHIM_OWN). */
#include "shim_state.h"
#include <dlfcn.h>
#include <errno.h>
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

static int report_on; /* DLBUNDLE_REPORT names a file: report_names starts with its name */
/* DLBUNDLE_RUN (set by dlbundle exec, one per launch): the line starts with
 * {"run":"<id>", so that a file several runs append to keeps them apart.
 * Only [A-Za-z0-9._:-] is taken, so the id needs no JSON escaping. */
#define RUN_MAX 64
static char run_prefix[RUN_MAX + 16];
static size_t run_prefix_len;
/* The stage dir (DLBUNDLE_STAGE as it was at start: stage_root less its
 * "/root"). An object whose l_name is still below it is the shim's own
 * (preload, and audit.so, which the link map walk meets in the audit
 * namespace): la_objopen gives every object loaded from the stage's root its
 * original name. outside_list's count of objects from the stage leaves the
 * shim out by it. (Not dladdr: that would import dladdr@GLIBC_2.34 into the
 * object built for older glibc.) */
static int below_stage_dir(const char *name)
{
	size_t n = stage_root_len > 5 ? stage_root_len - 5 : 0;
	return n && !strncmp(name, stage_root, n) && name[n] == '/';
}
/* DLBUNDLE_REPORT_MAX (bytes; dlbundle exec sets it for the node's records):
 * a report file that has reached it gets no more lines, so that a job of a
 * million short processes cannot fill a tmpfs. 0: no bound (--report). */
static uint64_t report_max;
static uint64_t counts[3];
static uint64_t seen[SEEN_MAX] DLB_COLD; /* open-addressing set of hashes of passed-through paths */
static struct slot {
	uint32_t off, len1; /* len1 = length + 1, stored last: 0 while a thread still copies */
} slots[MAX_PATHS] DLB_COLD;
static char arena[ARENA] DLB_COLD;
static uint32_t nslots, nseen;
static uint64_t arena_used;
static uint64_t dropped;
static pid_t report_pid; /* the process whose counts these are; 0 in a fork child until it reports */

/* Fallbacks (report.h): FB_SLOTS reason/directory pairs, claimed with a
 * compare-and-swap of their key; the directory text goes to fb_arena,
 * published by storing its length + 1 last. A pair that finds no slot or
 * no room is counted under its reason alone (dir ""). */
#define FB_SLOTS 32
#define FB_ARENA (16u << 10)
static const char *const fb_names[FB_NREASONS] = {"written", "written-everything", "no-table", "bad-table",
						  "stage-too-long", "dirfd", "groups", "too-long", "other-uid",
						  "dir-open"};
static struct fb_slot {
	uint64_t key; /* hash of reason and dir, | 1; 0: free */
	uint32_t reason, off, len1;
	uint64_t n;
} fbs[FB_SLOTS] DLB_COLD; /* read only once fb_claimed says a slot was claimed */
static uint32_t fb_claimed;
static uint64_t fb_plain[FB_NREASONS]; /* by reason alone */
static char fb_arena[FB_ARENA] DLB_COLD;
static uint32_t fb_used;

/* After fork the child starts counting afresh (the parent reports its own).
 * No system call here: a tracer that checks what a forked child does first
 * (strace --seccomp-bpf's self-test, seccomp sandboxes) must see the same
 * calls as natively; an extra getpid made strace run under the shim refuse
 * its seccomp filter. The child's pid is taken when it reports. */
static void report_child_reset(void)
{
	report_pid = 0;
	memset(counts, 0, sizeof counts);
	if (nseen) { /* (untouched .bss stays unwritten: no page faults per fork) */
		memset(seen, 0, sizeof seen);
		memset(slots, 0, sizeof slots);
	}
	nslots = nseen = 0;
	arena_used = 0;
	dropped = 0;
	if (fb_claimed) memset(fbs, 0, sizeof fbs);
	fb_claimed = 0;
	memset(fb_plain, 0, sizeof fb_plain);
	fb_used = 0;
}

/* ---- fatal signals: a process killed by SIGTERM (Slurm's time limit, a
 * scheduler's cancel) or that abort()s runs no destructor and no _exit. With
 * a report file only, want_fatal (below) installs report_fatal for the signals
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

static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);
static unsigned char stood_in[NSIG]; /* (bytes: the state every process writes fits one page) */
static void report_fatal(int sig)
{
	report_write();
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	real_sigaction(sig, &dfl, NULL);
	__atomic_store_n(&stood_in[sig], 0, __ATOMIC_RELEASE);
	syscall(SYS_tgkill, syscall(SYS_getpid), syscall(SYS_gettid), sig);
}

/* The app's view: sigaction, signal, sysv_signal and
 * bsd_signal are wrapped so that where report_fatal stands in for SIG_DFL
 * the app reads the disposition it would natively (the SIG_DFL action as it
 * was, flags and mask included): Python's signal.getsignal() and its
 * save/restore of handlers. An app that sets SIG_DFL there keeps
 * report_fatal underneath (the same end: the report, then the default
 * action) and reads SIG_DFL; one that sets anything else replaces it.
 * stood_in[sig]: 0, or report_fatal is installed for sig and
 * dfl_view[stood_in[sig] - 1] is the action the app reads instead (one per
 * fatal signal, not per signal number: the views a process writes at start
 * then fit one page). Other ways of reading the disposition (the
 * rt_sigaction system call itself, /proc/self/status SigCgt) still show it
 * (docs/loader.md). */
#define NFATAL (sizeof fatal_sigs / sizeof *fatal_sigs)
static struct sigaction dfl_view[NFATAL];

/* restore_action puts back the action sigaction() reported, exactly: with
 * the system call, not glibc's sigaction, which would add its own
 * SA_RESTORER and restorer where the kernel held none (an inherited
 * SIG_IGN has flags 0). The kernel's struct sigaction on x86-64 and
 * aarch64: handler, flags, restorer, then the 8-byte mask. */
static void restore_action(int sig, const struct sigaction *a)
{
	struct { void *handler; unsigned long flags; void *restorer; uint64_t mask; } k;
	k.handler = (void *)a->sa_handler;
	k.flags = (unsigned long)a->sa_flags;
	k.restorer = (void *)a->sa_restorer;
	memcpy(&k.mask, &a->sa_mask, sizeof k.mask);
	syscall(SYS_rt_sigaction, sig, &k, NULL, sizeof k.mask);
}

/* sig_lock: install_fatal may run at any time in any thread (want_fatal),
 * so it and the app's sigaction of another thread take turns: otherwise the
 * app's action could land between report_fatal's install and the view kept
 * for it, and sigaction() would report one while the other is in force.
 * install_fatal holds it with every signal blocked in its thread (no handler
 * of this thread can wait for it meanwhile); the wrapper takes it only until
 * install_fatal has run, and a signal handler that calls sigaction while its
 * own thread holds it gives up after a while and goes on without it (the
 * race above, as before this lock). */
static int sig_lock;
static int fatal_done; /* install_fatal has run: no more turns to take */
static int sig_lock_take(void)
{
	if (__atomic_load_n(&fatal_done, __ATOMIC_ACQUIRE)) return 0;
	for (long spins = 0; __atomic_exchange_n(&sig_lock, 1, __ATOMIC_ACQUIRE); spins++)
		if (spins > 1000000) return 0;
	return 1;
}
static void sig_lock_give(int held)
{
	if (held) __atomic_store_n(&sig_lock, 0, __ATOMIC_RELEASE);
}

/* install_fatal sets report_fatal and reads the action it replaced in one
 * call per signal (not a read, then a set: 9 system calls fewer per
 * process), and puts back an action that was not SIG_DFL. The signals are
 * blocked meanwhile, so none is delivered to report_fatal where the app's
 * own action stood: one sent then stays pending and meets that action once
 * it is back (or is discarded, where that is SIG_IGN, as POSIX says). */
static void install_fatal(void)
{
	if (!real_sigaction) return;
	sigset_t all, saved;
	sigfillset(&all);
	/* the kernel's mask is 8 bytes; glibc's sigset_t begins with it */
	if (syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, &saved, 8) != 0) return;
	int held = sig_lock_take();
	for (unsigned i = 0; i < NFATAL; i++) {
		int sig = fatal_sigs[i];
		struct sigaction old, sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = report_fatal;
		sigemptyset(&sa.sa_mask);
		sa.sa_flags = SA_RESTART;
		if (real_sigaction(sig, &sa, &old) != 0) continue;
		if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) { /* the app's: back as it was */
			restore_action(sig, &old);
			continue;
		}
		dfl_view[i] = old;
		__atomic_store_n(&stood_in[sig], (unsigned char)(i + 1), __ATOMIC_RELEASE);
	}
	__atomic_store_n(&fatal_done, 1, __ATOMIC_RELEASE);
	sig_lock_give(held);
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &saved, NULL, 8);
}

/* want_fatal installs report_fatal once, when the process first has
 * something to report (report_count, report_fallback, report_closing,
 * audit.so's notes), not at start-up: a process the image served entirely
 * writes no line to the node's records (report_write), so the 12 system
 * calls of the install and the views' page were paid by every process for
 * the few that pass something to the file system. With --report (no bound:
 * every process writes a line) it runs at start-up, as before. */
static int fatal_wanted;
static void want_fatal(void)
{
	if (!report_on || __atomic_load_n(&fatal_wanted, __ATOMIC_RELAXED)) return;
	/* A vfork child shares this memory but not the signal actions: what
	 * it installed would leave the parent, which it marks done, without. */
	pid_t me = (pid_t)syscall(SYS_getpid);
	if (report_pid && me != report_pid) return;
	if (__atomic_exchange_n(&fatal_wanted, 1, __ATOMIC_ACQ_REL)) return;
	install_fatal();
}

static int sigaction_held(int sig, const struct sigaction *act, struct sigaction *oldact)
{
	int k = sig > 0 && sig < NSIG ? __atomic_load_n(&stood_in[sig], __ATOMIC_ACQUIRE) : 0;
	if (!k) return real_sigaction(sig, act, oldact);
	struct sigaction view = dfl_view[k - 1];
	if (act && !(act->sa_flags & SA_SIGINFO) && act->sa_handler == SIG_DFL) {
		dfl_view[k - 1] = *act; /* report_fatal stays underneath */
	} else if (act) {
		int rc = real_sigaction(sig, act, NULL);
		if (rc != 0) return rc;
		__atomic_store_n(&stood_in[sig], 0, __ATOMIC_RELEASE);
	}
	if (oldact) *oldact = view;
	return 0;
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *oldact)
{
	if (!real_sigaction) real_sigaction = (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(RTLD_NEXT, "sigaction");
	/* only for a signal report_fatal may stand in for */
	int fatal = 0;
	for (unsigned i = 0; i < NFATAL; i++) fatal |= sig == fatal_sigs[i];
	int held = fatal && sig_lock_take();
	int rc = sigaction_held(sig, act, oldact);
	sig_lock_give(held);
	return rc;
}

/* signal() and its variants set the action with glibc's internal
 * sigaction, which the wrapper above would not see: the same actions,
 * through it (glibc signal/signal.c, sysv_signal.c). */
static sighandler_t set_handler(int sig, sighandler_t h, int flags, int mask_self)
{
	struct sigaction sa, old;
	if (h == SIG_ERR || sig <= 0 || sig >= NSIG) { errno = EINVAL; return SIG_ERR; }
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = h;
	sigemptyset(&sa.sa_mask);
	if (mask_self) sigaddset(&sa.sa_mask, sig);
	sa.sa_flags = flags;
	if (sigaction(sig, &sa, &old) < 0) return SIG_ERR;
	return old.sa_handler;
}
sighandler_t signal(int sig, sighandler_t h) { return set_handler(sig, h, SA_RESTART, 1); }
sighandler_t bsd_signal(int sig, sighandler_t h) { return set_handler(sig, h, SA_RESTART, 1); }
sighandler_t sysv_signal(int sig, sighandler_t h) { return set_handler(sig, h, SA_RESETHAND | SA_NODEFER, 0); }

/* The names start-up takes for the report: the report file's name, then
 * the executable's (from exe_at). aligned(1): the build sorts .bss by
 * alignment, largest first, so this comes after the small state every
 * process writes at start-up, and the names' first bytes lie on that page.
 * In a buffer of their own (page-aligned, they cost every process a page
 * fault of their own, though a process the image served entirely writes no
 * line at exit). */
static char report_names[2 * DLB_PATH_MAX] __attribute__((aligned(1)));
/* The report writer's buffer: the line (report_write), and the link map
 * walk's scratch before it. Static, not on the stack: _exit may run on a
 * small signal stack. */
static char report_buf[DLB_PATH_MAX + LINE_CAP] DLB_COLD;
static size_t exe_at;  /* where the executable's name starts in report_names */
static size_t exe_len; /* its length; 0: not taken, read /proc/self/exe at exit */

/* note_exe takes the report's exe at start-up: the program as the process
 * was started, the path execve was given (AT_EXECFN, which the kernel
 * leaves on the initial stack: no /proc, whose first touch costs a process
 * ~25 us), made absolute against the working directory, the staged copy's
 * original path. A #! script is its own path, not its interpreter's.
 * Taken before the app runs: a process-title library may overwrite the
 * strings on the initial stack. A name we cannot make absolute, or one
 * through an fd (fexecve: /dev/fd/N), is left to /proc/self/exe. */
static void note_exe(void)
{
	const char *fn = (const char *)getauxval(AT_EXECFN);
	size_t n = fn ? dlb_strlen(fn) : 0, at = 0;
	if (n == 0 || n >= DLB_PATH_MAX || dlb_memeq(fn, "/dev/fd/", 8) || dlb_memeq(fn, "/proc/", 6)) return;
	char *exe = report_names + exe_at;
	if (fn[0] != '/') {
		while (n > 2 && fn[0] == '.' && fn[1] == '/') { fn += 2; n -= 2; }
		long c = syscall(SYS_getcwd, exe, DLB_PATH_MAX);
		if (c <= 1 || exe[0] != '/') return; /* unreachable cwd: "(unreachable)/..." */
		at = (size_t)c - 1;
		if (at > 1) exe[at++] = '/';
		if (at + n >= DLB_PATH_MAX) return;
	}
	memcpy(exe + at, fn, n);
	exe_len = strip_stage(exe, at + n); /* the staged copy's original path */
}

void report_init(const struct shim_env *v)
{
	/* resolved here, once: the wrapper may run in a signal handler */
	real_sigaction = (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(RTLD_NEXT, "sigaction");
	const char *f = v->report;
	size_t fl = f ? dlb_strlen(f) : 0;
	if (fl == 0 || fl >= DLB_PATH_MAX) {
		/* no report: no install to take turns with */
		__atomic_store_n(&fatal_done, 1, __ATOMIC_RELEASE);
		return;
	}
	memcpy(report_names, f, fl + 1);
	exe_at = fl + 1;
	report_on = 1;
	const char *max = v->report_max;
	for (; max && *max >= '0' && *max <= '9' && report_max < (1ull << 60); max++)
		report_max = report_max * 10 + (uint64_t)(*max - '0');
	const char *run = v->run;
	size_t rl = run ? dlb_strlen(run) : 0;
	int ok = rl > 0 && rl <= RUN_MAX;
	for (size_t i = 0; ok && i < rl; i++) {
		char c = run[i];
		ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		     c == '-' || c == ':';
	}
	if (ok) {
		memcpy(run_prefix, "{\"run\":\"", 8);
		memcpy(run_prefix + 8, run, rl);
		memcpy(run_prefix + 8 + rl, "\",", 2);
		run_prefix_len = rl + 10;
	}
	report_pid = (pid_t)syscall(SYS_getpid);
	note_exe();
	pthread_atfork(NULL, NULL, report_child_reset);
	/* Libraries audit.so already noted (from outside the stage, at
	 * start-up): something to report; later notes call want_fatal
	 * themselves (the share's noted hook). */
	struct dlb_audit_share *a = (struct dlb_audit_share *)shim_notes();
	if (a) __atomic_store_n(&a->noted, want_fatal, __ATOMIC_RELEASE);
	if (!report_max || (a && __atomic_load_n(&a->notes_len, __ATOMIC_ACQUIRE))) want_fatal();
}

/* ---- libraries from outside the image ----
 *
 * The audit module answers ld.so's search from the table; what it cannot
 * decide (a directory the image lacks, a dlopen by a path it does not hold)
 * ld.so opens on the real file system. At report time the preload walks the
 * link_map lists of every namespace (_r_debug, exported by ld.so, and since
 * glibc 2.35, r_version 2, the r_debug_extended chain of the dlmopen
 * namespaces) and lists the objects whose name shim_from_outside judges
 * outside the image, plus those dlclose'd before (report_closing, called by
 * the preload's dlclose), plus the audit module's notes (add_notes, below:
 * what it saw at la_objopen, dependencies of dlclose'd objects included).
 * la_objopen gives every object loaded from the stage its original name,
 * which the table holds as bundled. The walk takes no lock (dl_iterate_phdr's lock could deadlock
 * in a signal handler): an object being dlopen'ed by another thread at that
 * moment may be missed. Skipped: the executable (empty name), the vDSO (no
 * '/'), ld.so itself (AT_BASE; it is the node's, by design). */
extern struct r_debug _r_debug;

/* Names of objects from outside the image that were dlclose'd (they may be
 * unmapped at exit): copied here, at most CLOSED_MAX of them. */
#define CLOSED_MAX 64
#define CLOSED_ARENA (16u << 10)
static char closed_arena[CLOSED_ARENA] DLB_COLD;
static const char *closed[CLOSED_MAX] DLB_COLD;
static uint32_t nclosed, closed_used;

void report_closing(const char *name)
{
	if (!report_on || !name || name[0] != '/' || !shim_from_outside(name)) return;
	want_fatal();
	size_t n = strlen(name) + 1;
	for (uint32_t i = 0; i < __atomic_load_n(&nclosed, __ATOMIC_ACQUIRE) && i < CLOSED_MAX; i++)
		if (closed[i] && !strcmp(closed[i], name)) return;
	uint32_t off = __atomic_fetch_add(&closed_used, (uint32_t)n, __ATOMIC_RELAXED);
	if (n > CLOSED_ARENA || off > CLOSED_ARENA - n) return;
	uint32_t i = __atomic_fetch_add(&nclosed, 1, __ATOMIC_RELAXED);
	if (i >= CLOSED_MAX) return;
	memcpy(closed_arena + off, name, n);
	__atomic_store_n(&closed[i], closed_arena + off, __ATOMIC_RELEASE);
}

/* outside_list also counts in *from_stage the objects loaded from the stage:
 * ld.so found each through a search the audit module answered from the
 * table, which no lookup of the preload sees (the candidates it answered as
 * missing on the way are not counted: the audit module, without libc and
 * in its own namespace, keeps no counts). */
static int from_outside(const char *name, char *scratch);
static const char *ldso_name; /* ld.so's l_name, as outside_list met it */
static uint32_t outside_list(const char **ps, size_t *ls, uint32_t max, uint64_t *left, uint64_t *from_stage, char *scratch)
{
	uintptr_t ldso = (uintptr_t)getauxval(AT_BASE);
	uint32_t n = 0;
	const struct r_debug *d = &_r_debug;
	for (int ns = 0; d && ns < 16; ns++) {
		for (const struct link_map *l = d->r_map; l; l = l->l_next) {
			if (ldso && l->l_addr == ldso) ldso_name = l->l_name;
			if ((ldso && l->l_addr == ldso) || !l->l_name || l->l_name[0] != '/') continue;
			if (!from_outside(l->l_name, scratch)) {
				if (!below_stage_dir(l->l_name)) ++*from_stage;
				continue;
			}
			int dup = 0;
			for (uint32_t k = 0; k < n && !dup; k++) dup = !strcmp(ps[k], l->l_name);
			if (dup) continue;
			if (n == max) { ++*left; continue; }
			ps[n] = l->l_name;
			ls[n++] = strlen(l->l_name);
		}
#if defined(__GLIBC_PREREQ) && __GLIBC_PREREQ(2, 35)
		/* dlmopen namespaces: glibc 2.35 sets r_version 2 and chains them */
		const struct r_debug_extended *x = d->r_version >= 2 ? ((const struct r_debug_extended *)d)->r_next : NULL;
		d = x ? &x->base : NULL;
#else
		d = NULL;
#endif
	}
	uint32_t k = __atomic_load_n(&nclosed, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < k && i < CLOSED_MAX; i++) {
		const char *c = __atomic_load_n(&closed[i], __ATOMIC_ACQUIRE);
		int dup = !c;
		for (uint32_t j = 0; j < n && !dup; j++) dup = !strcmp(ps[j], c);
		if (dup) continue;
		if (n == max) { ++*left; continue; }
		ps[n] = c;
		ls[n++] = strlen(c);
	}
	return n;
}

/* add_notes adds audit.so's notes (table.h): libraries from outside to
 * os (after the link maps' own, filtered alike), search candidates to ps
 * (counted as passed: ld.so tried each on the file system). The notes
 * are audit.so's memory, which a fork child inherits with the objects
 * they name. */
static void add_notes(const char **os, size_t *ol, uint32_t *no, const char **ps, size_t *ls, uint32_t *np,
		      uint64_t *left, uint64_t *passed, char *scratch)
{
	const struct dlb_audit_share *a = shim_notes();
	if (!a) return;
	uint32_t len = __atomic_load_n(&a->notes_len, __ATOMIC_ACQUIRE);
	const char *p = a->notes, *end = p ? p + len : p;
	*left += a->notes_dropped;
	while (p && p < end) {
		char kind = *p++;
		const char *name = p;
		size_t n = strlen(name);
		p += n + 1;
		const char **xs = kind == DLB_NOTE_LIB ? os : ps;
		size_t *xl = kind == DLB_NOTE_LIB ? ol : ls;
		uint32_t *xn = kind == DLB_NOTE_LIB ? no : np, max = kind == DLB_NOTE_LIB ? OUTSIDE_MAX : MAX_PATHS;
		if (kind == DLB_NOTE_LIB && ((ldso_name && !strcmp(name, ldso_name)) || !from_outside(name, scratch)))
			continue;
		if (kind == DLB_NOTE_SEARCH) ++*passed;
		int dup = 0;
		for (uint32_t k = 0; k < *xn && !dup; k++) dup = xs[k] && xl[k] == n && !memcmp(xs[k], name, n);
		if (dup) continue;
		if (*xn == max) { ++*left; continue; }
		xs[*xn] = name;
		xl[(*xn)++] = n;
	}
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
	if (!report_on) return;
	__atomic_fetch_add(&counts[kind], 1, __ATOMIC_RELAXED);
	if (kind != REPORT_PASSED) return;
	want_fatal();
	if (!p) return;
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

int report_wanted(void) { return report_on; }

void report_dir_open(const char *dir, size_t n, int was_answered)
{
	if (!report_on) return;
	if (was_answered) __atomic_fetch_sub(&counts[REPORT_ANSWERED], 1, __ATOMIC_RELAXED);
	report_fallback(FB_DIR_OPEN, dir, n);
}

void report_fallback(int reason, const char *dir, size_t n)
{
	if (!report_on || reason < 0 || reason >= FB_NREASONS) return;
	report_count(REPORT_PASSED, NULL);
	uint64_t key = (dlb_hash(dir ? dir : "", dir ? n : 0) ^ ((uint64_t)reason * 0x9e3779b97f4a7c15ull)) | 1;
	for (unsigned i = 0; i < FB_SLOTS; i++) {
		uint64_t cur = __atomic_load_n(&fbs[i].key, __ATOMIC_ACQUIRE);
		if (cur == key) { __atomic_fetch_add(&fbs[i].n, 1, __ATOMIC_RELAXED); return; }
		if (cur != 0) continue;
		if (!__atomic_compare_exchange_n(&fbs[i].key, &cur, key, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			if (cur == key) { __atomic_fetch_add(&fbs[i].n, 1, __ATOMIC_RELAXED); return; }
			continue;
		}
		__atomic_fetch_add(&fb_claimed, 1, __ATOMIC_RELEASE);
		uint32_t off = __atomic_fetch_add(&fb_used, (uint32_t)n, __ATOMIC_RELAXED);
		fbs[i].reason = (uint32_t)reason;
		if (n > FB_ARENA || off > FB_ARENA - n) n = 0; /* no room: the reason alone */
		if (n) memcpy(fb_arena + off, dir, n);
		fbs[i].off = off;
		__atomic_fetch_add(&fbs[i].n, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&fbs[i].len1, (uint32_t)n + 1, __ATOMIC_RELEASE);
		return;
	}
	__atomic_fetch_add(&fb_plain[reason], 1, __ATOMIC_RELAXED);
}

/* Whether this process counted any lookup or fallback since it started or
 * forked. A fork child that counted nothing (a child that only execs, or
 * only computes, or strace's self-test child, whose calls before _exit the
 * tracer checks one by one) writes no line: its parent reports what was
 * loaded, and the child's exit makes the same calls as natively. */
static int counted_anything(void)
{
	for (int i = 0; i < 3; i++)
		if (__atomic_load_n(&counts[i], __ATOMIC_RELAXED)) return 1;
	for (int i = 0; i < FB_NREASONS; i++)
		if (__atomic_load_n(&fb_plain[i], __ATOMIC_RELAXED)) return 1;
	return __atomic_load_n(&nslots, __ATOMIC_ACQUIRE) != 0;
}

/* nothing_to_record: with the node's records, a process that passed
 * nothing to the file system, fell back nowhere and closed nothing from
 * outside, and in which audit.so noted no library or search candidate from
 * outside (it sees every object ld.so maps, dlopen'ed ones included, and
 * notes each that the link map walk below could list), writes no line:
 * known without that walk, whose table lookups, scratch page and getpid
 * every served process paid at exit for nothing. Where audit.so handed no
 * share over, the walk decides. */
static int nothing_to_record(void)
{
	const struct dlb_audit_share *a = shim_notes();
	if (!a || __atomic_load_n(&a->notes_len, __ATOMIC_ACQUIRE) || __atomic_load_n(&a->notes_dropped, __ATOMIC_RELAXED))
		return 0;
	if (__atomic_load_n(&counts[REPORT_PASSED], __ATOMIC_RELAXED) || __atomic_load_n(&nslots, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&dropped, __ATOMIC_RELAXED) || __atomic_load_n(&fb_claimed, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&nclosed, __ATOMIC_ACQUIRE))
		return 0;
	for (int i = 0; i < FB_NREASONS; i++)
		if (__atomic_load_n(&fb_plain[i], __ATOMIC_RELAXED)) return 0;
	return 1;
}

/* One JSON line per process (reportfmt.h), written by the destructor (exit),
 * by _exit (below) or by report_fatal. Async-signal-safe: raw system calls and the
 * hand-written formatter only. A vfork child shares the parent's memory and
 * counts: it does not report (its pid differs). */
__attribute__((destructor)) void report_write(void)
{
	/* Static, not on the stack: _exit may run on a small signal stack.
	 * One writer per process (reported). The line is formatted in
	 * report_buf (the names are on the start-up state's page), and the
	 * arrays are one struct:
	 * a process's report writes two pages, not five (each page first
	 * touched costs a fault; gcc may also read the arrays' first entries
	 * before it checks their counts). */
	static struct {
		struct dlb_fallback fb[FB_SLOTS + FB_NREASONS];
		const char *os[OUTSIDE_MAX];
		size_t ol[OUTSIDE_MAX];
		const char *ps[MAX_PATHS];
		size_t ls[MAX_PATHS];
	} w DLB_COLD;
	const char **ps = w.ps, **os = w.os;
	size_t *ls = w.ls, *ol = w.ol;
	struct dlb_fallback *fb = w.fb;
	static int reported;
	if (!report_on) return;
	if (report_max && nothing_to_record()) return;
	if (report_pid == 0 && !counted_anything())
		return; /* a fork child that looked nothing up: nothing to say, and no call at its exit */
	pid_t me = (pid_t)syscall(SYS_getpid);
	if (report_pid == 0) /* a fork child, first to report: itself, or a vfork child of it that failed to exec */
		report_pid = me;
	else if (me != report_pid)
		return;
	if (__atomic_exchange_n(&reported, 1, __ATOMIC_ACQ_REL)) return;
	char *exe = report_names + exe_at;
	long en = (long)exe_len;
	if (!en) {
		en = syscall(SYS_readlinkat, AT_FDCWD, "/proc/self/exe", exe, DLB_PATH_MAX - 1);
		if (en < 0) en = 0;
		en = (long)strip_stage(exe, (size_t)en); /* the original path, not the staged copy (in place: may run in a signal handler) */
	}
	char *line = report_buf;
	size_t line_cap = sizeof report_buf;
	uint32_t n = __atomic_load_n(&nslots, __ATOMIC_ACQUIRE);
	if (n > MAX_PATHS) n = MAX_PATHS;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t l1 = __atomic_load_n(&slots[i].len1, __ATOMIC_ACQUIRE);
		ps[i] = l1 ? arena + slots[i].off : NULL;
		ls[i] = l1 ? l1 - 1 : 0;
	}
	uint64_t c[3], left = __atomic_load_n(&dropped, __ATOMIC_RELAXED);
	for (int i = 0; i < 3; i++) c[i] = __atomic_load_n(&counts[i], __ATOMIC_RELAXED);
	uint64_t from_stage = 0;
	/* the line's space is the walk's scratch until the line is formatted */
	uint32_t no = outside_list(os, ol, OUTSIDE_MAX, &left, &from_stage, line), nfb = 0;
	c[REPORT_ANSWERED] += from_stage;
	add_notes(os, ol, &no, ps, ls, &n, &left, &c[REPORT_PASSED], line);
	for (unsigned i = 0; __atomic_load_n(&fb_claimed, __ATOMIC_ACQUIRE) && i < FB_SLOTS; i++) {
		if (!__atomic_load_n(&fbs[i].key, __ATOMIC_ACQUIRE)) continue;
		uint32_t l1 = __atomic_load_n(&fbs[i].len1, __ATOMIC_ACQUIRE);
		fb[nfb++] = (struct dlb_fallback){l1 ? fb_names[fbs[i].reason] : NULL, l1 ? fb_arena + fbs[i].off : NULL,
						  l1 ? l1 - 1 : 0, __atomic_load_n(&fbs[i].n, __ATOMIC_RELAXED)};
	}
	for (unsigned r = 0; r < FB_NREASONS; r++) {
		uint64_t k = __atomic_load_n(&fb_plain[r], __ATOMIC_RELAXED);
		if (k) fb[nfb++] = (struct dlb_fallback){fb_names[r], "", 0, k};
	}
	/* The node's records (report_max set) keep what a process passed to the
	 * file system; a process the image served entirely has nothing to add,
	 * and the open, fstat, write and close of the record at its exit were
	 * most of what a served process paid over native. An explicit --report
	 * (no bound) still gets every process's line. */
	if (report_max && !n && !no && !nfb && !left && !c[REPORT_PASSED]) return;
	/* The run prefix goes in front: the line is formatted one byte short of
	 * it, and the prefix's last byte (',') then replaces the line's '{'. */
	size_t k = run_prefix_len ? run_prefix_len - 1 : 0;
	size_t len = dlb_report_line(line + k, line_cap - k, (int64_t)report_pid, exe, (size_t)en, c, fb, nfb, os, ol,
				     no, ps, ls, n, left);
	if (len && k) {
		memcpy(line, run_prefix, run_prefix_len);
		len += k;
	}
	/* O_NONBLOCK: a FIFO at the path (a shared path another user chose)
	 * must not hang the process at exit; then only a regular file of this
	 * process's own (effective) uid gets the line: another user's file would
	 * hand them what the app looked up. */
	int fd = (int)syscall(SYS_openat, AT_FDCWD, report_names, /* the report file's name */
			      O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0644);
	if (fd < 0) return;
	struct stat st;
	if (syscall(SYS_fstat, fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == (uid_t)syscall(SYS_geteuid) &&
	    (!report_max || (uint64_t)st.st_size < report_max))
		syscall(SYS_write, fd, line, len);
	syscall(SYS_close, fd);
}

/* from_outside: l_name of a loaded object names a file ld.so opened from
 * outside the image. Objects ld.so opened from the stage carry their
 * original name (la_objopen), which the table holds as bundled; any other
 * absolute name outside the stage dir is the real file system's. Called
 * once per object at exit, possibly in a signal handler (on a small
 * signal stack): the table lookup allocates nothing, and its scratch
 * (DLB_PATH_MAX bytes) is the caller's, the report line's space. */
static int from_outside(const char *name, char *scratch)
{
	struct dlb_res r;
	if (!table || !name || name[0] != '/') return 0;
	size_t sl = stage_root_len - 5;
	if (!strncmp(name, stage_root, sl) && name[sl] == '/') return 0; /* the shim's own objects */
	return shim_resolve(name, 0, 1, scratch, &r) != DLB_BUNDLED;
}

/* shim_from_outside (report.h): from_outside for the preload's dlclose,
 * on the caller's stack. */
int shim_from_outside(const char *name)
{
	char scratch[DLB_PATH_MAX];
	return from_outside(name, scratch);
}

/* _exit, _Exit: processes that end this way (dash, os._exit, children after
 * fork) skip destructors; write their report first. */
void _exit(int status)
{
	report_write();
	syscall(SYS_exit_group, status);
	__builtin_unreachable();
}
void _Exit(int status) { _exit(status); }

/* dlclose: a library from outside the image that is closed before exit is
 * still listed in the report (outside_list, above). */
int dlclose(void *handle)
{
	ensure_init();
	struct link_map *lm = NULL;
	if (handle && real_dlinfo && real_dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name)
		report_closing(lm->l_name);
	return real_dlclose ? real_dlclose(handle) : -1;
}


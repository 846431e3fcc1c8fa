/* audit.c — the LD_AUDIT half of the shim: answers ld.so's library search.
 *
 * Freestanding on purpose (built with -nostdlib, no DT_NEEDED): an audit
 * object that needs libc gets a libc of its own in a separate link namespace,
 * and ld.so searches LD_LIBRARY_PATH & co. for it in every process. Hence no
 * libc here: raw system calls, own string helpers, static buffers.
 *
 * ld.so calls these hooks with its load lock held (dl_load_lock), so the
 * static buffers below are never used by two threads at once.
 */
#define _GNU_SOURCE
#include <link.h>
#include "rawsys.h"

/* Read-your-writes (docs/loader.md): the preload keeps the directories the
 * process wrote into in the string environ's DLBUNDLE_DIRTY slot points at
 * (its live copy, updated in place); the resolver leaves paths at or below
 * them to the kernel, so dlopen of a library the process wrote finds it. */
static char **dirty_slot; /* that slot of the initial environment array, or NULL */
static int audit_dirty(const char *p, size_t n);
#define DLB_DIRTY(p, n, h) audit_dirty(p, n)
#define DLB_DIRTY_ANY() (dirty_slot && *dirty_slot && (*dirty_slot)[15])
#define DLB_DIRTY_ALL() 0 /* "/" is an entry that covers every prefix */
#include "table.h"

#define PREFIX_MAX 1024

static const void *table;         /* the mmap-ed lookup table, or NULL: do nothing */
static char root[PREFIX_MAX];     /* $DLBUNDLE_STAGE/root */
_Static_assert(DLB_STAGE_MAX + 6 <= PREFIX_MAX, "root holds DLBUNDLE_STAGE/root");
static size_t root_len;
static char staged[DLB_PATH_MAX]; /* the answer of the last la_objsearch */
static int debug;
static int native_env; /* DLBUNDLE_NATIVE_ENV is set: see restore_native_env */

/* gcc may emit calls to these for struct copies and loops even in freestanding code. */
void *memcpy(void *d, const void *s, size_t n) __attribute__((visibility("hidden")));
void *memcpy(void *d, const void *s, size_t n) { dlb_memcpy(d, s, n); return d; }
void *memset(void *d, int c, size_t n) __attribute__((visibility("hidden")));
void *memset(void *d, int c, size_t n) { char *p = d; while (n--) *p++ = (char)c; return d; }

static void say(const char *a, const char *b, const char *c)
{
	if (!debug) return;
	char line[2 * DLB_PATH_MAX + 64];
	size_t n = 0;
	const char *parts[] = {"dlbundle[audit]: ", a, " ", b, c ? " -> " : "", c ? c : "", "\n"};
	for (unsigned i = 0; i < sizeof parts / sizeof *parts; i++) {
		size_t l = dlb_strlen(parts[i]);
		if (n + l >= sizeof line) break;
		dlb_memcpy(line + n, parts[i], l);
		n += l;
	}
	dlb_sys(DLB_SYS_write, 2, line, n);
}

/* The environment as the kernel passed it, read from /proc/self/environ: the
 * audit object has no libc and so no getenv, and ld.so calls la_version
 * before anything else. One open, a few reads, one close; no fd is kept. */
static void environ_entry(const char *kv, size_t len)
{
	if (len > 15 && dlb_memeq(kv, "DLBUNDLE_STAGE=", 15)) {
		size_t l = len - 15;
		if (l <= DLB_STAGE_MAX) { /* longer: inactive (the preload says so on stderr) */
			dlb_memcpy(root, kv + 15, l);
			dlb_memcpy(root + l, "/root", 6);
			root_len = l + 5;
		}
	} else if (len == 16 && dlb_memeq(kv, "DLBUNDLE_DEBUG=1", 16)) {
		debug = 1;
	} else if (len >= 20 && dlb_memeq(kv, "DLBUNDLE_NATIVE_ENV=", 20)) {
		native_env = 1;
	}
}

static void read_environ(void)
{
	static char buf[65536];
	long fd = dlb_sys(DLB_SYS_openat, -100, "/proc/self/environ", 02000000 /* O_CLOEXEC */);
	if (fd < 0) return;
	size_t have = 0;
	int skipping = 0; /* inside an entry longer than buf: none of it is ours */
	for (;;) {
		long n = dlb_sys(DLB_SYS_read, fd, buf + have, sizeof buf - have);
		if (n <= 0) break;
		have += (size_t)n;
		size_t start = 0;
		for (size_t i = 0; i < have; i++) {
			if (buf[i] != 0) continue;
			if (!skipping) environ_entry(buf + start, i - start);
			skipping = 0;
			start = i + 1;
		}
		/* Keep the unfinished entry. One that fills the whole buffer is
		 * skipped to its end: read from its middle, a value such as
		 * "...DLBUNDLE_STAGE=/x" would look like an entry of its own. */
		if (start == 0 && have == sizeof buf) { skipping = 1; have = 0; }
		else { for (size_t i = start; i < have; i++) buf[i - start] = buf[i]; have -= start; }
	}
	dlb_sys(DLB_SYS_close, fd, 0, 0);
}

/* ---- LD_LIBRARY_PATH: the app sees its own value from the start ----
 *
 * loader.ShimEnv maps LD_LIBRARY_PATH entries to the stage (so that ld.so's
 * own directory probes stay node-local) and passes the app's entry verbatim in
 * DLBUNDLE_NATIVE_ENV, the mapped one in DLBUNDLE_MAPPED_ENV. ld.so has kept a
 * pointer to the mapped value's string when it parsed its variables (before
 * loading audit modules), so the environ slot can be pointed at the app's
 * entry now, before any library constructor can read it. The initial stack is
 * found through /proc/self/stat (startstack is &argc) and checked against the
 * kernel's argv/env string areas; on any mismatch (e.g. ld.so run as a
 * command, which moves argv) nothing is changed and the preload does the swap
 * in its constructor instead. */
static unsigned long parse_ul(const char *s)
{
	unsigned long v = 0;
	while (*s >= '0' && *s <= '9') v = v * 10 + (unsigned long)(*s++ - '0');
	return v;
}

/* initial_env returns the environment array on the initial stack (the one
 * environ points at until the app calls setenv), checked against the
 * kernel's argv/env string areas, or NULL. */
static char **initial_env(void)
{
	char b[4096];
	long fd = dlb_sys(DLB_SYS_openat, -100, "/proc/self/stat", 02000000);
	if (fd < 0) return 0;
	long n = dlb_sys(DLB_SYS_read, fd, b, sizeof b - 1);
	dlb_sys(DLB_SYS_close, fd, 0, 0);
	if (n <= 0) return 0;
	b[n] = 0;
	char *p = 0; /* after the last ')': comm may hold anything */
	for (long i = 0; i < n; i++) if (b[i] == ')') p = b + i + 1;
	if (!p) return 0;
	unsigned long startstack = 0, arg_start = 0, env_start = 0, env_end = 0;
	for (int field = 3; *p; field++) {
		while (*p == ' ') p++;
		if (field == 28) startstack = parse_ul(p);
		if (field == 48) arg_start = parse_ul(p);
		if (field == 50) env_start = parse_ul(p);
		if (field == 51) env_end = parse_ul(p);
		while (*p && *p != ' ') p++;
	}
	if (!startstack || !env_start || env_end <= env_start) return 0;
	long argc = *(long *)startstack;
	char **argv = (char **)(startstack + sizeof(long));
	if (argc < 0 || argc > (1L << 24) || (argc > 0 && (unsigned long)argv[0] != arg_start) || argv[argc])
		return 0;
	for (char **e = argv + argc + 1; *e; e++) {
		unsigned long a = (unsigned long)*e;
		if (a < env_start || a >= env_end) return 0; /* not the kernel's layout */
	}
	return argv + argc + 1;
}

static void restore_native_env(char **env)
{
	char **llp = 0, *native = 0, *mapped = 0;
	for (char **e = env; e && *e; e++) {
		if (!llp && dlb_memeq(*e, "LD_LIBRARY_PATH=", 16)) llp = e;
		else if (!native && dlb_memeq(*e, "DLBUNDLE_NATIVE_ENV=LD_LIBRARY_PATH=", 36)) native = *e + 20;
		else if (!mapped && dlb_memeq(*e, "DLBUNDLE_MAPPED_ENV=LD_LIBRARY_PATH=", 36)) mapped = *e + 20;
	}
	if (!llp || !native || !mapped) return;
	size_t l = dlb_strlen(mapped);
	if (dlb_strlen(*llp) == l && dlb_memeq(*llp, mapped, l)) {
		*llp = native;
		say("environ", "LD_LIBRARY_PATH", native + 16);
	}
}

static void map_table(void)
{
	char path[PREFIX_MAX + 16];
	size_t l = root_len - 5; /* the stage dir */
	dlb_memcpy(path, root, l);
	dlb_memcpy(path + l, "/table", 7);
	long fd = dlb_sys(DLB_SYS_openat, -100, path, 02000000);
	if (fd < 0) { say("no table", path, 0); return; }
	struct { uint64_t dev, ino, nlink; uint32_t mode, uid, gid, pad; uint64_t rdev; int64_t size; char rest[88]; } st;
	/* x86_64 and aarch64 struct stat differ, but only st_size matters; read it portably below */
	long rc = dlb_sys(DLB_SYS_fstat, fd, &st, 0);
#if defined(__aarch64__)
	int64_t size = *(int64_t *)((char *)&st + 48);
#else
	int64_t size = st.size;
#endif
	if (rc == 0 && size > 0) {
		long m = dlb_syscall6(DLB_SYS_mmap, 0, size, 1 /* PROT_READ */, 2 /* MAP_PRIVATE */, fd, 0);
		if (m < 0 && m > -4096) m = 0;
		if (m && dlb_check((void *)m, (size_t)size)) table = (const void *)m;
		else if (m) { dlb_sys(DLB_SYS_munmap, m, size, 0); say("bad table", path, 0); }
	}
	dlb_sys(DLB_SYS_close, fd, 0, 0); /* hold no fd: apps may close_range() everything */
}

/* glibc >= 2.35 refuses an audit module whose la_version returns a version it
 * does not support. We use only la_objsearch and la_objopen, unchanged in
 * interface versions 1 (glibc 2.17..2.34) and 2 (2.35 on): return the version
 * asked for, or 2 if a later glibc asks for more (it accepts older ones). */
unsigned int la_version(unsigned int version)
{
	read_environ();
	if (root_len) map_table();
	char **env = table ? initial_env() : 0;
	if (native_env) restore_native_env(env);
	for (char **e = env; e && *e; e++)
		if (dlb_memeq(*e, "DLBUNDLE_DIRTY=", 15)) dirty_slot = e;
	return version <= 2 ? version : 2;
}

/* la_objsearch sees each candidate path of ld.so's search in order (RPATH,
 * LD_LIBRARY_PATH, RUNPATH, ld.so.cache, default dirs, hwcaps subdirs, with
 * $ORIGIN already expanded), so answering per candidate keeps ld.so's search
 * semantics exactly: bundled -> the staged copy, known missing -> "" (ld.so
 * skips the candidate; see below), unknown -> unchanged. */
char *la_objsearch(const char *name, uintptr_t *cookie, unsigned int flag)
{
	(void)cookie; (void)flag;
	if (!table || name[0] != '/')
		return (char *)name;
	const char *orig = name;
	/* The stage itself (the shim's own objects) is never looked up: it may
	 * lie below a directory whose listing was taken before it existed. */
	if (dlb_hasprefix(name, root, root_len - 5) && !dlb_hasprefix(name, root, root_len))
		return (char *)name;
	/* $ORIGIN of an executable that runs from the stage is inside the stage
	 * (ld.so reads /proc/self/exe with a raw syscall): look up the original. */
	if (dlb_hasprefix(name, root, root_len) && name[root_len] == '/')
		orig = name + root_len;
	char canon[DLB_PATH_MAX];
	struct dlb_res r;
	switch (dlb_resolve(table, orig, 1, canon, &r)) {
	case DLB_BUNDLED:
		if (r.ent->type != DLB_REG) break;
		size_t n = dlb_strlen(orig);
		if (root_len + n >= sizeof staged) break;
		/* root + the path as asked (not canonical): la_objopen turns l_name
		 * back into exactly the name ld.so would have used natively. */
		dlb_memcpy(staged, root, root_len);
		dlb_memcpy(staged + root_len, orig, n + 1);
		say("found", orig, staged);
		return staged;
	case DLB_KNOWN_ERR:
		/* Not NULL: after a candidate that "did not open", ld.so reads its
		 * private errno, which an audit module cannot set, and gives up the
		 * whole search path unless it is ENOENT. An empty name makes its
		 * open fail at once with ENOENT, before any path walk: no file
		 * system is asked. */
		say("missing", orig, 0);
		return (char *)"";
	}
	say("unknown", orig, 0);
	return (char *)orig;
}

/* la_objopen: show the original path in l_name (dladdr, dl_iterate_phdr,
 * link_map walks, $ORIGIN of this object's own dependencies). The staged name
 * is root + original, so the original fits in place: no allocation, and
 * ld.so's free(l_name) at dlclose still frees its own buffer. */
unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie)
{
	(void)lmid; (void)cookie;
	char *n = map->l_name;
	if (table && n && dlb_hasprefix(n, root, root_len) && n[root_len] == '/') {
		size_t i = 0;
		for (; n[root_len + i]; i++) n[i] = n[root_len + i];
		n[i] = 0;
	}
	return 0; /* no symbol binding callbacks: they would slow every call */
}

/* audit_dirty: p[0:n] is one of the directories in DLBUNDLE_DIRTY (as the
 * preload keeps it: newline-separated), or that set holds "/" (everything). */
static int audit_dirty(const char *p, size_t n)
{
	const char *s = dirty_slot ? *dirty_slot : 0;
	if (!s || !dlb_memeq(s, "DLBUNDLE_DIRTY=", 15)) return 0;
	for (s += 15; *s;) {
		const char *e = s;
		while (*e && *e != '\n') e++;
		size_t l = (size_t)(e - s);
		if ((l == 1 && s[0] == '/') || (l == n && dlb_memeq(s, p, n))) return 1;
		s = *e ? e + 1 : e;
	}
	return 0;
}

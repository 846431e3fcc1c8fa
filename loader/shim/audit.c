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
#include "table.h"
#include "ldcache.h"
static int audit_dirty(const char *p, size_t n, uint64_t h);
static int audit_dirty_any(void) { return dirty_slot && *dirty_slot && (*dirty_slot)[15]; }
/* The walk's questions (table.h): only the written directories; "/" is an
 * entry that covers every prefix (no dirty_all), and every directory is
 * searchable here (ld.so's candidates lie in directories the app could
 * search). */
static const struct dlb_asks asks = {.dirty = audit_dirty, .dirty_any = audit_dirty_any};

#define PREFIX_MAX 1024

/* COLD: a large buffer most processes never touch, or touch only the start
 * of. The build sorts .bss by alignment, largest first (build.sh), so
 * these page-aligned ones come ahead of the state every process touches,
 * which then lies together on a few pages after them (each page first
 * touched costs a process a fault). */
#define COLD __attribute__((aligned(4096)))

static const void *table;         /* the mmap-ed lookup table, or NULL: do nothing */
static char root[PREFIX_MAX];     /* $DLBUNDLE_STAGE/root */
_Static_assert(DLB_STAGE_MAX + 6 <= PREFIX_MAX, "root holds DLBUNDLE_STAGE/root");
static size_t root_len;
/* the answer of the last la_objsearch; the resolver's scratch before it.
 * aligned(1): placed after the small state every process writes (the build
 * sorts .bss by alignment, largest first), so that the few bytes a process
 * uses of it lie on the same page as that state: one page first touched
 * (one fault), not two. */
static char staged[DLB_PATH_MAX] __attribute__((aligned(1)));
static int debug;
static int native_env; /* DLBUNDLE_NATIVE_ENV is set: see restore_native_env */
static void keep_llp(const char *v, size_t n); /* the whole search, below */
/* DLBUNDLE_EXE: the program exec started under the image's own ld.so
 * (docs/exec.md, "Images and nodes"); /proc/self/exe names ld.so there. */
static char exe_env[DLB_PATH_MAX] COLD;
/* DLBUNDLE_LDSO: the stage's image glibc is not the node's (STAGE/ldso,
 * docs/exec.md "Images and nodes"). foreign: and this process runs under
 * the node's ld.so (a node program, started by the kernel's PT_INTERP), so
 * the image's glibc objects must not be served to it: see glibc_object. */
static int cross, foreign;
/* AT_BASE, AT_EXECFN; aux_read: the vector was read (a flag of its own, not
 * "aux_base = 1: not read": the only initialised variable put a .data page
 * of its own in the object, and its first write cost every process a fault) */
static unsigned long aux_base, aux_execfn;
static int aux_read;

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

/* The environment as the kernel passed it, read from /proc/self/environ
 * where the initial stack cannot be read (initial_env below): the audit
 * object has no libc and so no getenv. One open, a few reads, one close; no
 * fd is kept. */
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
	} else if (len > 13 && len - 13 < sizeof exe_env && dlb_memeq(kv, "DLBUNDLE_EXE=", 13)) {
		dlb_memcpy(exe_env, kv + 13, len - 13);
		exe_env[len - 13] = 0;
	} else if (len > 14 && dlb_memeq(kv, "DLBUNDLE_LDSO=", 14)) {
		cross = 1;
	} else if (len >= 20 && dlb_memeq(kv, "DLBUNDLE_NATIVE_ENV=", 20)) {
		native_env = 1;
	} else if (len >= 16 && dlb_memeq(kv, "LD_LIBRARY_PATH=", 16)) {
		keep_llp(kv + 16, len - 16);
	}
}

static void read_environ(void)
{
	static char buf[65536] COLD;
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
 * entry now, before any library constructor can read it. The environment
 * array is found on the initial stack (initial_env below); where it is not
 * (e.g. ld.so run as a command, which moves argv) nothing is changed and the
 * preload does the swap in its constructor instead. */

/* ---- The initial stack: the environment without /proc ----
 *
 * The kernel lays out the initial stack as argc, argv[], NULL, envp[], NULL,
 * then the auxiliary vector, and puts the block right below the 16 AT_RANDOM
 * bytes, its start rounded down to 16 bytes: the vector ends less than 16
 * bytes below AT_RANDOM's address (fs/binfmt_elf.c, create_elf_tables, the
 * same since Linux 2.6.29). The kernel's own copy of the vector (prctl
 * PR_GET_AUXV from Linux 6.4, else /proc/self/auxv) names that address; where
 * the very same vector lies in memory just below it, envp[] and argv[] are
 * read back from it. One prctl, where reading /proc/self/environ and
 * /proc/self/stat (as this module did before) cost ~70 us per process on the
 * VM measured. Nothing has changed the arrays yet: ld.so calls la_version
 * before any other code of the process runs. */
#define AUXV_WORDS 128 /* the kernel's copy holds fewer (AT_VECTOR_SIZE) */
#define AT_NULL_ 0
#define AT_BASE_ 7
#define AT_RANDOM_ 25
#define AT_EXECFN_ 31

static long read_auxv(unsigned long *v, size_t cap_)
{
	long n = dlb_syscall6(DLB_SYS_prctl, 0x41555856 /* PR_GET_AUXV */, (long)v, (long)cap_, 0, 0, 0);
	if (n > 0) return n < (long)cap_ ? n : (long)cap_; /* n is the kernel's whole array */
	long fd = dlb_sys(DLB_SYS_openat, -100, "/proc/self/auxv", 02000000 /* O_CLOEXEC */);
	if (fd < 0) return -1;
	n = 0;
	for (long r; (size_t)n < cap_ && (r = dlb_sys(DLB_SYS_read, fd, (char *)v + n, cap_ - (size_t)n)) > 0;) n += r;
	dlb_sys(DLB_SYS_close, fd, 0, 0);
	return n;
}

/* on_stack: p points into the strings the kernel copied above AT_RANDOM's
 * bytes, below the executable's name (the highest of them). */
static int on_stack(const char *p, unsigned long rnd, unsigned long execfn)
{
	return (unsigned long)p > rnd + 15 && (!execfn || (unsigned long)p < execfn);
}

/* initial_env returns the environment array on the initial stack (the one
 * environ points at until the app calls setenv), or NULL. */
static char **initial_env(void)
{
	unsigned long v[AUXV_WORDS];
	long n = read_auxv(v, sizeof v);
	size_t words = 0;
	unsigned long rnd = 0, execfn = 0;
	for (size_t i = 0; n > 0 && i + 1 < (size_t)n / sizeof *v; i += 2) {
		if (v[i] == AT_RANDOM_) rnd = v[i + 1];
		else if (v[i] == AT_EXECFN_) execfn = aux_execfn = v[i + 1];
		else if (v[i] == AT_BASE_) aux_base = v[i + 1], aux_read = 1;
		else if (v[i] == AT_NULL_) { words = i + 2; break; }
	}
	if (!words || rnd < 4096) return 0;
	for (unsigned long end = rnd & ~7UL; end + 16 > rnd; end -= 8) {
		const unsigned long *a = (const unsigned long *)end - words;
		if (!dlb_memeq((const char *)a, (const char *)v, words * sizeof *v)) continue;
		char **envp = (char **)a - 1; /* envp's NULL */
		if (*envp) return 0;
		while (envp[-1]) /* back over envp[] to argv's NULL */
			if (!on_stack(*--envp, rnd, execfn)) return 0;
		char **argv = envp - 1;
		unsigned long argc = 0;
		for (; (unsigned long)argv[-1] != argc; argc++) /* back over argv[] to argc */
			if (argc > (1UL << 24) || !on_stack(*--argv, rnd, execfn)) return 0;
		return envp;
	}
	return 0;
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

/* map_file maps path read-only (private) and closes it again: no fd is
 * held, apps may close_range() everything. It returns the mapping and its
 * size (and, if dev is not NULL, the file's st_dev), or 0 with *err the
 * open's -errno (0 when the file opened but is empty or cannot be mapped). */
static const char *map_file(const char *path, size_t *size, uint64_t *dev, long *err)
{
	*size = 0;
	long fd = dlb_sys(DLB_SYS_openat, -100, path, 02000000 /* O_CLOEXEC */);
	*err = fd < 0 ? fd : 0;
	if (fd < 0) return 0;
	struct { uint64_t dev, ino, nlink; uint32_t mode, uid, gid, pad; uint64_t rdev; int64_t size; char rest[88]; } st;
	/* x86_64 and aarch64 struct stat differ, but both begin with st_dev; st_size is read portably below */
	long rc = dlb_sys(DLB_SYS_fstat, fd, &st, 0);
#if defined(__aarch64__)
	int64_t n = *(int64_t *)((char *)&st + 48);
#else
	int64_t n = st.size;
#endif
	long m = 0;
	/* Not populated: a process reads a few pages of either file, and a
	 * page fault maps its neighbours too (the kernel's fault-around). */
	if (rc == 0 && n > 0) m = dlb_syscall6(DLB_SYS_mmap, 0, n, 1 /* PROT_READ */, 2 /* MAP_PRIVATE */, fd, 0);
	dlb_sys(DLB_SYS_close, fd, 0, 0);
	if (m < 0 && m > -4096) return 0; /* -errno */
	if (m) *size = (size_t)n;
	if (dev) *dev = rc == 0 ? st.dev : 0;
	return (const char *)m;
}

/* The table for the preload (table.h): set once, here, before any code of
 * the process runs; handed over by hand_share. */
static struct dlb_audit_share dlb_audit_share;
static void read_rules(const char *m, size_t size);

static void map_table(void)
{
	char path[PREFIX_MAX + 16];
	size_t l = root_len - 5; /* the stage dir */
	dlb_memcpy(path, root, l);
	dlb_memcpy(path + l, "/table", 7);
	size_t size;
	uint64_t dev = 0;
	long err;
	const char *m = map_file(path, &size, &dev, &err);
	if (err) { say("no table", path, 0); return; }
	if (m && dlb_check(m, size)) {
		table = m;
		dlb_audit_share = (struct dlb_audit_share){.table = m, .size = size, .dev = dev, .root = root};
		read_rules(m, size);
	} else if (m) {
		dlb_sys(DLB_SYS_munmap, (long)m, (long)size, 0);
		say("bad table", path, 0);
	}
}

/* ---- ld.so's whole search, answered at LA_SER_ORIG ----
 *
 * Answering per candidate (la_objsearch below) gives ld.so the right file,
 * but after every candidate answered "missing" ld.so itself stats the
 * candidate's directory and each probed subdirectory (glibc-hwcaps/..., tls/,
 * x86_64/) on the name it built from the search path: ~10 calls per search
 * directory per process that no hook sees, on the shared file system for
 * absolute RUNPATHs (Spack). So at LA_SER_ORIG, before any search, the shim
 * walks ld.so's search itself over the table (glibc elf/dl-load.c,
 * _dl_map_object and open_path, 2.33 to 2.36): DT_RPATH of the loader and its
 * loaders (only when the loader has no DT_RUNPATH), the executable's DT_RPATH,
 * LD_LIBRARY_PATH, the loader's DT_RUNPATH, /etc/ld.so.cache, the default
 * directories; in each directory every subdirectory of STAGE/search (the
 * node's ld.so printed them, loader/ldsearch.go) then the directory itself.
 * When the table decides every candidate up to the first that exists, the
 * answer is that candidate's staged copy: a name with '/' is opened as a path,
 * with no search at all. Anything the table cannot decide (a directory outside
 * the image, $LIB, a relative entry, a cache entry for a hwcaps subdirectory)
 * leaves the name unchanged and ld.so searches per candidate as before. */

enum { S_MISS, S_FOUND, S_UNDECIDED };

#define CAPS_MAX 32
#define SYSDIRS_MAX 16
/* The rules point into the table's mapping (read-only, never NUL-terminated
 * here): every use goes by the lengths. */
static const char *cap[CAPS_MAX], *sysdir[SYSDIRS_MAX];
static size_t cap_len[CAPS_MAX], sysdir_len[SYSDIRS_MAX];
static unsigned ncap, nsysdir;
/* The node's ld.so.cache answers for the image's libraries, written by
 * staging after the rules (loader/stagefmt/ldcache.go): "so NAME =PATH",
 * "so NAME -" (none), "so NAME ?" (not ours to predict) lines, valid while
 * /etc/ld.so.cache is the file described by pre_id ("DEV INO SIZE
 * MTIME_SEC MTIME_NSEC"). A process whose searches they all answer reads
 * no cache: one stat in place of open, fstat, mmap, close, munmap and the
 * cache's page fault. */
static const char *pre_id, *pre_at, *pre_end;
static size_t pre_id_len;
static int pre_state; /* 0 not checked yet, 1 the answers hold, -1 they do not */
static char llp[16384] COLD; /* LD_LIBRARY_PATH as ld.so parsed it (the kernel's copy) */
static int llp_state;   /* 0 unset or empty, 1 in llp, -1 too long to keep */
static int started;     /* la_preinit ran: later loads are dlopen's */

static void keep_llp(const char *v, size_t n)
{
	if (n == 0) { llp_state = 0; return; }
	if (n >= sizeof llp) { llp_state = -1; return; }
	dlb_memcpy(llp, v, n);
	llp[n] = 0;
	llp_state = 1;
}

/* read_rules parses the node's search rules (format: loader/ldsearch.go),
 * which staging wrote into the room the table keeps for them right after
 * its header (stagefmt.WriteSearch: the header's search and search_len), so
 * the mapping already made holds them, on the pages the header's own fault
 * maps: no file of their own to open and read in every process. A table
 * without them (the probe of the node's ld.so failed) leaves ncap 0: ld.so
 * searches itself. */
static void read_rules(const char *m, size_t size)
{
	const struct dlb_header *h = (const void *)m;
	if (!h->search_len || h->search > size || h->search_len >= size - h->search) return;
	const char *p = m + h->search, *end = p + h->search_len;
	if (!dlb_memeq(p, "dlbundle-search 1\n", 18)) return;
	unsigned nc = 0, nd = 0;
	const char *id = 0, *so_end = 0;
	size_t id_len = 0;
	for (p += 18; p < end;) {
		if ((size_t)(end - p) >= 5 && dlb_memeq(p, "libc ", 5)) {
			/* the rest is the real functions' places, which the preload
			 * reads (loader/stagefmt/reals.go); it gets them through
			 * dlb_audit_share */
			dlb_audit_share.reals = p;
			dlb_audit_share.reals_len = (uint64_t)(end - p);
			break;
		}
		const char *e = p;
		while (e < end && *e != '\n') e++;
		if (e == end) return; /* unterminated: not ours */
		size_t n = (size_t)(e - p);
		if (n >= 4 && dlb_memeq(p, "cap ", 4) && nc < CAPS_MAX && !id) { cap[nc] = p + 4; cap_len[nc++] = n - 4; }
		else if (n >= 5 && dlb_memeq(p, "dir /", 5) && nd < SYSDIRS_MAX && !id) { sysdir[nd] = p + 4; sysdir_len[nd++] = n - 4; }
		else if (n >= 6 && dlb_memeq(p, "cache ", 6) && !id) { id = p + 6; id_len = n - 6; so_end = e + 1; }
		else if (n >= 3 && dlb_memeq(p, "so ", 3) && id) so_end = e + 1;
		else return;
		p = e + 1;
	}
	if (nc == 0 || cap_len[nc - 1] != 0 || nd == 0) return;
	ncap = nc;
	nsysdir = nd;
	if (id) {
		pre_id = id;
		pre_id_len = id_len;
		pre_at = id + id_len + 1;
		pre_end = so_end;
	}
}

/* Who loaded whom: glibc's l_loader is not in the public link_map, and the
 * DT_RPATH search walks that chain. la_objsearch(LA_SER_ORIG) names the
 * loader and the next la_objopen is the object it loads (ld.so maps one
 * object at a time, under its load lock). */
#define MAPS_MAX 8192
#define MAPS_NEAR 32 /* the first ones, with the state every process touches: a small process touches no other page */
struct map_loader { const struct link_map *map, *loader; };
static struct map_loader maps_near[MAPS_NEAR];
static struct map_loader maps_far[MAPS_MAX - MAPS_NEAR] COLD;
static unsigned nmaps;
static struct map_loader *map_at(unsigned i) { return i < MAPS_NEAR ? &maps_near[i] : &maps_far[i - MAPS_NEAR]; }
static const struct link_map *pending;

static int is_main(const struct link_map *l) { return l->l_prev == 0 && l->l_name && l->l_name[0] == 0; }

static const struct link_map *loader_of(const struct link_map *l, int *known)
{
	*known = 1;
	if (is_main(l)) return 0;
	for (unsigned i = nmaps; i-- > 0;)
		if (map_at(i)->map == l) return map_at(i)->loader;
	*known = 0;
	return 0;
}

static const struct link_map *main_of(const struct link_map *l)
{
	while (l->l_prev) l = l->l_prev;
	return is_main(l) ? l : 0;
}

struct dyninfo { const char *rpath, *runpath; int nodeflib; };

/* The dynamic section as ld.so left it: on most targets ld.so relocated the
 * d_ptr entries in place (elf_get_dynamic_info), on some (read-only dynamic
 * sections) not; a pointer below the load address is unrelocated. */
static uintptr_t dyn_ptr(const struct link_map *l, uintptr_t p) { return l->l_addr && p < l->l_addr ? p + l->l_addr : p; }

static void dyn_of(const struct link_map *l, struct dyninfo *d)
{
	d->rpath = d->runpath = 0;
	d->nodeflib = 0;
	if (!l->l_ld) return;
	uintptr_t strtab = 0;
	long rp = -1, rn = -1;
	for (const ElfW(Dyn) *x = l->l_ld; x->d_tag != DT_NULL; x++) {
		if (x->d_tag == DT_STRTAB) strtab = x->d_un.d_ptr;
		else if (x->d_tag == DT_RPATH) rp = (long)x->d_un.d_val;
		else if (x->d_tag == DT_RUNPATH) rn = (long)x->d_un.d_val;
		else if (x->d_tag == DT_FLAGS_1 && (x->d_un.d_val & DF_1_NODEFLIB)) d->nodeflib = 1;
	}
	if (!strtab) return;
	strtab = dyn_ptr(l, strtab);
	/* both given: ld.so ignores DT_RPATH */
	if (rn >= 0) d->runpath = (const char *)strtab + rn;
	else if (rp >= 0) d->rpath = (const char *)strtab + rp;
}

/* origin_of: $ORIGIN of l as ld.so computes it: the directory of the name it
 * opened (la_objopen gave l_name back its original), for the executable the
 * directory of /proc/self/exe (ld.so reads that link too). */
static long origin_of(const struct link_map *l, char *out, size_t cap_)
{
	static char exe[DLB_PATH_MAX] COLD;
	static long exe_len;
	static int exe_read; /* (not "exe_len = -2": initialised data would cost a page fault per process) */
	const char *n;
	size_t len;
	if (l->l_name && l->l_name[0] == 0) {
		if (!exe_read) {
			exe_read = 1;
			exe_len = dlb_syscall6(DLB_SYS_readlinkat, -100, (long)"/proc/self/exe", (long)exe, sizeof exe - 1, 0, 0);
			if (exe_len <= 0 || exe_len >= (long)sizeof exe - 1) exe_len = -1;
			else {
				exe[exe_len] = 0;
				if (dlb_hasprefix(exe, root, root_len) && exe[root_len] == '/') {
					size_t i = 0;
					for (; exe[root_len + i]; i++) exe[i] = exe[root_len + i];
					exe[i] = 0;
					exe_len = (long)i;
					/* the image's ld.so started by exec: $ORIGIN is the program's */
					size_t b = (size_t)exe_len;
					while (b > 0 && exe[b - 1] != '/') b--;
					if (exe_env[0] == '/' && dlb_memeq(exe + b, "ld-", 3)) {
						exe_len = (long)dlb_strlen(exe_env);
						dlb_memcpy(exe, exe_env, (size_t)exe_len + 1);
					}
				}
			}
		}
		if (exe_len < 0) return -1;
		n = exe;
		len = (size_t)exe_len;
	} else {
		n = l->l_name;
		if (!n || n[0] != '/') return -1;
		len = dlb_strlen(n);
	}
	while (len > 0 && n[len - 1] != '/') len--;
	if (len > 1) len--; /* drop the '/', but keep "/" */
	if (len == 0 || len >= cap_) return -1;
	dlb_memcpy(out, n, len);
	return (long)len;
}

/* expand copies one search path element, replacing $ORIGIN / ${ORIGIN} (the
 * only dynamic string token decided here); -1: undecidable. */
static long expand(const char *e, size_t n, const struct link_map *l, char *out, size_t cap_)
{
	size_t o = 0;
	for (size_t i = 0; i < n;) {
		if (e[i] != '$') {
			if (o + 1 >= cap_) return -1;
			out[o++] = e[i++];
			continue;
		}
		size_t skip;
		if (n - i >= 7 && dlb_memeq(e + i + 1, "ORIGIN", 6) && (i + 7 == n || e[i + 7] == '/')) skip = 7;
		else if (n - i >= 9 && dlb_memeq(e + i + 1, "{ORIGIN}", 8)) skip = 9;
		else return -1; /* $LIB, $PLATFORM, or text ld.so keeps literally */
		long ol = origin_of(l, out + o, cap_ - o);
		if (ol < 0) return -1;
		o += (size_t)ol;
		i += skip;
	}
	return (long)o;
}

/* The staged object checked like ld.so's open_verify skips candidates: an
 * ELF file of another class or machine is passed over, not loaded. One open
 * and read in the node-local stage. */
static int elf_ours(const char *staged_path)
{
	unsigned char h[20];
	long fd = dlb_sys(DLB_SYS_openat, -100, staged_path, 02000000);
	if (fd < 0) return 0;
	long n = dlb_sys(DLB_SYS_read, fd, h, sizeof h);
	dlb_sys(DLB_SYS_close, fd, 0, 0);
	if (n != (long)sizeof h || h[0] != 0x7f || h[1] != 'E' || h[2] != 'L' || h[3] != 'F') return 0;
	unsigned machine = h[18] | (unsigned)h[19] << 8;
#if defined(__x86_64__)
	return h[4] == ELFCLASS64 && h[5] == ELFDATA2LSB && machine == EM_X86_64;
#elif defined(__aarch64__)
	return h[4] == ELFCLASS64 && h[5] == ELFDATA2LSB && machine == EM_AARCH64;
#else
	return 0;
#endif
}

/* found: the answer is STAGE/root + orig, when the staged file is ours. */
static int found(const char *orig, size_t n, const struct dlb_entry *ent)
{
	if (root_len + n >= sizeof staged) return S_UNDECIDED;
	if ((ent->mode & 0444) != 0444) return S_UNDECIDED; /* native open may be refused: let ld.so try */
	dlb_memcpy(staged, root, root_len);
	dlb_memcpy(staged + root_len, orig, n + 1);
	/* Staging read the same 20 bytes of the same (read-only) staged file
	 * (loader.markNodeELF); other entries, and stages made before the flag,
	 * are checked here. */
	if (ent->flags & DLB_FLAG_ELF_NODE) return S_FOUND;
	return elf_ours(staged) ? S_FOUND : S_UNDECIDED;
}

/* dead_caps: the subdirectories of the node's rules (cap[i], e.g.
 * "glibc-hwcaps/x86-64-v3/") that cannot hold any candidate below the
 * bundled directory dir (canonical path p[0:n], n > 0 for all but "/", hash
 * h): a component absent from the table below a bundled directory (its
 * listing is complete), a missing entry (the pilot saw ld.so's stat fail), or
 * a regular file on the way (ENOTDIR; for these subdirectories ld.so goes on
 * after any error, see try_dir). Bit i set: skip cap[i] for every name. A
 * subdirectory that is bundled all the way, or reached through a symlink or
 * an external entry, stays live and is resolved per name. The answer depends
 * on the table alone (read-only), so it is kept per directory in a small
 * direct-mapped cache: a Spack-style RUNPATH of 100 directories is walked
 * once per library, and without the cache every walk repeats ncap lookups
 * per directory. */
#define DEAD_SLOTS 256
static struct { const struct dlb_entry *dir; uint32_t dead; } dead_cache[DEAD_SLOTS] COLD;

static __attribute__((noinline)) uint32_t dead_caps(const struct dlb_entry *dir, const char *p, size_t n, uint64_t h)
{
	unsigned slot = (unsigned)((uintptr_t)dir / sizeof *dir) & (DEAD_SLOTS - 1);
	if (dead_cache[slot].dir == dir) return dead_cache[slot].dead;
	char b[DLB_PATH_MAX];
	uint32_t dead = 0;
	for (unsigned i = 0; i < ncap; i++) {
		if (cap_len[i] == 0 || n + 1 + cap_len[i] >= sizeof b) continue;
		dlb_memcpy(b, p, n);
		size_t bn = n;
		uint64_t bh = h;
		int live = 1; /* every component so far a bundled directory */
		for (size_t c = 0; c < cap_len[i] && live == 1;) {
			size_t e = c;
			while (e < cap_len[i] && cap[i][e] != '/') e++;
			if (e == c) { c++; continue; } /* "//" in a rule: ld.so's path has it too; the kernel skips it */
			b[bn] = '/';
			dlb_memcpy(b + bn + 1, cap[i] + c, e - c);
			bh = dlb_hash_more(bh, b + bn, 1 + e - c);
			bn += 1 + e - c;
			const struct dlb_entry *x = dlb_lookup_h(table, b, bn, bh);
			if (!x || x->type == DLB_MISSING || x->type == DLB_REG) live = 0;
			else if (x->type != DLB_DIR) live = 2; /* symlink, external: resolve per name */
			c = e;
		}
		if (!live) dead |= 1u << i;
	}
	dead_cache[slot].dir = dir;
	dead_cache[slot].dead = dead;
	return dead;
}

/* resolve_scratch: dlb_resolve of a path that is not in staged, for its
 * answer only: the canonical path goes to staged, which the answer (found)
 * overwrites next. Not a buffer on the stack: a frame's far end is touched
 * (register spills) even where its buffers are not, and each new stack page
 * costs a process a fault. */
static int resolve_scratch(const char *path, struct dlb_res *r)
{
	return dlb_resolve(table, &asks, path, 1, staged, r);
}

/* try_dir: the candidates of one search directory d[0:dn] (as ld.so keeps
 * it: trailing slashes dropped), in ld.so's order. */
static int try_dir(const char *d, size_t dn, const char *name, size_t nn)
{
	char orig[DLB_PATH_MAX], cand[DLB_PATH_MAX];
	if (dn == 0 || d[0] != '/') return S_UNDECIDED; /* relative to the cwd */
	/* A driver's library is the node's, under names the image may never have
	 * seen (table.h, dlb_node_bound): ld.so searches for it itself. */
	if (dlb_node_bound(name, nn)) return S_UNDECIDED;
	while (dn > 1 && d[dn - 1] == '/') dn--;
	/* a mapped LD_LIBRARY_PATH entry or $ORIGIN inside the stage: the original */
	if (dn > root_len && dlb_hasprefix(d, root, root_len) && d[root_len] == '/') { d += root_len; dn -= root_len; }
	if (dn + 1 + nn >= sizeof orig) return S_UNDECIDED;
	dlb_memcpy(orig, d, dn);
	orig[dn] = 0;
	struct dlb_res r;
	/* cand[0:r.len] receives the directory's canonical path */
	switch (dlb_resolve(table, &asks, orig, 1, cand, &r)) {
	case DLB_KNOWN_ERR:
		return S_MISS; /* every candidate fails, ld.so's stat marks it nonexisting */
	case DLB_BUNDLED:
		if (r.ent->type != DLB_DIR) return S_MISS; /* ENOTDIR likewise */
		break;
	default:
		return S_UNDECIDED;
	}
	size_t on = dn == 1 ? 0 : dn; /* "/" + name, not "//" + name */
	orig[on++] = '/';
	size_t cn = r.len == 1 ? 0 : r.len;
	/* The resolver found r.ent by looking up exactly cand[0:r.len] with its
	 * hash, so the entry's hash is that path's ("/": continue from ""). */
	uint64_t ch = cn ? r.ent->hash : DLB_HASH_INIT;
	/* Written directories: no shortcut, every candidate goes to the resolver. */
	int fast = !audit_dirty_any();
	uint32_t dead = fast ? dead_caps(r.ent, cand, cn, ch) : 0;
	cand[cn++] = '/';
	uint64_t sh = dlb_hash_more(ch, "/", 1);
	for (unsigned i = 0; i < ncap; i++) {
		if (dead >> i & 1) continue;
		size_t l = cn + cap_len[i] + nn;
		if (l >= sizeof cand || on + cap_len[i] + nn >= sizeof orig) return S_UNDECIDED;
		/* Fast path: the candidate's first component below the directory
		 * (the subdirectory, or the name itself) absent from the table, or
		 * a missing entry, is ENOENT (a bundled directory's listing is
		 * complete): one hash continued from the directory's instead of a
		 * walk from "/". The name itself as a bundled regular file is the
		 * answer the resolver would give (an exact key). */
		const char *first = cap_len[i] ? cap[i] : name;
		size_t fl = 0;
		while (first[fl] && first[fl] != '/') fl++;
		if (fast) {
			dlb_memcpy(cand + cn, first, fl);
			const struct dlb_entry *x = dlb_lookup_h(table, cand, cn + fl, dlb_hash_more(sh, first, fl));
			if (!x || x->type == DLB_MISSING) continue;
			if (cap_len[i] == 0 && x->type == DLB_REG) {
				dlb_memcpy(orig + on, name, nn + 1);
				return found(orig, on + nn, x);
			}
		}
		dlb_memcpy(cand + cn, cap[i], cap_len[i]);
		dlb_memcpy(cand + cn + cap_len[i], name, nn + 1);
		struct dlb_res c;
		switch (resolve_scratch(cand, &c)) {
		case DLB_KNOWN_ERR:
			/* Only the directory's own candidate's errno reaches ld.so's
			 * "found but unusable" check; ENOENT goes on searching. */
			if (c.err != DLB_ENOENT && i == ncap - 1) return S_UNDECIDED;
			continue;
		case DLB_BUNDLED:
			if (c.ent->type != DLB_REG) return S_UNDECIDED;
			dlb_memcpy(orig + on, cap[i], cap_len[i]);
			dlb_memcpy(orig + on + cap_len[i], name, nn + 1);
			return found(orig, on + cap_len[i] + nn, c.ent);
		default:
			return S_UNDECIDED;
		}
	}
	return S_MISS;
}

/* walk_list: a DT_RPATH/DT_RUNPATH/LD_LIBRARY_PATH value, elements
 * separated by any of seps, $ORIGIN taken from origin_map. */
static int walk_list(const char *list, const char *seps, const struct link_map *origin_map, const char *name, size_t nn)
{
	char dir[DLB_PATH_MAX];
	for (const char *p = list;;) {
		const char *e = p;
		while (*e && *e != seps[0] && *e != seps[1]) e++;
		long dn = expand(p, (size_t)(e - p), origin_map, dir, sizeof dir);
		if (dn < 0) return S_UNDECIDED;
		int r = try_dir(dir, (size_t)dn, name, nn);
		if (r != S_MISS) return r;
		if (!*e) return S_MISS;
		p = e + 1;
	}
}

/* ---- /etc/ld.so.cache, read as ld.so reads it (node-local, once) ---- */
static struct dlb_ldcache cache;
static int cache_state; /* 0 not read, 1 usable, 2 absent (ld.so: no cache), -1 not understood */

static void read_cache(void)
{
	cache_state = -1;
	size_t size;
	long err;
	const char *c = map_file("/etc/ld.so.cache", &size, NULL, &err);
	if (err == -2 /* ENOENT */) { cache_state = 2; return; }
	if (!c) return;
	if (!dlb_ldcache_open(c, size, &cache)) { dlb_sys(DLB_SYS_munmap, (long)c, (long)size, 0); return; }
	cache_state = 1;
}

/* drop_cache unmaps the cache when ld.so unmaps its own (_dl_unload_cache,
 * at the end of start-up and of every dlopen: la_activity below), so that
 * /proc/self/maps shows it no more than natively; the next search that
 * needs it maps it again, as ld.so does. */
static void drop_cache(void)
{
	if (cache_state == 1) dlb_sys(DLB_SYS_munmap, (long)cache.map, (long)cache.size, 0);
	cache_state = 0;
}

/* put_dec writes v in decimal at out (room for 20 digits); returns its length. */
static size_t put_dec(char *out, uint64_t v)
{
	char t[20];
	size_t n = 0;
	do t[n++] = (char)('0' + v % 10); while ((v /= 10) != 0);
	for (size_t i = 0; i < n; i++) out[i] = t[n - 1 - i];
	return n;
}

/* pre_holds: the staged answers came from the cache this process would read
 * (checked once, by one stat: ldconfig writes a new file and renames it
 * over the old one, so a new cache has another inode, size or time). */
static int pre_holds(void)
{
	if (pre_state) return pre_state > 0;
	pre_state = -1;
	/* x86_64's and aarch64's struct stat agree on these offsets: st_dev 0,
	 * st_ino 8, st_size 48, st_mtime 88, its nanoseconds 96. */
	uint64_t st[18];
	if (dlb_sys(DLB_SYS_newfstatat, -100 /* AT_FDCWD */, "/etc/ld.so.cache", (long)st) < 0) return 0;
	char want[5 * 21];
	size_t n = 0;
	const uint64_t f[5] = {st[0], st[1], st[6], st[11], st[12]};
	for (int i = 0; i < 5; i++) {
		if (i) want[n++] = ' ';
		n += put_dec(want + n, f[i]);
	}
	if (n != pre_id_len || !dlb_memeq(want, pre_id, n)) return 0;
	pre_state = 1;
	return 1;
}

/* pre_lookup: the staged answer for name, as cache_lookup gives it (a path
 * copied into buf, of cap bytes), or -2 when the stage keeps none for it. */
static int pre_lookup(const char *name, size_t nn, char *buf, size_t cap, const char **path)
{
	for (const char *p = pre_at; p && p < pre_end;) {
		const char *e = p;
		while (e < pre_end && *e != '\n') e++;
		/* "so " NAME " " ANSWER */
		if ((size_t)(e - p) > 4 + nn && p[3 + nn] == ' ' && dlb_memeq(p + 3, name, nn)) {
			const char *a = p + 4 + nn;
			size_t an = (size_t)(e - a);
			if (an == 1 && a[0] == '-') return 0;
			if (a[0] != '=' || an - 1 >= cap) return -1;
			dlb_memcpy(buf, a + 1, an - 1);
			buf[an - 1] = 0;
			*path = buf;
			return 1;
		}
		p = e + 1;
	}
	return -2;
}

/* cache_lookup: 1 and *path when the cache names one file for name, 0 none,
 * -1 undecidable (dlb_ldcache_lookup). From the stage's answers where they
 * hold one for name (buf: cap bytes for its path), else from the file. */
static int cache_lookup(const char *name, const char **path, char *buf, size_t cap)
{
	if (pre_at && pre_holds()) {
		int r = pre_lookup(name, dlb_strlen(name), buf, cap, path);
		if (r != -2) return r;
	}
	if (cache_state == 0) read_cache();
	if (cache_state == 2) return 0;
	if (cache_state != 1) return -1;
	return dlb_ldcache_lookup(&cache, name, path);
}

/* cached_answer: the file ld.so.cache names, looked up in the table; S_MISS
 * (on to the default directories) for a stale entry. */
static int cached_answer(const char *cached)
{
	struct dlb_res c;
	switch (resolve_scratch(cached, &c)) {
	case DLB_BUNDLED:
		if (c.ent->type != DLB_REG) return S_UNDECIDED;
		return found(cached, dlb_strlen(cached), c.ent);
	case DLB_KNOWN_ERR:
		return c.err == DLB_ENOENT ? S_MISS : S_UNDECIDED; /* ENOENT: a stale cache entry */
	default:
		return S_UNDECIDED;
	}
}

/* whole_search: ld.so's search for name (no '/') on behalf of loader. */
static int whole_search(const char *name, const struct link_map *loader)
{
	size_t nn = dlb_strlen(name);
	struct dyninfo ld;
	dyn_of(loader, &ld);
	const struct link_map *mainmap = main_of(loader);
	if (!mainmap) return S_UNDECIDED; /* another namespace (dlmopen) */
	int r;
	if (!ld.runpath) {
		int did_main = 0;
		for (const struct link_map *l = loader; l;) {
			struct dyninfo di;
			dyn_of(l, &di);
			if (di.rpath && di.rpath[0]) {
				if ((r = walk_list(di.rpath, "::", l, name, nn)) != S_MISS) return r;
				did_main |= l == mainmap;
			}
			int known;
			l = loader_of(l, &known);
			if (!known) return S_UNDECIDED;
		}
		struct dyninfo dm;
		dyn_of(mainmap, &dm);
		if (!did_main && dm.rpath && dm.rpath[0] && (r = walk_list(dm.rpath, "::", mainmap, name, nn)) != S_MISS)
			return r;
	}
	if (llp_state < 0) return S_UNDECIDED;
	if (llp_state > 0 && (r = walk_list(llp, ":;", mainmap, name, nn)) != S_MISS) return r;
	if (ld.runpath && ld.runpath[0] && (r = walk_list(ld.runpath, "::", loader, name, nn)) != S_MISS) return r;
	if (ld.nodeflib) return S_MISS;
	const char *cached;
	char pre_path[256]; /* a staged answer's path (stagefmt.maxCacheAnswerPath) */
	switch (cache_lookup(name, &cached, pre_path, sizeof pre_path)) {
	case 1:
		if ((r = cached_answer(cached)) != S_MISS) return r;
		break;
	case 0:
		break;
	default:
		return S_UNDECIDED;
	}
	for (unsigned i = 0; i < nsysdir; i++)
		if ((r = try_dir(sysdir[i], sysdir_len[i], name, nn)) != S_MISS) return r;
	return S_MISS;
}

/* glibc >= 2.35 refuses an audit module whose la_version returns a version it
 * does not support. We use only la_objsearch and la_objopen, unchanged in
 * interface versions 1 (glibc 2.17..2.34) and 2 (2.35 on): return the version
 * asked for, or 2 if a later glibc asks for more (it accepts older ones). */
unsigned int la_version(unsigned int version)
{
	char **env = initial_env();
	if (env) {
		for (char **e = env; *e; e++) environ_entry(*e, dlb_strlen(*e));
	} else {
		read_environ();
		say("environ", "read from /proc/self/environ", 0);
	}
	if (root_len) map_table();
	/* Under the staged ld.so, started as a command (dlbundle exec, or the
	 * exec wrappers of a served parent: exec.c), the kernel loaded no
	 * interpreter (AT_BASE 0) and AT_EXECFN names the staged file. Anything
	 * else in a cross stage runs under the node's ld.so. Auxv unread: as
	 * before (served). */
	if (cross && aux_read) {
		const char *fn = (const char *)aux_execfn;
		foreign = !(aux_base == 0 && fn && root_len && dlb_memeq(fn, root, root_len) && fn[root_len] == '/');
		if (foreign) say("foreign", "ld.so: the image's glibc objects go to the node's", 0);
	}
	if (!table) env = 0; /* inactive: the environment stays as it is */
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
/* nolib puts STAGE/nolib/NAME into staged: the answer for a dlopen the
 * table decides fails with ENOENT. Opening it fails with ENOENT in the
 * node-local stage, and the preload's dlerror shows "NAME: cannot open shared
 * object file: No such file or directory" as natively. (During start-up ld.so
 * prints a fatal error itself, which the preload cannot rewrite: there the
 * search is left to ld.so.) */
static int nolib(const char *name)
{
	size_t sl = root_len - 5, nn = dlb_strlen(name);
	if (sl + 7 + nn >= sizeof staged) return 0;
	dlb_memcpy(staged, root, sl);
	dlb_memcpy(staged + sl, "/nolib/", 7);
	dlb_memcpy(staged + sl + 7, name, nn + 1);
	say("nolib", name, staged);
	return 1;
}

/* glibc_object: name (a path or a bare name) is one of glibc's own objects:
 * ld.so, libc and the libraries built with it, which share its private
 * symbols (GLIBC_PRIVATE) and structures, NSS modules, gconv modules. In a
 * foreign process (above) the node's ld.so must get the node's copies: the
 * image's libc.so.6 of another build dies at start ("GLIBC_2.35 not found",
 * dl-call-libc-early-init.c assertion). By basename, up to the first '.' or
 * '-' (libc.so.6, libc-2.31.so, ld-linux-x86-64.so.2); hwcaps subdirectories
 * keep the basename. */
static int glibc_object(const char *name)
{
	/* one string, no pointer table: nothing for ld.so to relocate */
	static const char stems[] = "|ld|ld64|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|"
		"libBrokenLocale|libc_malloc_debug|libthread_db|libmemusage|libpcprofile|libSegFault|libnsl|";
	const char *b = name;
	for (const char *p = name; *p; p++)
		if (*p == '/') {
			if (dlb_memeq(p, "/gconv/", 7)) return 1;
			b = p + 1;
		}
	size_t n = 0;
	while (b[n] && b[n] != '.' && b[n] != '-') n++;
	if (n > 7 && dlb_memeq(b, "libnss_", 7)) return 1;
	for (const char *s = stems; s[1]; ) {
		const char *e = s + 1;
		while (*e != '|') e++;
		if ((size_t)(e - s - 1) == n && dlb_memeq(s + 1, b, n)) return 1;
		s = e;
	}
	return 0;
}

static char *path_answer(const char *name, unsigned int flag);
static void note(char kind, const char *p);
char *la_objsearch(const char *name, uintptr_t *cookie, unsigned int flag)
{
	if (foreign && glibc_object(name)) {
		say("node-glibc", name, 0);
		return (char *)name;
	}
	if (flag == LA_SER_ORIG)
		/* the cookie of the object on whose behalf ld.so loads: glibc
		 * initialises every cookie to the object's link_map */
		pending = (const struct link_map *)*cookie;
	size_t i = 0;
	while (name[i] && name[i] != '/') i++;
	if (table && flag == LA_SER_ORIG && !name[i] && ncap && pending) {
		switch (whole_search(name, pending)) {
		case S_FOUND:
			say("search", name, staged);
			return staged;
		case S_MISS:
			/* nothing to find */
			if (started && nolib(name)) return staged;
			break;
		}
		say("search-undecided", name, 0);
		return (char *)name;
	}
	if (!table || name[0] != '/')
		return (char *)name;
	return path_answer(name, flag);
}

/* path_answer: la_objsearch for an absolute name (a candidate of ld.so's own
 * search, or a dlopen by path), in a function of its own for its buffer
 * (see resolve_scratch; staged cannot be the scratch here: ld.so may ask
 * about the answer it was given). */
static __attribute__((noinline)) char *path_answer(const char *name, unsigned int flag)
{
	const char *orig = name;
	/* The stage itself (the shim's own objects) is never looked up: it may
	 * lie below a directory whose listing was taken before it existed. */
	if (dlb_hasprefix(name, root, root_len - 5) && !dlb_hasprefix(name, root, root_len)) {
		/* A foreign process may run on glibc before 2.34 (an image built
		 * on a newer node), where preload-2.34.so cannot load (it takes
		 * dlsym from libc.so.6 at GLIBC_2.34); preload.so loads on every
		 * glibc from 2.17 (loader/shim/build.sh). */
		size_t n = dlb_strlen(name);
		if (foreign && n > 16 && n < sizeof staged && dlb_memeq(name + n - 16, "/preload-2.34.so", 16)) {
			dlb_memcpy(staged, name, n - 16);
			dlb_memcpy(staged + n - 16, "/preload.so", 12);
			say("node-glibc", name, staged);
			return staged;
		}
		return (char *)name;
	}
	/* $ORIGIN of an executable that runs from the stage is inside the stage
	 * (ld.so reads /proc/self/exe with a raw syscall): look up the original. */
	if (dlb_hasprefix(name, root, root_len) && name[root_len] == '/')
		orig = name + root_len;
	char canon[DLB_PATH_MAX];
	struct dlb_res r;
	switch (dlb_resolve(table, &asks, orig, 1, canon, &r)) {
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
		/* dlopen of a path the table says does not exist: as for a
		 * search that finds nothing (ld.so would open the name as given). */
		if (flag == LA_SER_ORIG) {
			/* dlopen of a path the table says fails: the staged copy of
			 * the path fails with the same errno in the node-local stage
			 * (it mirrors the table), and the preload's dlerror strips
			 * STAGE/root from the message. ("" here would be searched for
			 * as a name.) During start-up ld.so prints the error itself:
			 * leave it the original. */
			size_t n = dlb_strlen(orig);
			if (!started || orig != name || root_len + n >= sizeof staged) return (char *)name;
			dlb_memcpy(staged, root, root_len);
			dlb_memcpy(staged + root_len, orig, n + 1);
			say("fails", orig, staged);
			return staged;
		}
		/* Not NULL: after a candidate that "did not open", ld.so reads its
		 * private errno, which an audit module cannot set, and gives up the
		 * whole search path unless it is ENOENT. An empty name makes its
		 * open fail at once with ENOENT, before any path walk: no file
		 * system is asked. */
		say("missing", orig, 0);
		return (char *)"";
	}
	say("unknown", orig, 0);
	/* A candidate of ld.so's own search goes to the file system. (A
	 * dlopen by path, LA_SER_ORIG, is noted by la_objopen if it loads.) */
	if (flag != LA_SER_ORIG) {
		note(DLB_NOTE_SEARCH, orig);
		/* Where the candidate fails, ld.so stats its directory too
		 * (elf/dl-load.c open_path: a directory that does not exist is
		 * skipped from then on): noted with it. Not for ld.so.cache's
		 * answer, which is opened alone. (Also where the candidate opens:
		 * one directory more for a fold to list, which is harmless.) */
		size_t n = dlb_strlen(orig);
		while (n > 1 && orig[n - 1] != '/') n--;
		if (flag != LA_SER_CONFIG && n > 1 && n <= sizeof canon) {
			dlb_memcpy(canon, orig, n - 1);
			canon[n - 1] = 0;
			note(DLB_NOTE_SEARCH, canon);
		}
	}
	return (char *)orig;
}

/* ---- notes for the preload's report (table.h, DLB_NOTE_*) ----
 *
 * A library ld.so loads from outside the image is noted when it is mapped:
 * the preload's walk of the link maps at exit misses one dlclose'd on the
 * way together with every dependency it pulled (Open MPI's hwloc loads
 * plugins that pull libxml2, libicu, libX11..., then unloads them), and
 * the preload's own dlclose sees only the handle's object. A candidate of
 * ld.so's search that the table could not answer (a directory the image
 * lacks: an LD_LIBRARY_PATH a launcher or module sets, the RUNPATH of a
 * library from outside) is noted too: no hook of the preload sees ld.so's
 * opens. A fold adds both (cmd/dlbundle build --from). Bounded: NOTES_MAX
 * bytes, repeated paths noted once (a set of hashes); what does not fit is
 * counted. Called with ld.so's load lock held (see the top), so no two
 * threads append at once; notes_len is published last for the preload,
 * which may read while another thread dlopens. */
#define NOTES_MAX (64u << 10)
#define NOTE_SEEN 2048
static char notes[NOTES_MAX] COLD;
static uint64_t note_seen[NOTE_SEEN] COLD;

static void note(char kind, const char *p)
{
	size_t n = dlb_strlen(p);
	uint64_t h = dlb_hash_more(DLB_HASH_INIT, p, n) ^ (uint64_t)kind;
	h |= 1;
	unsigned i = (unsigned)h & (NOTE_SEEN - 1), k = 0;
	for (; k < NOTE_SEEN && note_seen[i]; k++, i = (i + 1) & (NOTE_SEEN - 1))
		if (note_seen[i] == h) return;
	uint32_t used = dlb_audit_share.notes_len;
	if (k == NOTE_SEEN || n + 2 > NOTES_MAX - used) {
		dlb_audit_share.notes_dropped++;
		return;
	}
	note_seen[i] = h;
	notes[used] = kind;
	dlb_memcpy(notes + used + 1, p, n + 1);
	dlb_audit_share.notes = notes;
	__atomic_store_n(&dlb_audit_share.notes_len, used + (uint32_t)n + 2, __ATOMIC_RELEASE);
	/* The preload's want_fatal (table.h), once its start-up has run: a
	 * call into the main namespace's code, made under ld.so's load lock,
	 * which it does not take. */
	void (*noted)(void) = __atomic_load_n(&dlb_audit_share.noted, __ATOMIC_ACQUIRE);
	if (noted) noted();
}

/* ---- the share, handed to the preload (table.h, DLB_SHARE_SLOT) ---- */

/* gnu_symbol: the address of the object l defines as name, by its GNU hash
 * table (as ld.so looks a name up in one object), or 0. ld.so has mapped l
 * and filled in its dynamic section's addresses (dyn_ptr: or not, on targets
 * that leave them), but not yet relocated it. */
static void *gnu_symbol(const struct link_map *l, const char *name)
{
	uintptr_t gh = 0, symtab = 0, strtab = 0;
	for (const ElfW(Dyn) *x = l->l_ld; x && x->d_tag != DT_NULL; x++) {
		if (x->d_tag == DT_GNU_HASH) gh = x->d_un.d_ptr;
		else if (x->d_tag == DT_SYMTAB) symtab = x->d_un.d_ptr;
		else if (x->d_tag == DT_STRTAB) strtab = x->d_un.d_ptr;
	}
	if (!gh || !symtab || !strtab) return 0;
	gh = dyn_ptr(l, gh), symtab = dyn_ptr(l, symtab), strtab = dyn_ptr(l, strtab);
	const uint32_t *h = (const uint32_t *)gh;
	uint32_t nbuckets = h[0], symoffset = h[1], bloom_words = h[2];
	if (nbuckets == 0) return 0;
	const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(h + 4) + bloom_words);
	const uint32_t *chain = buckets + nbuckets;
	uint32_t hash = dlb_gnu_hash(name);
	uint32_t i = buckets[hash % nbuckets];
	if (i < symoffset) return 0;
	size_t nl = dlb_strlen(name);
	for (;; i++) {
		uint32_t ch = chain[i - symoffset];
		const ElfW(Sym) *sym = (const ElfW(Sym) *)symtab + i;
		if ((ch | 1) == (hash | 1) && sym->st_shndx != SHN_UNDEF &&
		    dlb_memeq((const char *)strtab + sym->st_name, name, nl + 1))
			return (void *)(l->l_addr + sym->st_value);
		if (ch & 1) return 0;
	}
}

/* hand_share writes the address of dlb_audit_share into the preload's
 * DLB_SHARE_SLOT, when l is this stage's preload (STAGE/shim/...) in the
 * main namespace. Its writable segment is mapped and its code has not run
 * (la_objopen comes before relocation and constructors). */
static void hand_share(const struct link_map *l, Lmid_t lmid)
{
	size_t sl = root_len - 5; /* the stage dir */
	const char *n = l->l_name;
	if (lmid != LM_ID_BASE || !table || !n || !dlb_hasprefix(n, root, sl) || !dlb_memeq(n + sl, "/shim/", 6))
		return;
	const struct dlb_audit_share **slot = gnu_symbol(l, DLB_SHARE_SLOT);
	if (slot) *slot = &dlb_audit_share;
}

/* la_objopen: show the original path in l_name (dladdr, dl_iterate_phdr,
 * link_map walks, $ORIGIN of this object's own dependencies). The staged name
 * is root + original, so the original fits in place: no allocation, and
 * ld.so's free(l_name) at dlclose still frees its own buffer. */
unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie)
{
	(void)cookie;
	hand_share(map, lmid);
	if (nmaps < MAPS_MAX) {
		*map_at(nmaps++) = (struct map_loader){map, pending};
	}
	pending = 0;
	char *n = map->l_name;
	if (table && n && dlb_hasprefix(n, root, root_len) && n[root_len] == '/') {
		size_t i = 0;
		for (; n[root_len + i]; i++) n[i] = n[root_len + i];
		n[i] = 0;
	} else if (table && n && n[0] == '/' && !dlb_hasprefix(n, root, root_len - 5) &&
		   !(aux_read && aux_base && map->l_addr == aux_base)) {
		/* From outside the stage (or a path the table holds that ld.so
		 * reached undecided: the preload's report leaves those out by
		 * the table). Not the executable (""), nor the vDSO (no '/'),
		 * nor the shim's own objects, nor ld.so itself where the kernel
		 * loaded it (l_addr is AT_BASE; the node's by design, which the
		 * report leaves out too): noting it in every process touched
		 * two pages of .bss (three faults: the set of hashes is read,
		 * then written) for nothing. */
		note(DLB_NOTE_LIB, n);
	}
	return 0; /* no symbol binding callbacks: they would slow every call */
}

/* la_activity(LA_ACT_CONSISTENT): a start-up, dlopen or dlclose has
 * finished loading; ld.so unmaps /etc/ld.so.cache right after it. */
void la_activity(uintptr_t *cookie, unsigned int flag)
{
	(void)cookie;
	if (flag == LA_ACT_CONSISTENT) drop_cache();
}

/* la_preinit: start-up loading is done; what is loaded from now on is
 * dlopen'ed (see la_objsearch: how a failed search is answered). */
void la_preinit(uintptr_t *cookie)
{
	(void)cookie;
	started = 1;
}

/* audit_dirty: p[0:n] is one of the directories in DLBUNDLE_DIRTY (as the
 * preload keeps it: newline-separated), or that set holds "/" (everything). */
static int audit_dirty(const char *p, size_t n, uint64_t h)
{
	(void)h; /* a short list, compared by name */
	/* asked for every component the search walks: the common answer (no
	 * directory written) from one byte, before the prefix's compare */
	if (!audit_dirty_any()) return 0;
	const char *s = *dirty_slot;
	if (!dlb_memeq(s, "DLBUNDLE_DIRTY=", 15)) return 0;
	for (s += 15; *s;) {
		const char *e = s;
		while (*e && *e != '\n') e++;
		size_t l = (size_t)(e - s);
		if ((l == 1 && s[0] == '/') || (l == n && dlb_memeq(s, p, n))) return 1;
		s = *e ? e + 1 : e;
	}
	return 0;
}

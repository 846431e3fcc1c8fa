/* lookup.c — start-up (the real functions, the table mapped once) and the
 * path lookup every entry point asks: a path, made absolute, resolved
 * against the table (table.h) and counted for the report; the debug log.
 * The shim's state lives here (shim_state.h declares it). */
#include "shim_state.h"

#define DEFINE_REAL(name, ret, args) ret(*real_##name) args;
SHIM_FUNCS(DEFINE_REAL)

/* ---- state, set once by shim_init ---- */
const void *table;
char stage_root[1024]; /* $DLBUNDLE_STAGE/root */
size_t stage_root_len;
dev_t stage_dev;
int debug_on;
static char debug_dir[512] DLB_COLD;
int inactive = -1; /* the shim has a stage but no table: the FB_* reason, else -1 */
uid_t init_uid, init_euid; /* the ids that read the stage at start-up */

static void resolve_reals(void)
{
#define RESOLVE(name, ret, args) real_##name = (ret(*) args)dlsym(RTLD_NEXT, #name);
	SHIM_FUNCS(RESOLVE)
}

/* ---- the real functions from the stage's record ----
 *
 * dlsym(RTLD_NEXT) of every real function costs a process ~44 us, cache
 * misses in libc's symbol tables. The stage records where each lies in the
 * libc it serves (STAGE/search, loader/stagefmt/reals.go: its build-id,
 * then "real NAME OFFSET|-" in the table's order), which audit.so read.
 * RTLD_NEXT means the first definition after this object in the global
 * scope, which at start-up is the load order: the objects between us and
 * that libc are asked first, through their GNU-hash bloom filters; a name
 * one of them may define (darshan, an app's own preload), and every "-",
 * is looked up with dlsym as before. Any doubt (no record, another libc, an
 * object without a GNU hash): all of them are. */
extern ElfW(Dyn) _DYNAMIC[] __attribute__((visibility("hidden")));
static void debug_write(const char *line, size_t n);

#define DLB_ONE_(name, ret, args) +1
enum { NREALS = 0 SHIM_FUNCS(DLB_ONE_) };
/* the names, one string ("open\0open64\0..."): no pointer array to relocate */
#define DLB_NAME_(name, ret, args) #name "\0"
static const char real_names[] = SHIM_FUNCS(DLB_NAME_);

struct reals_walk {
	const unsigned char *id; /* the recorded libc's build-id */
	size_t id_len;
	uint32_t hash[NREALS];
	unsigned char maybe[NREALS]; /* an object before libc may define it */
	int after_self, failed;
	uintptr_t libc; /* libc's base, once found */
};

/* has_build_id: the object's PT_NOTE segments hold NT_GNU_BUILD_ID id. */
static int has_build_id(const struct dl_phdr_info *i, const unsigned char *id, size_t n)
{
	for (int k = 0; k < i->dlpi_phnum; k++) {
		const ElfW(Phdr) *ph = &i->dlpi_phdr[k];
		if (ph->p_type != PT_NOTE) continue;
		const unsigned char *p = (const unsigned char *)(i->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
		while (end - p >= 12) {
			uint32_t nsz, dsz, type;
			memcpy(&nsz, p, 4);
			memcpy(&dsz, p + 4, 4);
			memcpy(&type, p + 8, 4);
			size_t name = ((size_t)nsz + 3) & ~(size_t)3, desc = ((size_t)dsz + 3) & ~(size_t)3;
			if ((size_t)(end - p) - 12 < name || (size_t)(end - p) - 12 - name < desc) break;
			if (type == 3 /* NT_GNU_BUILD_ID */ && nsz == 4 && !memcmp(p + 12, "GNU", 4))
				return dsz == n && !memcmp(p + 12 + name, id, n);
			p += 12 + name + desc;
		}
	}
	return 0;
}

/* may_define marks in w->maybe the names whose bloom filter bits the
 * object sets; 0 when it has no GNU hash table to ask. */
static int may_define(const struct dl_phdr_info *i, struct reals_walk *w)
{
	const ElfW(Dyn) *d = NULL;
	for (int k = 0; k < i->dlpi_phnum && !d; k++)
		if (i->dlpi_phdr[k].p_type == PT_DYNAMIC) d = (const ElfW(Dyn) *)(i->dlpi_addr + i->dlpi_phdr[k].p_vaddr);
	const uint32_t *g = NULL;
	for (; d && d->d_tag != DT_NULL && !g; d++)
		if (d->d_tag == DT_GNU_HASH) /* ld.so relocates it in place, except where .dynamic is read-only */
			g = (const uint32_t *)(d->d_un.d_ptr < i->dlpi_addr ? i->dlpi_addr + d->d_un.d_ptr : d->d_un.d_ptr);
	if (!g || g[2] == 0 || (g[2] & (g[2] - 1))) return 0;
	const ElfW(Addr) *bloom = (const ElfW(Addr) *)(g + 4);
	const unsigned bits = sizeof(ElfW(Addr)) * 8;
	for (size_t k = 0; k < NREALS; k++) {
		uint32_t h = w->hash[k];
		ElfW(Addr) word = bloom[(h / bits) & (g[2] - 1)];
		if ((word >> (h % bits)) & (word >> ((h >> g[3]) % bits)) & 1) w->maybe[k] = 1;
	}
	return 1;
}

static int reals_visit(struct dl_phdr_info *i, size_t size, void *arg)
{
	struct reals_walk *w = arg;
	(void)size;
	if (!w->after_self) {
		/* this object: the one whose dynamic section is ours */
		for (int k = 0; k < i->dlpi_phnum; k++)
			if (i->dlpi_phdr[k].p_type == PT_DYNAMIC && i->dlpi_addr + i->dlpi_phdr[k].p_vaddr == (ElfW(Addr))_DYNAMIC)
				w->after_self = 1;
		return 0;
	}
	if (has_build_id(i, w->id, w->id_len)) {
		w->libc = i->dlpi_addr;
		return 1;
	}
	if (!may_define(i, w)) {
		w->failed = 1;
		return 1;
	}
	return 0;
}

static int hex_digit(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

/* hex_field reads [*p, end) up to a space or newline: a hex number (1),
 * "-" (0), or anything else (-1). */
static int hex_field(const char **p, const char *end, uint64_t *v)
{
	const char *s = *p;
	*v = 0;
	if (s < end && *s == '-') { *p = s + 1; return 0; }
	int digits = 0;
	for (; s < end && hex_digit(*s) >= 0 && digits <= 16; s++, digits++) *v = *v << 4 | (uint64_t)hex_digit(*s);
	*p = s;
	return digits > 0 && digits <= 16 ? 1 : -1;
}

/* reals_from_stage sets every real_<name> from the record, dlsym where it
 * must; 0 (nothing set) when the record cannot be used. */
static int reals_from_stage(const struct dlb_audit_share *a)
{
	if (!a || !a->reals || a->reals_len > 8192) return 0;
	const char *p = a->reals, *end = a->reals + a->reals_len;
	struct reals_walk w;
	memset(&w, 0, sizeof w);
	unsigned char id[64];
	if (end - p < 6 || !dlb_memeq(p, "libc ", 5)) return 0;
	p += 5;
	for (; end - p >= 2 && hex_digit(p[0]) >= 0 && hex_digit(p[1]) >= 0 && w.id_len < sizeof id; p += 2)
		id[w.id_len++] = (unsigned char)(hex_digit(p[0]) << 4 | hex_digit(p[1]));
	if (p >= end || *p != '\n' || !w.id_len) return 0;
	p++;
	w.id = id;
	const char *name = real_names;
	for (size_t k = 0; k < NREALS; k++, name += dlb_strlen(name) + 1) w.hash[k] = dlb_gnu_hash(name);
	dl_iterate_phdr(reals_visit, &w);
	if (!w.libc || w.failed) return 0;
	uint64_t off[NREALS];
	name = real_names;
	for (size_t k = 0; k < NREALS; k++, name += dlb_strlen(name) + 1) {
		size_t n = dlb_strlen(name);
		if (end - p < (ptrdiff_t)(n + 7) || !dlb_memeq(p, "real ", 5) || !dlb_memeq(p + 5, name, n) || p[5 + n] != ' ') return 0;
		p += 6 + n;
		int got = hex_field(&p, end, &off[k]);
		if (got < 0 || p >= end || *p != '\n') return 0;
		p++;
		if (got == 0) w.maybe[k] = 1;
	}
	size_t k = 0, looked_up = 0;
#define FROM_STAGE(name, ret, args) \
	real_##name = w.maybe[k] ? (looked_up++, (ret(*) args)dlsym(RTLD_NEXT, #name)) : (ret(*) args)(w.libc + off[k]); \
	k++;
	SHIM_FUNCS(FROM_STAGE)
	if (debug_on) {
		char line[128];
		int n = snprintf(line, sizeof line, "dlbundle[%d]: real functions: %zu from the stage's record, %zu by dlsym\n",
				 (int)syscall(SYS_getpid), (size_t)NREALS - looked_up, looked_up);
		if (n > 0 && (size_t)n < sizeof line) debug_write(line, (size_t)n);
	}
	return 1;
}

/* dlb_share_slot: audit.so writes the address of what it shares here when
 * ld.so has mapped this object (table.h, DLB_SHARE_SLOT; audit.c,
 * hand_share). The object's one export besides the table of entry points. */
__attribute__((visibility("default"))) const struct dlb_audit_share *dlb_share_slot;

/* audit_share: the table audit.so mapped for this stage (table.h), or NULL
 * where none was handed over (no audit module, another audit module) or it
 * is another stage's. */
static const struct dlb_audit_share *audit_share(void)
{
	const struct dlb_audit_share *a = dlb_share_slot;
	return a && a->table && a->root && dlb_streq(a->root, stage_root) ? a : NULL;
}

/* shim_notes (report.h): audit.so's notes for the report, or NULL. */
const struct dlb_audit_share *shim_notes(void) { return audit_share(); }

/* stage_table_path writes $DLBUNDLE_STAGE/table into out (DLB_STAGE_MAX +
 * 8 bytes), from stage_root ($DLBUNDLE_STAGE/root). */
void stage_table_path(char *out)
{
	size_t sn = stage_root_len - 5;
	memcpy(out, stage_root, sn);
	memcpy(out + sn, "/table", 7);
}

/* map_table maps the table itself where audit.so has none to share (one
 * open, one mmap, one close: no fd is kept; mapped plainly, table.h). */
static void map_table(const char *path)
{
	int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd >= 0 && syscall(SYS_fstat, fd, &st) == 0 && st.st_size > 0) {
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m != MAP_FAILED && dlb_check(m, (size_t)st.st_size)) { table = m; stage_dev = st.st_dev; }
		else if (m != MAP_FAILED) { munmap(m, (size_t)st.st_size); inactive = FB_BAD_TABLE; }
	}
	if (fd >= 0) syscall(SYS_close, fd);
}

/* read_shim_env fills v in one pass over environ (shim_state.h, struct
 * shim_env): each variable's first entry, as getenv would find it. */
static void read_shim_env(struct shim_env *v)
{
	static const struct { char name[12]; unsigned char len; unsigned char off; } vars[] = {
#define V(s, field) {s, sizeof s - 1, offsetof(struct shim_env, field)}
		V("STAGE=", stage), V("DEBUG=", debug), V("DEBUG_DIR=", debug_dir), V("NATIVE_ENV=", native_env),
		V("MAPPED_ENV=", mapped_env), V("REPORT=", report), V("REPORT_MAX=", report_max), V("RUN=", run),
#undef V
	};
	memset(v, 0, sizeof *v);
	for (char **e = environ; e && *e; e++) {
		const char *s = *e;
		if (s[0] == 'L') {
			if (!v->llp && dlb_memeq(s, "LD_LIBRARY_PATH=", 16)) v->llp = e;
			continue;
		}
		if (s[0] != 'D' || !dlb_memeq(s, "DLBUNDLE_", 9)) continue;
		s += 9;
		if (dlb_memeq(s, "DIRTY=", 6)) {
			if (!v->dirty) v->dirty = e;
			continue;
		}
		for (unsigned i = 0; i < sizeof vars / sizeof *vars; i++) {
			const char **slot = (const char **)((char *)v + vars[i].off);
			if (dlb_memeq(s, vars[i].name, vars[i].len)) {
				if (!*slot) *slot = s + vars[i].len;
				break;
			}
		}
	}
}

/* shim_init takes the table audit.so mapped, or maps it.
 * It runs as a constructor, but other libraries' constructors may call us
 * first, so every entry point calls ensure_init(). Two threads racing here do
 * the same idempotent work; the losing mapping is simply leaked. */
volatile int init_done;
void shim_init(void)
{
	/* (real_dlerror is one of the real functions below: from the stage's
	 * record, or dlsym; no lookup of its own in every process) */
	const struct dlb_audit_share *share = NULL;
	struct shim_env v;
	read_shim_env(&v);
	const char *stage = v.stage;
	const char *dbg = v.debug;
	debug_on = dbg && dbg[0] == '1';
	const char *dd = v.debug_dir;
	if (dd && dlb_strlen(dd) < sizeof debug_dir) strcpy(debug_dir, dd);
	if (stage && dlb_strlen(stage) > DLB_STAGE_MAX) {
		/* dlbundle exec refuses such a stage dir; say why nothing is answered. */
		static const char msg[] = "dlbundle: DLBUNDLE_STAGE is longer than 1000 bytes; the shim is "
					  "inactive and this process reads the original files (use a shorter --stage-dir)\n";
		syscall(SYS_write, 2, msg, sizeof msg - 1);
		stage = NULL;
		inactive = FB_STAGE_TOO_LONG;
	}
	_Static_assert(DLB_STAGE_MAX + 8 < sizeof stage_root, "stage_root holds DLBUNDLE_STAGE/root");
	if (stage && stage[0] == '/') {
		/* memcpy, not snprintf: printf's code is pages of libc that most
		 * processes never touch (a page fault each). Both fit: the stage
		 * is at most DLB_STAGE_MAX bytes (above). */
		size_t sn = dlb_strlen(stage);
		memcpy(stage_root, stage, sn);
		memcpy(stage_root + sn, "/root", 6);
		stage_root_len = sn + 5;
		char path[DLB_STAGE_MAX + 8];
		stage_table_path(path);
		/* The ids the kernel started the process with (auxv: no system
		 * call), those audit.so read the stage with, before any code of
		 * the process ran. */
		init_uid = (uid_t)getauxval(AT_UID);
		init_euid = (uid_t)getauxval(AT_EUID);
		const struct dlb_audit_share *a = share = audit_share();
		if (a && dlb_check(a->table, (size_t)a->size)) {
			table = a->table;
			stage_dev = (dev_t)a->dev;
		} else {
			map_table(path);
		}
		if (!table && inactive < 0) inactive = FB_NO_TABLE;
	}
	if (!reals_from_stage(share)) {
		resolve_reals();
		static const char msg[] = "real functions: all by dlsym (no record of the stage's libc that applies)\n";
		if (debug_on) {
			char line[160];
			int n = snprintf(line, sizeof line, "dlbundle[%d]: %s", (int)syscall(SYS_getpid), msg);
			if (n > 0 && (size_t)n < sizeof line) debug_write(line, (size_t)n);
		}
	}
	restore_native_env(&v);
	dirty_inherit(v.dirty);
	report_init(&v);
	if (inactive >= 0) debug_note("inactive", stage ? stage : "", stage && strlen(stage) <= DLB_STAGE_MAX ? strlen(stage) : 0,
				      inactive == FB_NO_TABLE ? "the table cannot be opened or mapped (no-table); every lookup goes to the file system"
				      : inactive == FB_BAD_TABLE ? "the table is damaged or of another version (bad-table); every lookup goes to the file system"
								 : "DLBUNDLE_STAGE is too long (stage-too-long); every lookup goes to the file system");
	__atomic_store_n(&init_done, 1, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void shim_ctor(int argc, char **argv, char **envp)
{
	(void)envp;
	/* A read-modify-write that changes nothing, not a load: the first
	 * touch of the page the start-up state shares is then a write, one
	 * page fault (a read would map the zero page, and the first store
	 * fault again). */
	if (!__atomic_fetch_add(&init_done, 0, __ATOMIC_ACQ_REL)) shim_init();
	unstage_argv0(argc, argv);
}

/* ---- debug log: one write per decision, stderr or DEBUG_DIR/<pid>.log ---- */
static void debug_write(const char *line, size_t n);
void debug_log(const char *what, const char *fn, const char *path, const char *to)
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
void debug_note(const char *what, const char *p, size_t n, const char *why)
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
int fallback(const struct dlb_res *r, const char *canon)
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

/* The walk's questions about this process (table.h, struct dlb_asks): the
 * directories it wrote into (writes.c: dirty_n and dirty_all are read with
 * acquire, the entries below dirty_n are immutable), the real directories of
 * the cwd (realpath.c), and search permission from the table's modes
 * (statopen.c). Static const and in the walk's file, so that the compiler
 * calls these directly and inlines the atomic loads, as it did macros. */
static int ask_dirty(const char *p, size_t n, uint64_t h) { return shim_dirty_any() && dirty_is(p, n, h); }
static int ask_search_all(const struct dlb_entry *e) { return (e->flags & DLB_FLAG_SEARCHABLE) != 0; }
static const struct dlb_asks asks = {
	.dirty = ask_dirty,
	.dirty_any = shim_dirty_any,
	.dirty_all = shim_dirty_all,
	.listing = listing_is,
	.realdir = cwd_prefix,
	.search = search_ok,
	.search_all = ask_search_all,
};

/* Not inlined: every file's lookups share this one copy of the walk, which
 * is large (as when the preload object was one file, where the compiler kept
 * it out of line). */
__attribute__((noinline)) int shim_resolve(const char *in, size_t known, int follow, char *out, struct dlb_res *r)
{
	return dlb_resolve_known(table, &asks, in, known, follow, out, r);
}

/* lookup resolves *pp (relative to dirfd) against the table. Only absolute
 * paths and cwd-relative ones are looked up (getcwd is one cheap local
 * syscall); any other dirfd-relative path is DLB_UNKNOWN. When the answer is
 * DLB_UNKNOWN but the table's symlinks were followed, *pp is pointed at canon,
 * an equivalent path that does not walk them again on the original file
 * system; the caller passes *pp to the real function. */
int lookup(const char *fn, int dirfd, const char **pp, int follow, char *canon, struct dlb_res *r)
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
	int rc = shim_resolve(p, known, follow, canon, r);
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

/* note_dir_open: an open the shim passes through without a lookup
 * (O_DIRECTORY) of path, absolute: when it is a bundled directory, the
 * report names it (report_dir_open). Nothing is counted otherwise, and the
 * walk runs only while a report is kept. */
void note_dir_open(const char *path)
{
	ensure_init();
	if (!table || !report_wanted() || path[0] != '/') return;
	if (!strncmp(path, stage_root, stage_root_len - 5) && (path[stage_root_len - 5] == '/' || !path[stage_root_len - 5]))
		return;
	char canon[DLB_PATH_MAX];
	struct dlb_res r;
	r.rewritten = 0;
	r.why = DLB_WHY_LACKS;
	if (shim_resolve(path, 0, 1, canon, &r) == DLB_BUNDLED && r.ent->type == DLB_DIR) {
		report_dir_open(canon, r.len, 0);
		debug_log("dir-open", "open", path, canon);
	}
}

/* staged builds stage_root + canon. */
int staged(char *out, size_t outsz, const char *canon, size_t n)
{
	if (stage_root_len + n + 1 > outsz) return -1;
	memcpy(out, stage_root, stage_root_len);
	memcpy(out + stage_root_len, canon, n + 1);
	return 0;
}

/* strip_stage turns a staged path (as the kernel reports it) back into the
 * original, in place. Returns the new length. */
size_t strip_stage(char *s, size_t n)
{
	if (stage_root_len && n > stage_root_len && memcmp(s, stage_root, stage_root_len) == 0 && s[stage_root_len] == '/') {
		memmove(s, s + stage_root_len, n - stage_root_len);
		return n - stage_root_len;
	}
	return n;
}


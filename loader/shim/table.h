/* table.h — the lookup table reader and the path resolver, shared by audit.c
 * (freestanding: no libc) and the preload object (shim_state.h). Format: docs/loader.md; writer:
 * loader/table.go. Everything here is allocation-free and syscall-free: a
 * lookup is a hash, a probe sequence and a byte compare on the mmap-ed table.
 */
#ifndef DLB_TABLE_H
#define DLB_TABLE_H

#include <stdint.h>
#include <stddef.h>

#define DLB_PATH_MAX 4096
/* The longest DLBUNDLE_STAGE the shim accepts (its fixed buffers hold the
 * stage plus "/root" and a name; loader.checkStagePath refuses longer ones). */
#define DLB_STAGE_MAX 1000

enum { DLB_REG = 1, DLB_DIR = 2, DLB_SYMLINK = 3, DLB_MISSING = 4, DLB_EXTERNAL = 5 };
enum {
	DLB_FLAG_ELF_EXEC = 1,
	DLB_FLAG_BLOCKS = 2,   /* blocks holds the source's st_blocks */
	DLB_FLAG_ELF = 4,      /* the image's kind: an ELF object */
	DLB_FLAG_ELF_NODE = 8, /* checked at staging: ELF of this node's class, byte order, machine */
	DLB_FLAG_SEARCHABLE = 16, /* every bundled directory above it has o+x: anyone reaches it */
};

struct dlb_header {
	char magic[8];
	uint32_t version, nbuckets, nentries;
	uint32_t search_len; /* the node's search rules (STAGE/search's text), appended at staging; 0: none */
	uint64_t buckets, entries, strings, size;
	uint64_t search;     /* their offset; a NUL follows them */
};

struct dlb_entry {
	uint64_t hash;
	uint32_t path, path_len;
	uint32_t target, target_len; /* symlink: its text; directory: its listing (offset, records) */
	uint8_t type, flags;
	uint16_t reserved0;
	uint32_t mode, uid, gid, nlink, blocks;
	int64_t size, mtime_ns, atime_ns, ctime_ns;
	uint64_t dev, ino;
};

/* One name of a directory's listing, in the order the build's read of the
 * directory returned it ("." and ".." first). */
struct dlb_record {
	uint64_t ino;     /* d_ino */
	uint32_t name;    /* offset of the name, NUL-terminated */
	uint8_t name_len; /* 1..255 */
	uint8_t d_type;   /* DT_DIR, DT_REG, DT_LNK, or DT_UNKNOWN for "other" */
	uint16_t reserved;
};

_Static_assert(sizeof(struct dlb_header) == 64, "header layout");
_Static_assert(sizeof(struct dlb_entry) == 96, "entry layout");
_Static_assert(sizeof(struct dlb_record) == 16, "listing record layout");

/* The table is mapped plainly (no MAP_POPULATE), by audit.c and, where it
 * cannot share that mapping (below), by lookup.c: a read fault maps the 64
 * KiB around it (the kernel's fault-around), so a start-up that touches the
 * table all over takes a fault per 64 KiB, and one that makes a few lookups
 * takes a few. Populating cost more in both cases on the VM
 * measured (2 MB: 180 us populated against 139 us of faults with every page
 * touched; 528 KB: 48 against 6 us for one lookup; docs/bench/loader.md).
 *
 * One mapping per process: audit.so hands it to the preload, which uses the
 * same pages, already faulted in by audit.so's search. The preload exports
 * one pointer, DLB_SHARE_SLOT; audit.so writes the address of its
 * dlb_audit_share there in la_objopen, when ld.so has mapped the preload and
 * before any code of it runs (on every glibc: a walk of the link maps finds
 * no audit namespace before 2.35). The preload maps the table itself only
 * where nothing was handed over (no audit module, another stage). */
struct dlb_audit_share {
	const void *table; /* NULL: audit.so mapped none */
	uint64_t size;
	uint64_t dev;      /* st_dev of the table file */
	const char *root;  /* $DLBUNDLE_STAGE/root as audit.so read it */
	/* STAGE/search's last part, the real functions' places (text:
	 * loader/stagefmt/reals.go), or NULL */
	const char *reals;
	uint64_t reals_len;
	/* What ld.so did that the stage did not serve, noted by audit.so and
	 * reported by the preload at exit (report.c): entries of one kind byte
	 * (DLB_NOTE_*), the path, a NUL. audit.so appends under ld.so's load
	 * lock and publishes notes_len last (release); the preload reads up
	 * to notes_len (acquire). Bounded: what does not fit is counted in
	 * notes_dropped. */
	const char *notes;
	uint32_t notes_len, notes_dropped;
	/* Set by the preload at start-up (report.c, want_fatal): audit.so calls
	 * it after each note, so that a process that loads a library from
	 * outside later (dlopen) gets its fatal-signal handlers then. */
	void (*noted)(void);
};
#define DLB_SHARE_SLOT "dlb_share_slot"
/* A library ld.so opened from outside the stage, noted at la_objopen: a later
 * dlclose (hwloc's plugins) cannot lose it nor the dependencies it pulled
 * in, which get la_objopen of their own. */
#define DLB_NOTE_LIB 'L'
/* A candidate of ld.so's own search (LD_LIBRARY_PATH, RPATH/RUNPATH,
 * ld.so.cache, default dirs) that the table could not answer: ld.so tried
 * it on the real file system. */
#define DLB_NOTE_SEARCH 'S'

/* Own helpers: audit.c links against nothing, so no memcmp/strlen from libc.
 * The preload's start-up uses them too: a libc function that the process
 * itself never calls lies on a page of libc's text that nothing else has
 * faulted in (strncmp and strlen were one fault each, ~20 us on the VM
 * measured, in every process). */
static inline size_t dlb_strlen(const char *s) { size_t n = 0; while (s[n]) n++; return n; }
static inline int dlb_memeq(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i]) return 0;
	return 1;
}
static inline int dlb_streq(const char *a, const char *b)
{
	while (*a && *a == *b) a++, b++;
	return *a == *b;
}
static inline void dlb_memcpy(char *d, const char *s, size_t n) { for (size_t i = 0; i < n; i++) d[i] = s[i]; }
/* dlb_gnu_hash: the hash of a symbol name in an ELF GNU hash table (DT_GNU_HASH). */
static inline uint32_t dlb_gnu_hash(const char *s)
{
	uint32_t h = 5381;
	for (; *s; s++) h = h * 33 + (unsigned char)*s;
	return h;
}
static inline void dlb_memmove(char *d, const char *s, size_t n)
{
	if (d < s) for (size_t i = 0; i < n; i++) d[i] = s[i];
	else while (n--) d[n] = s[n];
}
static inline int dlb_hasprefix(const char *s, const char *p, size_t pn) { return dlb_memeq(s, p, pn) && (s[pn] == '/' || s[pn] == 0); }

/* FNV-1a 64 is incremental: the hash of a path extended by "/name" continues
 * from the hash of the path, so a component walk hashes each byte once. */
#define DLB_HASH_INIT 14695981039346656037ull
static inline uint64_t dlb_hash_more(uint64_t h, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ull; }
	return h;
}
static inline uint64_t dlb_hash(const char *s, size_t n) { return dlb_hash_more(DLB_HASH_INIT, s, n); }

/* dlb_check validates a mapped table's header once at start-up: the bucket
 * and entry arrays lie inside the file, aligned. Returns 0 if the table is
 * unusable. The arrays themselves are checked where a lookup reads them
 * (dlb_lookup_h): a check of every bucket and entry here touched every page
 * of the table in every process (twice: audit.so and the preload each map
 * it), ~40 minor faults for a 1.3 MB table, where a start-up reads a few
 * dozen pages of it. */
static inline int dlb_check(const void *base, size_t len)
{
	const struct dlb_header *h = base;
	if (len < sizeof *h || !dlb_memeq(h->magic, "DLBTBL1", 8) || h->version != 3 || h->size != len)
		return 0;
	if (h->nbuckets == 0 || (h->nbuckets & (h->nbuckets - 1)) || h->nentries >= h->nbuckets)
		return 0;
	/* Written so that no sum can wrap (offsets come from the file). */
	if (h->buckets > len || 8ull * h->nbuckets > len - h->buckets || (h->buckets & 3))
		return 0;
	if (h->entries > len || 96ull * h->nentries > len - h->entries || (h->entries & 7))
		return 0;
	return 1;
}

static inline const char *dlb_str(const void *base, uint32_t off) { return (const char *)base + off; }

/* dlb_entry_ok: the entry's path (and a symlink's target) lie inside the
 * table and end with a NUL, so that the callers may read them as C strings.
 * A directory's target is its listing, checked where it is read
 * (dlb_listing). */
static inline int dlb_entry_ok(const void *base, const struct dlb_entry *x)
{
	uint64_t len = ((const struct dlb_header *)base)->size;
	if ((uint64_t)x->path + x->path_len >= len || dlb_str(base, x->path)[x->path_len] != 0)
		return 0;
	if (x->type == DLB_DIR) return 1;
	if ((uint64_t)x->target + x->target_len >= len) return 0;
	return x->target_len == 0 || dlb_str(base, x->target)[x->target_len] == 0;
}

/* dlb_listing returns directory entry d's listing and its number of records
 * in *n: NULL (and 0) for anything but a directory, or when the array is not
 * 8-byte aligned or leaves the table. */
static inline const struct dlb_record *dlb_listing(const void *base, const struct dlb_entry *d, uint32_t *n)
{
	uint64_t len = ((const struct dlb_header *)base)->size;
	*n = 0;
	if (!d || d->type != DLB_DIR || (d->target & 7) || d->target > len || 16ull * d->target_len > len - d->target)
		return NULL;
	*n = d->target_len;
	return (const struct dlb_record *)((const char *)base + d->target);
}

/* dlb_record_name returns the name of record r, or NULL when it is empty,
 * leaves the table or lacks its NUL (the caller passes such a record over). */
static inline const char *dlb_record_name(const void *base, const struct dlb_record *r)
{
	uint64_t len = ((const struct dlb_header *)base)->size;
	if (r->name_len == 0 || (uint64_t)r->name + r->name_len >= len) return NULL;
	const char *s = dlb_str(base, r->name);
	return s[r->name_len] == 0 ? s : NULL;
}

/* dlb_lookup_h returns the entry for the exact path p[0:n] whose hash is
 * hash, or NULL. Damage found on the way is not trusted: a bucket that names
 * no entry is passed over, an entry whose strings leave the table never
 * matches, and a probe ends after nbuckets buckets even if none is empty. */
static inline const struct dlb_entry *dlb_lookup_h(const void *base, const char *p, size_t n, uint64_t hash)
{
	const struct dlb_header *h = base;
	const uint32_t *b = (const uint32_t *)((const char *)base + h->buckets);
	const uint32_t *tag = b + h->nbuckets; /* right after the buckets (dlb_check) */
	const struct dlb_entry *e = (const struct dlb_entry *)((const char *)base + h->entries);
	uint32_t mask = h->nbuckets - 1;
	uint32_t i = (uint32_t)hash & mask;
	for (uint64_t k = 0; k <= mask; k++, i = (i + 1) & mask) {
		uint32_t idx = b[i];
		if (idx == 0) return NULL;
		/* The bucket's tag (the hash's high half) passes over a
		 * neighbour's entry without reading it: a miss, or a collision,
		 * touches no page of the entry array (each is a fault in a
		 * process that has not read it yet). */
		if (tag[i] != (uint32_t)(hash >> 32) || idx > h->nentries) continue;
		const struct dlb_entry *x = &e[idx - 1];
		if (x->hash == hash && x->path_len == n && dlb_entry_ok(base, x) && dlb_memeq(dlb_str(base, x->path), p, n))
			return x;
	}
	return NULL;
}

static inline const struct dlb_entry *dlb_lookup(const void *base, const char *p, size_t n)
{
	return dlb_lookup_h(base, p, n, dlb_hash(p, n));
}

/* struct dlb_asks: what the walk asks its caller about the process, which
 * the table cannot tell. The caller passes it to dlb_resolve; a NULL member,
 * or a NULL pointer (the fuzz harness), gives the answer in brackets. The
 * preload (lookup.c) and audit.c pass a static const one, whose calls the
 * compiler makes direct (and inlines where it can).
 *
 * dirty(p, n, h): the process has written into the directory p[0:n]
 * (canonical original path, FNV-1a hash h): the walk leaves anything at or
 * below it to the kernel (read-your-writes: writes.c, and audit.c reads the
 * preload's set) [0]. dirty_any(): some directory is [0]; dirty_all():
 * everything is [0].
 *
 * listing(p, n, h): the listing of the directory p[0:n] changed (a name
 * created or removed in it): the directory itself is left to the kernel,
 * the names in it that the table holds are not [0]. Asked only when
 * dirty_any().
 *
 * realdir(p, n): p[0:n] is known to be a real directory (the preload: the
 * working directory or one of its ancestors, which getcwd names without
 * symlinks), so ".." over it pops it even where the table does not know it
 * (Python joins relative sys.path entries to getcwd() lexically) [0].
 *
 * search(e): may this process search the bundled directory e (the kernel's
 * may_lookup, before every component looked up in it, "." and ".."
 * included)? 1 yes, 0 no (EACCES), -1 cannot tell (the kernel decides) [1].
 * The preload checks e's mode against the process's ids; audit.c does not
 * (ld.so's candidates lie in directories the app could search).
 * Directories the table does not hold as bundled are taken as searchable.
 * search_all(e): e is reached without checking its directories
 * (DLB_FLAG_SEARCHABLE, or no check at all) [1]. */
struct dlb_asks {
	int (*dirty)(const char *p, size_t n, uint64_t h);
	int (*dirty_any)(void);
	int (*dirty_all)(void);
	int (*listing)(const char *p, size_t n, uint64_t h);
	int (*realdir)(const char *p, size_t n);
	int (*search)(const struct dlb_entry *e);
	int (*search_all)(const struct dlb_entry *e);
};

static inline int dlb_ask_dirty(const struct dlb_asks *a, const char *p, size_t n, uint64_t h)
{
	return a && a->dirty ? a->dirty(p, n, h) : 0;
}
static inline int dlb_ask_dirty_any(const struct dlb_asks *a) { return a && a->dirty_any ? a->dirty_any() : 0; }
static inline int dlb_ask_dirty_all(const struct dlb_asks *a) { return a && a->dirty_all ? a->dirty_all() : 0; }
static inline int dlb_ask_listing(const struct dlb_asks *a, const char *p, size_t n, uint64_t h)
{
	return a && a->listing ? a->listing(p, n, h) : 0;
}
static inline int dlb_ask_realdir(const struct dlb_asks *a, const char *p, size_t n)
{
	return a && a->realdir ? a->realdir(p, n) : 0;
}
static inline int dlb_ask_search(const struct dlb_asks *a, const struct dlb_entry *e)
{
	return a && a->search ? a->search(e) : 1;
}
static inline int dlb_ask_search_all(const struct dlb_asks *a, const struct dlb_entry *e)
{
	return a && a->search_all ? a->search_all(e) : 1;
}

/* Outcomes of resolving a path against the table. */
enum { DLB_UNKNOWN = 0, DLB_BUNDLED = 1, DLB_KNOWN_ERR = 2 };

struct dlb_res {
	const struct dlb_entry *ent; /* BUNDLED: the final entry (reg, dir, or symlink when not followed) */
	int err;                     /* KNOWN_ERR: ENOENT, ENOTDIR, ELOOP, ENAMETOOLONG or EACCES (positive errno) */
	size_t len;                  /* BUNDLED: length of out, the canonical original path;
	                                KNOWN_ERR ENOENT: of out up to the absent name */
	int rewritten;               /* UNKNOWN: out holds an equivalent path with the table's symlinks substituted */
	int why;                     /* UNKNOWN: why, when not that the table lacks the path (DLB_WHY_*) */
	size_t why_len;              /* DLB_WHY_WRITTEN: out[0:why_len] is the name marked written */
	int outside;                 /* UNKNOWN: the walk left what the table knows (a component it does not
	                                hold, a name marked written...); 0: out[0:len] is the canonical path,
	                                an external name the table knows */
};

enum { DLB_WHY_LACKS = 0, DLB_WHY_WRITTEN, DLB_WHY_WRITTEN_ALL, DLB_WHY_GROUPS, DLB_WHY_TOO_LONG };

/* dlb_unknown ends a resolution the table cannot decide. When symlinks were
 * followed on the way, out becomes the resolved prefix plus the rest of the
 * path: the kernel resolves it exactly as it would the original, without
 * walking the bundled symlinks on the original file system again (e.g.
 * /usr/lib/ssl/openssl.cnf -> /etc/ssl/openssl.cnf, node-local). */
static inline int dlb_unknown(struct dlb_res *r, char *out, size_t on, const char *tail, size_t tn, int sep, int links)
{
	r->rewritten = 0;
	if (on + 1 + tn >= DLB_PATH_MAX) { r->outside = 1; return 0 /* DLB_UNKNOWN */; }
	if (sep || on == 0) out[on++] = '/';
	dlb_memcpy(out + on, tail, tn);
	out[on + tn] = 0;
	r->len = on + tn;
	r->rewritten = links != 0;
	return 0 /* DLB_UNKNOWN */;
}

#define DLB_ENOENT 2
#define DLB_ENOTDIR 20
#define DLB_ELOOP 40
#define DLB_ENAMETOOLONG 36
#define DLB_EACCES 13
#define DLB_NAME_MAX 255

/* dlb_node_bound: a file name of the user-space half of a kernel driver
 * (NVIDIA's libcuda.so*, libnvidia-*...; the list and its reasons are
 * squash/nodebound.go's, which this must match). The build records them and
 * never bundles them; a name absent from a bundled directory's listing is
 * still not a known ENOENT when it is one of them: the node's next driver
 * has files the image never saw (libnvidia-gpucomp.so.550), which ld.so must
 * find on the node. */
static inline int dlb_node_bound(const char *n, size_t len)
{
	/* One string of NUL-terminated prefixes (no pointer array: no
	 * relocations in the freestanding audit object). */
	static const char pre[] = "libcuda.so\0libcudadebugger.so\0libnvidia-\0libnvcuvid.so\0libnvoptix.so\0"
				  "libGLX_nvidia.so\0libEGL_nvidia.so\0libGLESv2_nvidia.so\0libGLESv1_CM_nvidia.so\0"
				  "libvdpau_nvidia.so\0";
	if (len < 10 || n[0] != 'l' || n[1] != 'i' || n[2] != 'b') return 0;
	for (size_t i = 0; i < sizeof pre - 1;) {
		size_t pn = dlb_strlen(pre + i);
		if (len >= pn && dlb_memeq(n, pre + i, pn)) return 1;
		i += pn + 1;
	}
	return 0;
}

/* dlb_resolve resolves the absolute path in against the table the way the
 * kernel would against the original file system, component by component:
 * symlinks are followed from the table (at most 40), ".." pops a resolved
 * component (the prefix is fully resolved, so that is what the kernel does).
 * A component absent from the table is a known ENOENT when its parent is a
 * bundled directory (whose listing is complete); anything the table cannot
 * decide (an external entry, a prefix outside the image) is DLB_UNKNOWN and
 * the caller passes the original path through. out receives the canonical
 * path ("/" is written as "/"). follow_last: follow a symlink in the last
 * component (stat vs lstat). ask: the caller's answers about the process
 * (struct dlb_asks, above). */
/* dlb_resolve_known is dlb_resolve for a path whose first `known` bytes are
 * a canonical directory path (getcwd's answer: real directories, no
 * symlinks), so ".." over those components is decided lexically even where
 * the table does not know them (the kernel pops a real directory to its
 * parent). */
static __attribute__((unused, noinline)) int dlb_resolve_walk(const void *base, const struct dlb_asks *ask, const char *in, size_t rn, size_t known,
			    int follow_last, char *out, struct dlb_res *r);
static inline int dlb_resolve_known(const void *base, const struct dlb_asks *ask, const char *in, size_t known, int follow_last,
				    char *out, struct dlb_res *r)
{
	size_t rn = dlb_strlen(in);
	r->rewritten = 0;
	r->len = 0;
	r->outside = 1;
	r->why = DLB_WHY_LACKS;
	if (rn >= DLB_PATH_MAX) r->why = DLB_WHY_TOO_LONG;
	if (rn == 0 || in[0] != '/' || rn >= DLB_PATH_MAX) return DLB_UNKNOWN;
	if (known > rn) known = 0;
	if (dlb_ask_dirty_all(ask)) { r->why = DLB_WHY_WRITTEN_ALL; return DLB_UNKNOWN; }
	/* Fast path: the path as given is an entry (keys are clean paths, and
	 * the format has no entry below a non-directory, so every ancestor of a
	 * key is a directory the kernel would walk through). Not when the
	 * process wrote somewhere: an ancestor may be dirty. */
	const struct dlb_entry *exact = dlb_ask_dirty_any(ask) ? NULL : dlb_lookup(base, in, rn);
	if (exact && !dlb_ask_search_all(ask, exact)) exact = NULL; /* walk: a directory on the way may refuse us */
	if (exact && (exact->type == DLB_REG || exact->type == DLB_DIR)) {
		dlb_memcpy(out, in, rn + 1);
		r->ent = exact;
		r->len = rn;
		return DLB_BUNDLED;
	}
	if (exact && exact->type == DLB_MISSING) { r->err = DLB_ENOENT; return DLB_KNOWN_ERR; }
	if (exact && exact->type == DLB_EXTERNAL) return DLB_UNKNOWN;
	return dlb_resolve_walk(base, ask, in, rn, known, follow_last, out, r);
}

/* The walk, for paths that are not an entry as given. A function of its own
 * with its two path buffers: the fast path above stays a small stack frame
 * (a frame's far end is touched by register spills even when its buffers
 * are not, and every new stack page costs a process a fault). */
static int dlb_resolve_walk(const void *base, const struct dlb_asks *ask, const char *in, size_t rn, size_t known,
			    int follow_last, char *out, struct dlb_res *r)
{
	char rest[DLB_PATH_MAX];
	size_t on = 0, p = 0;
	size_t kd = 0; /* out[0:kd] is made of real directories (from the known prefix) */
	size_t xd = 0; /* out[0:xd] ends with an external entry the table knows is a directory */
	int links = 0;
	int seen_unknown = 0; /* a component the table does not hold was walked through */
	dlb_memcpy(rest, in, rn + 1);
	uint64_t oh = DLB_HASH_INIT; /* hash of out[0:on] */
	const struct dlb_entry *root = dlb_lookup(base, "/", 1);
	const struct dlb_entry *parent = root, *cur = root;
	for (;;) {
		while (p < rn && rest[p] == '/') p++;
		if (p >= rn) break;
		size_t q = p;
		while (q < rn && rest[q] != '/') q++;
		size_t cn = q - p;
		size_t after = q;
		while (after < rn && rest[after] == '/') after++;
		int is_last = after >= rn, trailing_slash = is_last && q < rn;
		/* Every component, "." and ".." too, is looked up in cur: the
		 * kernel checks search permission on it first (may_lookup). */
		if (cur && cur->type == DLB_DIR && !(cur->mode & 1)) {
			int s = dlb_ask_search(ask, cur);
			if (s == 0) { r->err = DLB_EACCES; return DLB_KNOWN_ERR; }
			if (s < 0) { r->why = DLB_WHY_GROUPS; return DLB_UNKNOWN; }
		}
		if (cn == 1 && rest[p] == '.') {
			/* "x/." requires x to be a directory: dropping the "." is only
			 * right where it is known to be one (a bundled directory, an
			 * external one, the root, a real directory of the cwd);
			 * otherwise the kernel gets the rest with the "." kept. */
			if ((cur && cur->type != DLB_DIR) || (!cur && on > 0 && on != xd && on > kd && !dlb_ask_realdir(ask, out, on))) {
				seen_unknown = 1;
				return dlb_unknown(r, out, on, rest + p, rn - p, 1, links);
			}
			p = q;
			continue;
		}
		if (cn == 2 && rest[p] == '.' && rest[p + 1] == '.') {
			/* Popping a directory the table knows is what the kernel does
			 * (a directory has one parent), whatever the prefix above it.
			 * Popping a component the table does not know could be wrong
			 * (natively it may be a symlink): leave that to the kernel,
			 * unless it is one of the known real directories. */
			if (on > 0 && on > kd && on != xd && (!cur || cur->type != DLB_DIR) && !dlb_ask_realdir(ask, out, on))
				return dlb_unknown(r, out, on, rest + p, rn - p, 1, links);
			xd = 0;
			while (on > 0 && out[on - 1] != '/') on--;
			if (on > 0) on--;
			if (kd > on) kd = on;
			oh = dlb_hash(out, on);
			cur = parent = on ? dlb_lookup_h(base, out, on, oh) : root; /* NULL: a prefix outside the image */
			if (!cur) seen_unknown = 1;
			p = q;
			continue;
		}
		if (on + 1 + cn >= DLB_PATH_MAX) return DLB_UNKNOWN;
		parent = cur;
		uint64_t prev_oh = oh;
		out[on] = '/';
		dlb_memcpy(out + on + 1, rest + p, cn);
		oh = dlb_hash_more(oh, out + on, 1 + cn);
		on += 1 + cn;
		/* Written into by this process: the kernel decides from here. */
		if (dlb_ask_dirty(ask, out, on, oh)) {
			r->why = DLB_WHY_WRITTEN;
			r->why_len = on;
			return dlb_unknown(r, out, on - 1 - cn, rest + p, rn - p, 1, links);
		}
		if (q <= known && kd == on - 1 - cn) kd = on;
		cur = dlb_lookup_h(base, out, on, oh);
		if (!cur) {
			if (parent && parent->type == DLB_DIR && !(is_last && dlb_node_bound(rest + p, cn))) {
				/* The file system's lookup refuses a name longer than
				 * NAME_MAX before it searches the directory. */
				r->err = cn > DLB_NAME_MAX ? DLB_ENAMETOOLONG : DLB_ENOENT;
				r->len = on;
				return DLB_KNOWN_ERR;
			}
			/* A prefix outside the image (e.g. /home above a bundled tree):
			 * keep walking, deeper components may be entries (the table keys
			 * are the paths as the app used them). */
			seen_unknown = 1;
			if (is_last) return dlb_unknown(r, out, on, rest + q, rn - q, 0, links);
			p = q;
			continue;
		}
		switch (cur->type) {
		case DLB_MISSING:
			r->err = DLB_ENOENT;
			r->len = on;
			return DLB_KNOWN_ERR;
		case DLB_EXTERNAL:
			/* Exists, not bundled (e.g. /tmp, listed in / but node-local).
			 * Entries below it can only exist if it is a directory (the
			 * format has nothing below a non-directory): walk through it as
			 * a prefix outside the image. */
			if (is_last) {
				r->outside = seen_unknown;
				return dlb_unknown(r, out, on, rest + q, rn - q, 0, links);
			}
			/* Its mode says directory (a listing's d_type, or lstat at
			 * build): ".." right after it pops it, as the kernel would
			 * (its table path is a real path: no symlink above it). */
			if ((cur->mode & 0170000) == 0040000) xd = on;
			cur = NULL;
			p = q;
			continue;
		case DLB_REG:
			if (!is_last || trailing_slash) { r->err = DLB_ENOTDIR; return DLB_KNOWN_ERR; }
			break;
		case DLB_DIR:
			break;
		case DLB_SYMLINK:
			if (is_last && !follow_last && !trailing_slash) break;
			if (++links > 40) { r->err = DLB_ELOOP; return DLB_KNOWN_ERR; }
			{
				const char *t = dlb_str(base, cur->target);
				size_t tn = cur->target_len, an = rn - q;
				if (tn == 0 || tn + an >= DLB_PATH_MAX) return DLB_UNKNOWN;
				/* rest = target + what follows the link, in place */
				dlb_memmove(rest + tn, rest + q, an + 1);
				dlb_memcpy(rest, t, tn);
				rn = tn + an;
				p = 0;
				known = 0; /* rest is the link's text now */
				if (t[0] == '/') { on = 0; oh = DLB_HASH_INIT; cur = parent = root; }
				else { on -= 1 + cn; oh = prev_oh; cur = parent; }
				/* out is cut back: what it knew of the cut part goes. */
				if (kd > on) kd = on;
				if (xd > on) xd = 0;
				continue;
			}
		default:
			return DLB_UNKNOWN;
		}
		p = q;
	}
	if (on == 0) { /* the root itself */
		if (!root || root->type != DLB_DIR) return DLB_UNKNOWN;
		out[0] = '/'; on = 1; cur = root;
	}
	out[on] = 0;
	if (!cur || cur->type == DLB_MISSING || cur->type == DLB_EXTERNAL) {
		r->outside = seen_unknown; /* else: "/tmp/." after an external directory */
		return dlb_unknown(r, out, on, "", 0, 0, links);
	}
	/* A directory whose listing the process changed: its own attributes
	 * changed too (mtime, nlink...); the kernel answers it. */
	if (dlb_ask_dirty_any(ask) && dlb_ask_listing(ask, out, on, dlb_hash(out, on))) {
		r->why = DLB_WHY_WRITTEN;
		r->why_len = on;
		return dlb_unknown(r, out, on, "", 0, 0, links);
	}
	r->ent = cur;
	r->len = on;
	return DLB_BUNDLED;
}

static inline int dlb_resolve(const void *base, const struct dlb_asks *ask, const char *in, int follow_last, char *out,
			      struct dlb_res *r)
{
	return dlb_resolve_known(base, ask, in, 0, follow_last, out, r);
}

#endif

/* writes.c — read-your-writes: the calls that write run as they are, then
 * mark what they changed in the dirty set, which table.h's walk consults
 * (struct dlb_asks) and children inherit (DLBUNDLE_DIRTY). */
#include "shim_state.h"

/* The dirty set: DIRTY_MAX directories (shim_state.h), their names in
 * dirty_env, which is also the environment string children inherit. */
#define DIRTY_MAX 64
struct dirty_dir { uint64_t hash; uint32_t off, len, kind; };
static struct dirty_dir dirty_set[DIRTY_MAX] DLB_COLD;
unsigned dirty_n;  /* entries below it are immutable (release/acquire) */
int dirty_all;     /* "/" was written into, or the set overflowed */
char dirty_env[32768] = "DLBUNDLE_DIRTY=";
size_t dirty_end = 15; /* strlen(dirty_env) */

/* ---- the dirty set ----
 *
 * Two kinds of marks (docs/loader.md, "Read-your-writes"): a name (its
 * canonical path) whose entry, and everything below it, the process
 * changed -- created, removed, renamed, written, chmod-ed...: the resolver
 * leaves it and all below it to the kernel (dirty, in struct dlb_asks);
 * and a directory whose listing changed (a name created or removed in it):
 * stat and opendir of the directory itself go to the kernel (listing, in
 * struct dlb_asks), the names in it that the table holds are still
 * answered, and a name created there is a mark of the first kind. In DLBUNDLE_DIRTY a listing mark is written
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
int dirty_is(const char *p, size_t n, uint64_t h) { return dirty_kind_is(p, n, h, MARK_NAME); }
int listing_is(const char *p, size_t n, uint64_t h) { return dirty_kind_is(p, n, h, MARK_LISTING); }

/* dirty_covered: p[0:n] or one of its ancestors is marked as a name. */
int dirty_covered(const char *p, size_t n)
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
size_t dirty_cover(const char *p, size_t n)
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
 * child, however started, inherits the current set. Runs in shim_init,
 * with the slot of the first DLBUNDLE_DIRTY= entry (NULL: none). */
void dirty_inherit(char **e)
{
	if (e) {
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
	int rc = shim_resolve(abs, known < n ? known : 0, 1, out, &r);
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
void marked(long rc, int dirfd, const char *path, int follow_last, int what)
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
			int rr = shim_resolve(canon, 0, 1, t, &r);
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

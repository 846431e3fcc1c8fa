/* realpath.c — readlink (and /proc links to staged files shown as the
 * originals), realpath and its _FORTIFY_SOURCE variants: glibc's algorithm
 * with the table answering its system calls. */
#include "shim_state.h"

/* ---- readlink, realpath ---- */

/* proc_readlink: links under /proc (self/exe, self/fd/N, ...) name staged
 * files when the app runs from the stage; show the original names. */
ssize_t proc_readlink(int dirfd, const char *path, char *buf, size_t size)
{
	char tmp[DLB_PATH_MAX + 1024];
	long n = syscall(SYS_readlinkat, dirfd, path, tmp, sizeof tmp);
	if (n < 0) return -1; /* syscall() has set errno */
	/* Under the image's own ld.so (exec started it with the program as its
	 * argument: docs/exec.md, "Images and nodes") the kernel's exe is the
	 * staged ld.so; exec names the program in DLBUNDLE_EXE. Only when the
	 * exe is a staged ld-*: ld.so run by hand on a node program, or a staged
	 * program exec'd by this one, stays as natively. */
	if ((!strcmp(path, "/proc/self/exe") || !strcmp(path, "/proc/thread-self/exe")) && (size_t)n > stage_root_len &&
	    (size_t)n < sizeof tmp && !memcmp(tmp, stage_root, stage_root_len) && tmp[stage_root_len] == '/') {
		tmp[n] = 0;
		const char *base = strrchr(tmp, '/') + 1, *prog = getenv("DLBUNDLE_EXE");
		size_t pn = prog ? strlen(prog) : 0;
		if (!strncmp(base, "ld-", 3) && pn > 0 && prog[0] == '/' && pn < sizeof tmp) {
			memcpy(tmp, prog, pn);
			n = (long)pn;
		}
	}
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
int in_stage(const char *p, size_t n)
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
	if (!e && s == RP_UNDECIDED && !shim_dirty_all()) {
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

int rp_walk(const char *path, char *res, int *native, char *first)
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
		if (shim_resolve(path, 0, 1, res, &r) == DLB_BUNDLED) return 0;
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
int cwd_prefix(const char *p, size_t n)
{
	char cwd[DLB_PATH_MAX];
	long k = syscall(SYS_getcwd, cwd, sizeof cwd);
	if (k <= 1 || cwd[0] != '/' || (size_t)k - 1 < n) return 0;
	return !memcmp(cwd, p, n) && (cwd[n] == '/' || cwd[n] == 0);
}


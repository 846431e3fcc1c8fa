/* listings.c — a bundled directory's listing from the table: opendir, the
 * readdir family, getdents64, fchdir, and glibc's own walks over them (glob,
 * scandir). */
#include "shim_state.h"

/* ---- opendir: the directory's listing from the table (the readdir family,
 * below) ---- */
DIR *opendir(const char *path)
{
	char canon[DLB_PATH_MAX];
	struct dlb_res r;
	const char *asked = path;
	switch (lookup("opendir", AT_FDCWD, &path, 1, canon, &r)) {
	case DLB_BUNDLED:
		if (r.ent->type != DLB_DIR) { errno = ENOTDIR; return NULL; }
		if (!(r.ent->mode & 04)) { /* the listing is ours; the original may not be readable */
			int a = access_check(r.ent, R_OK, 1);
			if (a == ACCESS_UNDECIDED) { report_dir_open(canon, r.len, 1); break; }
			if (a != 0) return NULL;
		}
		{
			DIR *d = dir_open(r.ent, canon, r.len);
			if (d != (DIR *)-1) return d; /* a stream, or NULL with errno */
		}
		report_dir_open(canon, r.len, 1); /* its listing read from the original */
		path = asked; /* no free stream slot: the original directory */
		break;
	case DLB_KNOWN_ERR:
		errno = r.err;
		return NULL;
	}
	return real_opendir(path);
}


/* ---- the readdir family: a bundled directory's listing from the table ----
 *
 * opendir of a bundled directory opens its staged copy, one real directory,
 * and makes a glibc DIR of it with fdopendir, so that dirfd(), fstat (the
 * original's attributes, fstat_fix), fchdir and openat(dirfd(d), name) (the
 * name looked up as the original's, lookup) behave as on the original. The
 * stream never reads that copy: readdir, readdir64, readdir(64)_r, telldir,
 * seekdir, rewinddir and getdents64 on its fd serve the directory's listing
 * from the table: the names, "." and ".." included, in the order the
 * build's read of the original returned them (native order), each with the
 * d_type and d_ino of that read. fdopendir of a descriptor of a staged
 * directory (a dup of dirfd(d), openat(dirfd(d), "sub", O_DIRECTORY)) serves
 * it the same way.
 *
 * The streams are kept in a fixed table (DIR_TRACK slots, claimed with a
 * compare-and-swap; no allocation but glibc's own DIR). When every slot is
 * taken, opendir opens the original directory: the native answer, from the
 * file system. A stream's position is its record index: telldir returns it
 * (natively an opaque cookie of the file system), seekdir takes it, d_off
 * is the next one. As with glibc, one stream is not for two threads at once.
 */
#define DIR_TRACK 128
#define DIR_CLAIMED ((DIR *)-1)
struct dir_stream {
	DIR *d; /* NULL: free; DIR_CLAIMED: being set up */
	const struct dlb_entry *e;
	const struct dlb_record *rec;
	uint32_t n, pos; /* records, and the next one */
	int fd;          /* dirfd(d): the staged copy ... */
	dev_t dev;       /* ... which is still it when fstat says so */
	ino_t ino;
	struct dirent64 de; /* readdir's answer (struct dirent has its layout here) */
};
_Static_assert(sizeof(struct dirent) == sizeof(struct dirent64) && offsetof(struct dirent, d_name) == offsetof(struct dirent64, d_name),
	       "readdir and readdir64 share one record (LP64 glibc)");
static struct dir_stream dir_streams[DIR_TRACK] DLB_COLD;
static unsigned dir_streams_open; /* slots in use: 0 skips every search */

static struct dir_stream *stream_of(DIR *d)
{
	if (!d || !__atomic_load_n(&dir_streams_open, __ATOMIC_ACQUIRE)) return NULL;
	for (int i = 0; i < DIR_TRACK; i++)
		if (__atomic_load_n(&dir_streams[i].d, __ATOMIC_ACQUIRE) == d) return &dir_streams[i];
	return NULL;
}

/* stream_of_fd finds the stream whose fd is fd, if fd still names its staged
 * directory (an fd closed behind the stream's back may have been reused). */
static struct dir_stream *stream_of_fd(int fd, const struct stat *known)
{
	if (fd < 0 || !__atomic_load_n(&dir_streams_open, __ATOMIC_ACQUIRE)) return NULL;
	for (int i = 0; i < DIR_TRACK; i++) {
		struct dir_stream *s = &dir_streams[i];
		DIR *d = __atomic_load_n(&s->d, __ATOMIC_ACQUIRE);
		if (!d || d == DIR_CLAIMED || s->fd != fd) continue;
		struct stat st;
		if (!known) {
			if (syscall(SYS_fstat, fd, &st) != 0) return NULL;
			known = &st;
		}
		return known->st_dev == s->dev && known->st_ino == s->ino ? s : NULL;
	}
	return NULL;
}

static struct dir_stream *stream_claim(void)
{
	for (int i = 0; i < DIR_TRACK; i++) {
		DIR *none = NULL;
		if (__atomic_compare_exchange_n(&dir_streams[i].d, &none, DIR_CLAIMED, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			__atomic_add_fetch(&dir_streams_open, 1, __ATOMIC_ACQ_REL);
			return &dir_streams[i];
		}
	}
	return NULL;
}

static void stream_release(struct dir_stream *s)
{
	__atomic_store_n(&s->d, NULL, __ATOMIC_RELEASE);
	__atomic_sub_fetch(&dir_streams_open, 1, __ATOMIC_ACQ_REL);
}

/* stream_serve makes s (claimed) serve directory e's listing on d, whose fd
 * is the staged copy fd with attributes st. */
static void stream_serve(struct dir_stream *s, DIR *d, int fd, const struct stat *st, const struct dlb_entry *e)
{
	s->e = e;
	s->rec = dlb_listing(table, e, &s->n);
	s->pos = 0;
	s->fd = fd;
	s->dev = st->st_dev;
	s->ino = st->st_ino;
	__atomic_store_n(&s->d, d, __ATOMIC_RELEASE);
}

/* dir_open opens a stream on bundled directory e (canon[0:n], its canonical
 * original path): NULL with errno as the original would fail (EACCES from the
 * table's mode and owner, since the staged copy is ours), or (DIR *)-1 when
 * the caller should open the original (no free slot, or the kernel must
 * decide the permission). */
DIR *dir_open(const struct dlb_entry *e, const char *canon, size_t n)
{
	char sp[DLB_PATH_MAX + 1024];
	switch (readable_original(e)) { /* opendir needs read permission on the original */
	case -1: return (DIR *)-1;
	case 0: return NULL;
	}
	if (staged(sp, sizeof sp, canon, n) != 0) return (DIR *)-1;
	struct dir_stream *s = stream_claim();
	if (!s) return (DIR *)-1;
	/* the flags glibc's opendir uses */
	int fd = (int)syscall(SYS_openat, AT_FDCWD, sp, O_RDONLY | O_NONBLOCK | O_DIRECTORY | O_CLOEXEC);
	struct stat st;
	DIR *d = NULL;
	if (fd >= 0 && syscall(SYS_fstat, fd, &st) == 0) d = real_fdopendir(fd);
	if (!d) {
		int err = errno;
		if (fd >= 0) syscall(SYS_close, fd);
		stream_release(s);
		errno = err;
		return NULL;
	}
	stream_serve(s, d, fd, &st, e);
	return d;
}

/* staged_dir_entry: the bundled directory whose staged copy fd is (st: its
 * fstat), found by the path the kernel gives for it; NULL for anything else. */
static const struct dlb_entry *staged_dir_entry(int fd, const struct stat *st)
{
	if (!table || !stage_dev || st->st_dev != stage_dev || !S_ISDIR(st->st_mode)) return NULL;
	char l[32], p[DLB_PATH_MAX + 1024];
	snprintf(l, sizeof l, "/proc/self/fd/%d", fd);
	long n = syscall(SYS_readlinkat, AT_FDCWD, l, p, sizeof p - 1);
	if (n <= 0 || (size_t)n < stage_root_len || memcmp(p, stage_root, stage_root_len) != 0) return NULL;
	p[n] = 0;
	const char *orig = p + stage_root_len;
	if (!*orig) orig = "/"; /* STAGE/root itself is "/" */
	else if (*orig != '/') return NULL;
	const struct dlb_entry *e = dlb_lookup(table, orig, strlen(orig));
	return e && e->type == DLB_DIR ? e : NULL;
}

DIR *fdopendir(int fd)
{
	ensure_init();
	DIR *d = real_fdopendir(fd);
	struct stat st;
	if (!d || !table || syscall(SYS_fstat, fd, &st) != 0) return d;
	const struct dlb_entry *e = staged_dir_entry(fd, &st);
	struct dir_stream *s = e ? stream_claim() : NULL;
	if (s) stream_serve(s, d, fd, &st, e);
	return d;
}

/* dir_fd_path copies the original path of the directory whose served
 * stream's fd is fd into out; 0 when fd is no such fd. */
size_t dir_fd_path(int fd, char *out, size_t cap)
{
	struct dir_stream *s = stream_of_fd(fd, NULL);
	if (!s || s->e->path_len >= cap) return 0;
	memcpy(out, dlb_str(table, s->e->path), s->e->path_len + 1);
	return s->e->path_len;
}

/* dir_fd_entry: fstat of a served stream's fd shows its directory's entry. */
const struct dlb_entry *dir_fd_entry(int fd, const struct stat *st)
{
	struct dir_stream *s = S_ISDIR(st->st_mode) ? stream_of_fd(fd, st) : NULL;
	return s ? s->e : NULL;
}

/* record_ino: the d_ino of record k. Images before listings kept inode
 * numbers have 0 there: the directory's own for ".", the name's own row,
 * else the staged copy's (".." of a directory whose parent is not in the
 * table). */
static uint64_t record_ino(struct dir_stream *s, uint32_t k, const char *name)
{
	uint64_t ino = s->rec[k].ino;
	size_t nn = s->rec[k].name_len;
	if (ino) return ino;
	if (nn == 1 && name[0] == '.') ino = s->e->ino;
	else if (!(nn == 2 && name[0] == '.' && name[1] == '.')) {
		char p[DLB_PATH_MAX];
		size_t dn = s->e->path_len;
		if (dn + 1 + nn < sizeof p) {
			memcpy(p, dlb_str(table, s->e->path), dn);
			if (dn > 1) p[dn++] = '/';
			memcpy(p + dn, name, nn);
			const struct dlb_entry *c = dlb_lookup(table, p, dn + nn);
			if (c) ino = c->ino;
		}
	}
	struct stat st;
	if (!ino && syscall(SYS_newfstatat, s->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) ino = st.st_ino;
	return ino;
}

/* other_type: the d_type of a name the image lists as "other" (a socket,
 * fifo or device: DT_UNKNOWN in the table), from an lstat of the original,
 * which the image does not hold (one call on the file system per such name;
 * the stage has nothing there). */
static unsigned char other_type(struct dir_stream *s, const char *name, size_t nn)
{
	char p[DLB_PATH_MAX];
	size_t dn = s->e->path_len;
	struct stat st;
	if (dn + 1 + nn >= sizeof p) return DT_UNKNOWN;
	memcpy(p, dlb_str(table, s->e->path), dn);
	if (dn > 1) p[dn++] = '/';
	memcpy(p + dn, name, nn + 1);
	if (syscall(SYS_newfstatat, AT_FDCWD, p, &st, AT_SYMLINK_NOFOLLOW) != 0) return DT_UNKNOWN;
	return (unsigned char)IFTODT(st.st_mode);
}

/* stream_next fills out with the next record of s (a kernel-style record:
 * d_reclen as getdents64 sets it); 0 at the end. */
static int stream_next(struct dir_stream *s, struct dirent64 *out)
{
	while (s->pos < s->n) {
		uint32_t k = s->pos++;
		const char *name = dlb_record_name(table, &s->rec[k]);
		if (!name) continue; /* damaged: passed over */
		size_t nn = s->rec[k].name_len;
		out->d_ino = record_ino(s, k, name);
		out->d_off = (off64_t)k + 1;
		out->d_reclen = (unsigned short)((offsetof(struct dirent64, d_name) + nn + 1 + 7) & ~(size_t)7);
		out->d_type = s->rec[k].d_type ? s->rec[k].d_type : other_type(s, name, nn);
		memcpy(out->d_name, name, nn);
		out->d_name[nn] = 0;
		return 1;
	}
	return 0;
}

struct dirent64 *readdir64(DIR *d)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	if (!s) return real_readdir64(d);
	return stream_next(s, &s->de) ? &s->de : NULL; /* the end: NULL, errno untouched */
}
struct dirent *readdir(DIR *d)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	if (!s) return real_readdir(d);
	return stream_next(s, &s->de) ? (struct dirent *)&s->de : NULL;
}
int readdir64_r(DIR *d, struct dirent64 *entry, struct dirent64 **result)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	if (!s) return real_readdir64_r(d, entry, result);
	*result = stream_next(s, entry) ? entry : NULL;
	return 0;
}
int readdir_r(DIR *d, struct dirent *entry, struct dirent **result)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	if (!s) return real_readdir_r(d, entry, result);
	*result = stream_next(s, (struct dirent64 *)entry) ? entry : NULL;
	return 0;
}
long telldir(DIR *d)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	return s ? (long)s->pos : real_telldir(d);
}
void seekdir(DIR *d, long loc)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	if (!s) { real_seekdir(d, loc); return; }
	s->pos = loc < 0 ? 0 : loc > (long)s->n ? s->n : (uint32_t)loc;
}
void rewinddir(DIR *d)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	if (!s) { real_rewinddir(d); return; }
	s->pos = 0;
}
int closedir(DIR *d)
{
	ensure_init();
	struct dir_stream *s = stream_of(d);
	if (s) stream_release(s); /* before glibc frees d: its address may be reused */
	return real_closedir(d);
}

/* getdents64 (glibc >= 2.30) on a served stream's fd: the same records as
 * the kernel lays them out (struct linux_dirent64), from the stream's
 * position; EINVAL when not even the next one fits, as the kernel. */
ssize_t getdents64(int fd, void *buf, size_t len)
{
	ensure_init();
	struct dir_stream *s = stream_of_fd(fd, NULL);
	if (!s) return real_getdents64 ? real_getdents64(fd, buf, len) : syscall(SYS_getdents64, fd, buf, len);
	struct dirent64 de;
	size_t o = 0;
	for (uint32_t at = s->pos; stream_next(s, &de); at = s->pos) {
		if (o + de.d_reclen > len) {
			s->pos = at; /* keep it for the next call */
			break;
		}
		memcpy((char *)buf + o, &de, offsetof(struct dirent64, d_name) + strlen(de.d_name) + 1);
		o += de.d_reclen;
	}
	if (o == 0 && s->pos < s->n) return set_errno(EINVAL);
	return (ssize_t)o;
}

/* fchdir to a served stream's fd: the process's working directory becomes
 * the original directory (one chdir, by its path), so that getcwd, relative
 * lookups and children see it as natively, not the staged copy. If the
 * original cannot be entered, the staged copy is. */
int fchdir(int fd)
{
	ensure_init();
	char p[DLB_PATH_MAX];
	if (dir_fd_path(fd, p, sizeof p) && syscall(SYS_chdir, p) == 0) return 0;
	return real_fchdir ? real_fchdir(fd) : (int)syscall(SYS_fchdir, fd);
}

/* ---- glob, scandir: glibc's own directory walks, over the readdir above ----
 *
 * glibc's scandir and glob open and read directories with internal calls
 * that no preload sees, so they would list the original (the native answer,
 * but on the shared file system). scandir, scandir64 and scandirat are made
 * here over opendir/readdir above, as glibc makes them (dirent/scandir-tail-
 * common.c, 2.36: the same errno rules, allocations and qsort). glob and
 * glob64 call glibc's with GLOB_ALTDIRFUNC and the functions above, which
 * glob (posix/glob.c) uses exactly where it would use its own, and the flag
 * is taken off gl_flags again; not on glibc < 2.27, whose glob with that flag
 * checks a pattern without wildcards with gl_stat, not lstat (a dangling
 * symlink would differ). An app's own GLOB_ALTDIRFUNC is left alone. nftw
 * and fts walk by descriptors (openat, getdents64 inside glibc): they still
 * list the original. */
static int glob_alt = -1; /* glibc's glob takes gl_lstat with GLOB_ALTDIRFUNC (>= 2.27) */
static int glob_alt_ok(void)
{
	if (glob_alt < 0) {
		int maj = 0, min = 0;
		glob_alt = sscanf(gnu_get_libc_version(), "%d.%d", &maj, &min) == 2 && (maj > 2 || (maj == 2 && min >= 27));
	}
	return glob_alt;
}

/* glob's callbacks take void * streams */
static void *glob_opendir(const char *p) { return opendir(p); }
static struct dirent *glob_readdir(void *d) { return readdir(d); }
static struct dirent64 *glob_readdir64(void *d) { return readdir64(d); }
static void glob_closedir(void *d) { closedir(d); }

int glob(const char *pattern, int flags, int (*errfunc)(const char *, int), glob_t *pglob)
{
	ensure_init();
	if (!table || !pglob || (flags & GLOB_ALTDIRFUNC) || !glob_alt_ok()) return real_glob(pattern, flags, errfunc, pglob);
	pglob->gl_opendir = glob_opendir;
	pglob->gl_readdir = glob_readdir;
	pglob->gl_closedir = glob_closedir;
	pglob->gl_lstat = lstat;
	pglob->gl_stat = stat;
	int rc = real_glob(pattern, flags | GLOB_ALTDIRFUNC, errfunc, pglob);
	pglob->gl_flags &= ~GLOB_ALTDIRFUNC;
	return rc;
}
int glob64(const char *pattern, int flags, int (*errfunc)(const char *, int), glob64_t *pglob)
{
	ensure_init();
	if (!table || !pglob || (flags & GLOB_ALTDIRFUNC) || !glob_alt_ok()) return real_glob64(pattern, flags, errfunc, pglob);
	pglob->gl_opendir = glob_opendir;
	pglob->gl_readdir = glob_readdir64;
	pglob->gl_closedir = glob_closedir;
	pglob->gl_lstat = lstat64;
	pglob->gl_stat = stat64;
	int rc = real_glob64(pattern, flags | GLOB_ALTDIRFUNC, errfunc, pglob);
	pglob->gl_flags &= ~GLOB_ALTDIRFUNC;
	return rc;
}

/* scandir_tail is glibc's: select's errno is not an error, a failed
 * allocation ends the list with the error (all freed), the list is sorted
 * with cmp. struct dirent is struct dirent64 here (LP64). */
static int scandir_tail(DIR *dp, struct dirent64 ***namelist, int (*sel)(const struct dirent64 *),
			int (*cmp)(const struct dirent64 **, const struct dirent64 **))
{
	if (!dp) return -1;
	int save = errno;
	errno = 0;
	struct dirent64 **v = NULL, *d;
	size_t vsize = 0, cnt = 0;
	while ((d = readdir64(dp))) {
		if (sel) {
			int selected = sel(d);
			errno = 0;
			if (!selected) continue;
		}
		if (cnt == vsize) {
			vsize = vsize ? 2 * vsize : 10;
			struct dirent64 **nv = realloc(v, vsize * sizeof *v);
			if (!nv) break;
			v = nv;
		}
		size_t dsize = d->d_reclen; /* glibc: &d->d_name[_D_ALLOC_NAMLEN (d)] - (char *) d */
		struct dirent64 *x = malloc(dsize);
		if (!x) break;
		v[cnt++] = memcpy(x, d, dsize);
		errno = 0;
	}
	if (errno != 0) {
		int e = errno;
		while (cnt > 0) free(v[--cnt]);
		free(v);
		closedir(dp);
		errno = e;
		return -1;
	}
	closedir(dp);
	if (cmp) qsort(v, cnt, sizeof *v, (int (*)(const void *, const void *))cmp);
	*namelist = v;
	errno = save;
	return (int)cnt;
}

int scandir64(const char *dir, struct dirent64 ***namelist, int (*sel)(const struct dirent64 *),
	      int (*cmp)(const struct dirent64 **, const struct dirent64 **))
{
	return scandir_tail(opendir(dir), namelist, sel, cmp);
}
int scandir(const char *dir, struct dirent ***namelist, int (*sel)(const struct dirent *),
	    int (*cmp)(const struct dirent **, const struct dirent **))
{
	return scandir64(dir, (struct dirent64 ***)namelist, (int (*)(const struct dirent64 *))sel,
			 (int (*)(const struct dirent64 **, const struct dirent64 **))cmp);
}
/* scandirat: glibc's __opendirat is openat(dfd, dir, the flags of opendir)
 * and a stream on the fd; below a served stream's fd, the original path's
 * opendir (served from the table when bundled). */
int scandirat64(int dfd, const char *dir, struct dirent64 ***namelist, int (*sel)(const struct dirent64 *),
		int (*cmp)(const struct dirent64 **, const struct dirent64 **))
{
	if (dfd == AT_FDCWD || (dir && dir[0] == '/')) return scandir64(dir, namelist, sel, cmp);
	char p[DLB_PATH_MAX];
	size_t n = dir && dir[0] ? dir_fd_path(dfd, p, sizeof p) : 0;
	if (n && n + 1 + strlen(dir) < sizeof p) { /* below a served stream's directory: by its path */
		if (n > 1) p[n++] = '/';
		memcpy(p + n, dir, strlen(dir) + 1);
		return scandir64(p, namelist, sel, cmp);
	}
	int fd = openat(dfd, dir, O_RDONLY | O_NONBLOCK | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) return -1;
	DIR *dp = fdopendir(fd);
	if (!dp) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return scandir_tail(dp, namelist, sel, cmp);
}
int scandirat(int dfd, const char *dir, struct dirent ***namelist, int (*sel)(const struct dirent *),
	      int (*cmp)(const struct dirent **, const struct dirent **))
{
	return scandirat64(dfd, dir, (struct dirent64 ***)namelist, (int (*)(const struct dirent64 *))sel,
			   (int (*)(const struct dirent64 **, const struct dirent64 **))cmp);
}


/* statopen.c — the stat family, access, open and fopen (and /proc/self/maps
 * served with original names), statfs, and fstat of a staged fd: answered
 * from the table, or the staged copy opened. */
#include "shim_state.h"

/* ---- stat ---- */

/* glibc < 2.33 exports no stat/lstat/fstatat functions (only __xstat & co.,
 * which we answer ourselves), and glibc < 2.28 no statx: pass through with
 * the system call then. On x86_64 and aarch64 struct stat is the kernel's. */
static int sys_fstatat(int dirfd, const char *path, void *st, int flags)
{
	long rc = syscall(SYS_newfstatat, dirfd, path, st, flags);
	return rc < 0 ? -1 : 0; /* syscall() already set errno */
}

/* st_blocks as the build recorded it; images without it: ext4-like values,
 * 4 KiB blocks, and none for a symlink short enough to live in the inode
 * ("fast" symlink). */
static long long blocks_of(const struct dlb_entry *e)
{
	if (e->flags & DLB_FLAG_BLOCKS) return e->blocks;
	if ((e->mode & S_IFMT) == S_IFLNK && e->size < 60) return 0;
	return ((e->size + 4095) / 4096) * 8;
}

static void fill_stat(struct stat *st, const struct dlb_entry *e)
{
	memset(st, 0, sizeof *st);
	st->st_dev = (dev_t)e->dev;
	st->st_ino = (ino_t)e->ino;
	st->st_mode = e->mode;
	st->st_nlink = e->nlink;
	st->st_uid = e->uid;
	st->st_gid = e->gid;
	st->st_size = e->size;
	st->st_blksize = 4096;
	st->st_blocks = blocks_of(e);
	st->st_atim.tv_sec = e->atime_ns / 1000000000; st->st_atim.tv_nsec = e->atime_ns % 1000000000;
	st->st_mtim.tv_sec = e->mtime_ns / 1000000000; st->st_mtim.tv_nsec = e->mtime_ns % 1000000000;
	st->st_ctim.tv_sec = e->ctime_ns / 1000000000; st->st_ctim.tv_nsec = e->ctime_ns % 1000000000;
}

/* do_stat answers a path stat; returns 1 when answered (result in *rc). */
static int do_stat(const char *fn, int dirfd, const char **pp, char *canon, int follow, struct stat *st, int *rc)
{
	struct dlb_res r;
	switch (lookup(fn, dirfd, pp, follow, canon, &r)) {
	case DLB_BUNDLED: fill_stat(st, r.ent); *rc = 0; return 1;
	case DLB_KNOWN_ERR: *rc = set_errno(r.err); return 1;
	}
	return 0;
}

int stat(const char *path, struct stat *st)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_stat("stat", AT_FDCWD, &path, canon, 1, st, &rc)) return rc;
	rc = real_stat ? real_stat(path, st) : sys_fstatat(AT_FDCWD, path, st, 0);
	if (rc == 0) proc_stat_fix(path, st);
	return rc;
}
int stat64(const char *path, struct stat64 *st)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_stat("stat64", AT_FDCWD, &path, canon, 1, (struct stat *)st, &rc)) return rc;
	rc = real_stat64 ? real_stat64(path, st) : sys_fstatat(AT_FDCWD, path, st, 0);
	if (rc == 0) proc_stat_fix(path, (struct stat *)st);
	return rc;
}
int lstat(const char *path, struct stat *st)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_stat("lstat", AT_FDCWD, &path, canon, 0, st, &rc)) return rc;
	return real_lstat ? real_lstat(path, st) : sys_fstatat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
}
int lstat64(const char *path, struct stat64 *st)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_stat("lstat64", AT_FDCWD, &path, canon, 0, (struct stat *)st, &rc)) return rc;
	return real_lstat64 ? real_lstat64(path, st) : sys_fstatat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
}
/* STAT_FLAGS: what fstatat accepts; others are EINVAL before any lookup. */
#define STAT_FLAGS (AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_EMPTY_PATH)
int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if ((!(flags & AT_EMPTY_PATH) || (path && path[0])) && !(flags & ~STAT_FLAGS))
		if (do_stat("fstatat", dirfd, &path, canon, !(flags & AT_SYMLINK_NOFOLLOW), st, &rc)) return rc;
	rc = real_fstatat ? real_fstatat(dirfd, path, st, flags) : sys_fstatat(dirfd, path, st, flags);
	if (rc == 0 && (flags & AT_EMPTY_PATH) && path && !path[0]) fstat_fix(dirfd, st);
	else if (rc == 0 && !(flags & AT_SYMLINK_NOFOLLOW)) proc_stat_fix(path, st);
	return rc;
}
int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if ((!(flags & AT_EMPTY_PATH) || (path && path[0])) && !(flags & ~STAT_FLAGS))
		if (do_stat("fstatat64", dirfd, &path, canon, !(flags & AT_SYMLINK_NOFOLLOW), (struct stat *)st, &rc)) return rc;
	rc = real_fstatat64 ? real_fstatat64(dirfd, path, st, flags) : sys_fstatat(dirfd, path, st, flags);
	if (rc == 0 && (flags & AT_EMPTY_PATH) && path && !path[0]) fstat_fix(dirfd, (struct stat *)st);
	else if (rc == 0 && !(flags & AT_SYMLINK_NOFOLLOW)) proc_stat_fix(path, (struct stat *)st);
	return rc;
}
/* Compat entry points of glibc < 2.33 (binaries built there still call them).
 * glibc < 2.33 exports only the versioned __xstat family (compat symbols in
 * newer glibc, invisible to a plain dlsym). We answer them ourselves and
 * forward through the plain stat functions: on x86_64 and aarch64 the
 * _STAT_VER layout equals struct stat. */
int __xstat(int ver, const char *path, struct stat *st) { (void)ver; return stat(path, st); }
int __xstat64(int ver, const char *path, struct stat64 *st) { (void)ver; return stat64(path, st); }
int __lxstat(int ver, const char *path, struct stat *st) { (void)ver; return lstat(path, st); }
int __lxstat64(int ver, const char *path, struct stat64 *st) { (void)ver; return lstat64(path, st); }
int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags) { (void)ver; return fstatat(dirfd, path, st, flags); }
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags) { (void)ver; return fstatat64(dirfd, path, st, flags); }

static void fill_statx(struct statx *sx, const struct dlb_entry *e)
{
			memset(sx, 0, sizeof *sx);
			sx->stx_mask = STATX_BASIC_STATS;
			sx->stx_blksize = 4096;
			sx->stx_nlink = e->nlink;
			sx->stx_uid = e->uid;
			sx->stx_gid = e->gid;
			sx->stx_mode = (uint16_t)e->mode;
			sx->stx_ino = e->ino;
			sx->stx_size = (uint64_t)e->size;
			sx->stx_blocks = (uint64_t)blocks_of(e);
			sx->stx_atime.tv_sec = e->atime_ns / 1000000000; sx->stx_atime.tv_nsec = (uint32_t)(e->atime_ns % 1000000000);
			sx->stx_mtime.tv_sec = e->mtime_ns / 1000000000; sx->stx_mtime.tv_nsec = (uint32_t)(e->mtime_ns % 1000000000);
			sx->stx_ctime.tv_sec = e->ctime_ns / 1000000000; sx->stx_ctime.tv_nsec = (uint32_t)(e->ctime_ns % 1000000000);
			sx->stx_dev_major = major(e->dev);
			sx->stx_dev_minor = minor(e->dev);
}

int statx(int dirfd, const char *path, int flags, unsigned mask, struct statx *sx)
{
	char canon[DLB_PATH_MAX];
	int valid = !(flags & ~(STAT_FLAGS | AT_STATX_SYNC_TYPE)) && (flags & AT_STATX_SYNC_TYPE) != AT_STATX_SYNC_TYPE &&
		    !(mask & STATX__RESERVED);
	if ((!(flags & AT_EMPTY_PATH) || (path && path[0])) && valid) {
		struct dlb_res r;
		switch (lookup("statx", dirfd, &path, !(flags & AT_SYMLINK_NOFOLLOW), canon, &r)) {
		case DLB_BUNDLED: fill_statx(sx, r.ent); (void)mask; return 0;
		case DLB_KNOWN_ERR: return set_errno(r.err);
		}
	}
	int rc = real_statx ? real_statx(dirfd, path, flags, mask, sx)
			    : (syscall(SYS_statx, dirfd, path, flags, mask, sx) < 0 ? -1 : 0);
	int empty = (flags & AT_EMPTY_PATH) && path && !path[0];
	if (rc == 0 && stage_dev && (empty || (!(flags & AT_SYMLINK_NOFOLLOW) && path && !strncmp(path, "/proc/", 6)))) {
		/* statx of a staged fd, or through a /proc link to a staged copy:
		 * the original's attributes, as fstat. */
		struct stat st;
		st.st_dev = makedev(sx->stx_dev_major, sx->stx_dev_minor);
		st.st_mode = sx->stx_mode;
		st.st_size = (off_t)sx->stx_size;
		st.st_mtim.tv_sec = sx->stx_mtime.tv_sec;
		st.st_mtim.tv_nsec = sx->stx_mtime.tv_nsec;
		const struct dlb_entry *e = empty ? fd_staged(dirfd, &st) : entry_via_link(path, &st);
		if (e) fill_statx(sx, e);
	}
	return rc;
}

/* ---- access ---- */

/* access_check answers from the table's mode and owner what the kernel would
 * for the original file: root passes R/W, and X when any x bit is set (or a dir).
 * Returns 0, -1 (errno set) or ACCESS_UNDECIDED: the caller then passes the
 * call through, so that the kernel decides. */
#define ACCESS_UNDECIDED (-2)
#define GROUPS_ON_STACK 1024 /* Linux allows 65536 supplementary groups */
int access_check(const struct dlb_entry *e, int mode, int effective)
{
	if (mode == F_OK) return 0;
	uid_t uid = effective ? geteuid() : getuid();
	gid_t gid = effective ? getegid() : getgid();
	unsigned m = e->mode;
	if (uid == 0) {
		if ((mode & X_OK) && !(m & 0111) && (m & S_IFMT) != S_IFDIR) return set_errno(EACCES);
		return 0;
	}
	unsigned bits;
	if (uid == e->uid) bits = (m >> 6) & 7;
	else {
		int in_group = gid == e->gid;
		if (!in_group) {
			/* Any number of groups, no allocation: ask for the count, read
			 * them onto the stack; with more than GROUPS_ON_STACK (or if
			 * they changed in between: EINVAL) the kernel decides. */
			int n = getgroups(0, NULL);
			if (n < 0 || n > GROUPS_ON_STACK) return ACCESS_UNDECIDED;
			gid_t groups[n ? n : 1];
			if (n && (n = getgroups(n, groups)) < 0) return ACCESS_UNDECIDED;
			for (int i = 0; i < n; i++) if (groups[i] == e->gid) in_group = 1;
		}
		bits = in_group ? (m >> 3) & 7 : m & 7;
	}
	if ((mode & R_OK && !(bits & 4)) || (mode & W_OK && !(bits & 2)) || (mode & X_OK && !(bits & 1)))
		return set_errno(EACCES);
	return 0;
}

/* search_ok: the process may search the bundled directory e (1), may not
 * (0: EACCES), or the kernel must decide (-1). The kernel's path walk uses
 * the effective (fs) ids, and root searches every directory. errno is left
 * as it was: lookups that succeed do not touch it. */
int search_ok(const struct dlb_entry *e)
{
	int saved = errno, a = access_check(e, X_OK, 1);
	errno = saved;
	return a == 0 ? 1 : a == ACCESS_UNDECIDED ? -1 : 0;
}

/* readable_original: the process may read the original of bundled file e
 * (1), may not (0, errno EACCES), or the kernel must decide (-1). The staged
 * copy belongs to the stage's user, so open, fopen and opendir of it ask the
 * table instead; only entries without the world-read bit need the check
 * (and its getuid calls). */
int readable_original(const struct dlb_entry *e)
{
	if (e->mode & 04) return 1;
	int a = access_check(e, R_OK, 1);
	return a == 0 ? 1 : a == ACCESS_UNDECIDED ? -1 : 0;
}

static int do_access(const char *fn, int dirfd, const char **pp, char *canon, int mode, int flags, int *rc)
{
	struct dlb_res r;
	/* The kernel refuses bad modes and flags (EINVAL) before it looks at
	 * the path: let it. */
	if ((mode & ~(R_OK | W_OK | X_OK)) || (flags & ~(AT_EACCESS | AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH))) return 0;
	const char *path = *pp;
	switch (lookup(fn, dirfd, pp, !(flags & AT_SYMLINK_NOFOLLOW), canon, &r)) {
	case DLB_BUNDLED:
		*rc = access_check(r.ent, mode, flags & AT_EACCESS);
		return *rc != ACCESS_UNDECIDED;
	case DLB_KNOWN_ERR: *rc = set_errno(r.err); return 1;
	}
	/* access("/proc/self/exe", W_OK) of a staged executable: the kernel
	 * would check the staged copy, which is ours (writable); answer for
	 * the original, as proc_stat_fix does for stat. One stat, only for
	 * /proc paths that ask more than existence. */
	if (mode != F_OK && !(flags & AT_SYMLINK_NOFOLLOW) && path && !strncmp(path, "/proc/", 6) && stage_dev) {
		struct stat st;
		int saved = errno, s = sys_fstatat(AT_FDCWD, path, &st, 0);
		errno = saved;
		const struct dlb_entry *e = s == 0 ? entry_via_link(path, &st) : NULL;
		if (e) {
			*rc = access_check(e, mode, flags & AT_EACCESS);
			return *rc != ACCESS_UNDECIDED;
		}
	}
	return 0;
}
int access(const char *path, int mode)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_access("access", AT_FDCWD, &path, canon, mode, 0, &rc)) return rc;
	return real_access(path, mode);
}
int faccessat(int dirfd, const char *path, int mode, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_access("faccessat", dirfd, &path, canon, mode, flags, &rc)) return rc;
	return real_faccessat(dirfd, path, mode, flags);
}
int euidaccess(const char *path, int mode)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_access("euidaccess", AT_FDCWD, &path, canon, mode, AT_EACCESS, &rc)) return rc;
	return real_euidaccess(path, mode);
}
int eaccess(const char *path, int mode) { return euidaccess(path, mode); }

/* ---- /proc/self/maps: served with staged paths turned back into originals ---- */

static int is_self_proc(const char *path, const char *leaf)
{
	if (strncmp(path, "/proc/", 6) != 0) return 0;
	const char *p = path + 6, *slash = strchr(p, '/');
	if (!slash || strcmp(slash + 1, leaf) != 0) return 0;
	size_t n = (size_t)(slash - p);
	if ((n == 4 && !memcmp(p, "self", 4)) || (n == 11 && !memcmp(p, "thread-self", 11))) return 1;
	char pid[16];
	int pn = snprintf(pid, sizeof pid, "%d", (int)syscall(SYS_getpid));
	return (size_t)pn == n && !memcmp(p, pid, n);
}

/* maps_line copies one line of maps/smaps (l bytes, with its newline) to
 * out and returns the length written: every stage_root prefix removed, and
 * on a mapping of a staged copy the device and inode columns the
 * original's (the kernel's format: fs/proc/task_mmu.c show_map_vma, the
 * path padded to column 73). */
static size_t maps_line(const char *in, size_t l, char *out)
{
	const char *f[5];
	size_t fl[5], i = 0;
	for (int k = 0; k < 5; k++) {
		while (i < l && in[i] == ' ') i++;
		f[k] = in + i;
		while (i < l && in[i] != ' ' && in[i] != '\n') i++;
		fl[k] = (size_t)(in + i - f[k]);
	}
	size_t p = i;
	while (p < l && in[p] == ' ') p++;
	size_t pl = l - p;
	if (pl && in[l - 1] == '\n') pl--;
	const struct dlb_entry *e = NULL;
	if (fl[3] && memchr(f[0], '-', fl[0]) && pl > stage_root_len && !memcmp(in + p, stage_root, stage_root_len) &&
	    in[p + stage_root_len] == '/')
		e = dlb_lookup(table, in + p + stage_root_len, pl - stage_root_len);
	if (!e || e->type != DLB_REG) {
		size_t o = 0;
		for (size_t k = 0; k < l;) {
			if (l - k > stage_root_len && !memcmp(in + k, stage_root, stage_root_len) && in[k + stage_root_len] == '/') {
				k += stage_root_len;
				continue;
			}
			out[o++] = in[k++];
		}
		return o;
	}
	int o = snprintf(out, 200, "%.*s %.*s %.*s %02x:%02x %llu ", (int)fl[0], f[0], (int)fl[1], f[1], (int)fl[2], f[2],
			 major(e->dev), minor(e->dev), (unsigned long long)e->ino);
	if (o < 0) return 0;
	while (o < 73) out[o++] = ' ';
	out[o++] = ' ';
	size_t ol = pl - stage_root_len;
	memcpy(out + o, in + p + stage_root_len, ol);
	o += (int)ol;
	out[o++] = '\n';
	return (size_t)o;
}

/* serve_maps reads the real file and returns a memfd holding it with every
 * stage_root prefix removed and the staged copies' device and inode numbers
 * the originals' (anonymous mmap as the buffer: no malloc). */
static int serve_maps(const char *path, int flags)
{
	int in = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (in < 0) return -1;
	size_t cap = 1 << 20, len = 0;
	char *buf = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) { syscall(SYS_close, in); return -1; }
	for (;;) {
		if (cap - len < 65536) {
			char *nb = mremap(buf, cap, cap * 2, MREMAP_MAYMOVE);
			if (nb == MAP_FAILED) break;
			buf = nb; cap *= 2;
		}
		long n = syscall(SYS_read, in, buf + len, cap - len);
		if (n <= 0) break;
		len += (size_t)n;
	}
	syscall(SYS_close, in);
	/* The output: each line at most 40 bytes longer (dev and inode). */
	size_t ocap = len * 2 + 4096;
	char *ob = mmap(NULL, ocap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (ob == MAP_FAILED) { munmap(buf, cap); return -1; }
	size_t out = 0;
	for (size_t i = 0; i < len;) {
		char *nl = memchr(buf + i, '\n', len - i);
		size_t l = nl ? (size_t)(nl - (buf + i)) + 1 : len - i;
		out += maps_line(buf + i, l, ob + out);
		i += l;
	}
	int fd = (int)syscall(SYS_memfd_create, "maps", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
	if (fd >= 0) {
		for (size_t off = 0; off < out;) {
			long n = syscall(SYS_write, fd, ob + off, out - off);
			if (n <= 0) break;
			off += (size_t)n;
		}
		lseek(fd, 0, SEEK_SET);
	}
	munmap(buf, cap);
	munmap(ob, ocap);
	return fd;
}

static int wants_maps(const char *path) { return stage_root_len && path && (is_self_proc(path, "maps") || is_self_proc(path, "smaps")); }

/* ---- open ---- */

#define WRITE_FLAGS (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND | __O_TMPFILE)

/* do_open decides an open; returns 1 when answered (fd or -1 in *rc), 0 to
 * pass the original through. */
static int do_open(const char *fn, int dirfd, const char **pp, char *canon, int flags, int *rc)
{
	const char *path = *pp;
	ensure_init();
	if (!path) return 0;
	if (wants_maps(path) && !(flags & WRITE_FLAGS)) { *rc = serve_maps(path, flags); return 1; }
	if (flags & WRITE_FLAGS & ~O_DIRECTORY) return 0; /* open_marked, after the real call */
	if (flags & (O_DIRECTORY | O_PATH)) {
		/* Passed through unlooked-up (a descriptor of the staged copy
		 * would answer fstatfs, fchdir and a raw getdents for the stage,
		 * and openat(dirfd(d), "sub", O_DIRECTORY) of a served stream's
		 * fd reaches the staged copy already); an O_DIRECTORY open of a
		 * bundled directory by its absolute path goes to the original
		 * tree, and the report names it. */
		if (!(flags & O_PATH) && path[0] == '/') note_dir_open(path);
		return 0;
	}
	char sp[DLB_PATH_MAX + 1024];
	struct dlb_res r;
	switch (lookup(fn, dirfd, pp, !(flags & O_NOFOLLOW), canon, &r)) {
	case DLB_BUNDLED:
		if (r.ent->type == DLB_SYMLINK) { *rc = set_errno(ELOOP); return 1; } /* O_NOFOLLOW on a symlink */
		/* Directories: a descriptor of the staged copy would answer
		 * fstatfs (what fontconfig opens a font directory for: is it
		 * NFS?), fchdir and a raw getdents for the stage, and the image
		 * holds no file system facts of the original: the original is
		 * opened, and the report names it (opendir's listings are
		 * served, listings.c). */
		if (r.ent->type == DLB_DIR) { report_dir_open(canon, r.len, 1); return 0; }
		if (r.ent->type != DLB_REG) return 0;
		switch (readable_original(r.ent)) {
		case -1: return 0;
		case 0: *rc = -1; return 1;
		}
		if (staged(sp, sizeof sp, canon, r.len) != 0) return 0;
		*rc = (int)syscall(SYS_openat, AT_FDCWD, sp, flags, 0); /* syscall(): -1 and errno on error */
		if (*rc >= 0) fd_note(*rc, r.ent);
		/* ids changed since start-up (setuid without exec): the stage is
		 * not ours to read any more; the original is. */
		else if (errno == EACCES && !stage_readable()) {
			report_fallback(FB_OTHER_UID, stage_root, stage_root_len - 5);
			*pp = path;
			return 0;
		}
		return 1;
	case DLB_KNOWN_ERR:
		*rc = set_errno(r.err);
		return 1;
	}
	return 0;
}

/* open_marked: an open that may write changes the file system there: the
 * name it opened (created, or whose content it may change) is marked
 * (marked(), read-your-writes). O_CREAT|O_EXCL and O_NOFOLLOW do not follow
 * a symlink in the last component. glibc's __O_TMPFILE includes
 * O_DIRECTORY: a plain directory open is no write, nor is an unnamed file
 * (O_TMPFILE). */
static int open_marked(int rc, int dirfd, const char *path, int flags)
{
	if ((flags & WRITE_FLAGS & ~O_DIRECTORY) && (flags & O_TMPFILE) != O_TMPFILE &&
	    (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND)))
		marked(rc, dirfd, path, !(flags & O_NOFOLLOW) && (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL),
		       (flags & O_CREAT) ? W_OPEN : W_CHANGE);
	return rc;
}

static mode_t vmode(int flags, va_list ap) { return (flags & (O_CREAT | __O_TMPFILE)) ? va_arg(ap, mode_t) : 0; }

int open(const char *path, int flags, ...)
{
	va_list ap; va_start(ap, flags); mode_t m = vmode(flags, ap); va_end(ap);
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("open", AT_FDCWD, &path, canon, flags, &rc)) return rc;
	return open_marked(real_open(path, flags, m), AT_FDCWD, path, flags);
}
int open64(const char *path, int flags, ...)
{
	va_list ap; va_start(ap, flags); mode_t m = vmode(flags, ap); va_end(ap);
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("open64", AT_FDCWD, &path, canon, flags, &rc)) return rc;
	return open_marked(real_open64(path, flags, m), AT_FDCWD, path, flags);
}
int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap; va_start(ap, flags); mode_t m = vmode(flags, ap); va_end(ap);
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("openat", dirfd, &path, canon, flags, &rc)) return rc;
	return open_marked(real_openat(dirfd, path, flags, m), dirfd, path, flags);
}
int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap; va_start(ap, flags); mode_t m = vmode(flags, ap); va_end(ap);
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("openat64", dirfd, &path, canon, flags, &rc)) return rc;
	return open_marked(real_openat64(dirfd, path, flags, m), dirfd, path, flags);
}
/* _FORTIFY_SOURCE variants (no mode argument by definition). */
int __open_2(const char *path, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("__open_2", AT_FDCWD, &path, canon, flags, &rc)) return rc;
	return open_marked(real___open_2(path, flags), AT_FDCWD, path, flags);
}
int __open64_2(const char *path, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("__open64_2", AT_FDCWD, &path, canon, flags, &rc)) return rc;
	return open_marked(real___open64_2(path, flags), AT_FDCWD, path, flags);
}
int __openat_2(int dirfd, const char *path, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("__openat_2", dirfd, &path, canon, flags, &rc)) return rc;
	return open_marked(real___openat_2(dirfd, path, flags), dirfd, path, flags);
}
int __openat64_2(int dirfd, const char *path, int flags)
{
	int rc;
	char canon[DLB_PATH_MAX];
	if (do_open("__openat64_2", dirfd, &path, canon, flags, &rc)) return rc;
	return open_marked(real___openat64_2(dirfd, path, flags), dirfd, path, flags);
}

/* fopen's internal open bypasses our open(), so fopen is decided here. A mode
 * with w, a or + writes and passes through. */
static int fopen_decide(const char *fn, const char **pp, char *canon, const char *mode, char *sp, size_t spsz, int *err, int *maps,
			const struct dlb_entry **ent)
{
	const char *path = *pp;
	ensure_init();
	*maps = 0;
	*ent = NULL;
	if (!path || !mode || strpbrk(mode, "wa+")) return DLB_UNKNOWN;
	if (wants_maps(path)) { *maps = 1; return DLB_BUNDLED; }
	struct dlb_res r;
	int rc = lookup(fn, AT_FDCWD, pp, 1, canon, &r);
	if (rc == DLB_KNOWN_ERR) { *err = r.err; return rc; }
	if (rc != DLB_BUNDLED || r.ent->type != DLB_REG) return DLB_UNKNOWN;
	switch (readable_original(r.ent)) {
	case -1: return DLB_UNKNOWN;
	case 0: *err = EACCES; return DLB_KNOWN_ERR;
	}
	if (staged(sp, spsz, canon, r.len) == 0) { *ent = r.ent; return rc; }
	return DLB_UNKNOWN;
}
/* fopen_marked: a mode with w, a or + may write (open_marked): "w" and "a"
 * create (O_CREAT), "x" does not follow a symlink (O_EXCL). */
static void fopen_marked(FILE *f, const char *path, const char *mode)
{
	if (!path || !mode || !strpbrk(mode, "wa+")) return;
	int creates = strpbrk(mode, "wa") != NULL;
	marked(f ? 0 : -1, AT_FDCWD, path, !strchr(mode, 'x'), creates ? W_OPEN : W_CHANGE);
}
static FILE *do_fopen(FILE *(*real)(const char *, const char *), const char *fn, const char *path, const char *mode)
{
	char sp[DLB_PATH_MAX + 1024], canon[DLB_PATH_MAX];
	int err = 0, maps = 0;
	const struct dlb_entry *ent;
	switch (fopen_decide(fn, &path, canon, mode, sp, sizeof sp, &err, &maps, &ent)) {
	case DLB_BUNDLED:
		if (maps) {
			int fd = serve_maps(path, strchr(mode, 'e') ? O_CLOEXEC : 0);
			return fd < 0 ? NULL : fdopen(fd, mode);
		}
		FILE *f = real(sp, mode);
		if (f) fd_note(fileno(f), ent);
		else if (errno == EACCES && !stage_readable()) { /* ids changed: the original */
			report_fallback(FB_OTHER_UID, stage_root, stage_root_len - 5);
			return real(path, mode);
		}
		return f;
	case DLB_KNOWN_ERR: errno = err; return NULL;
	}
	FILE *f = real(path, mode);
	fopen_marked(f, path, mode);
	return f;
}
FILE *fopen(const char *path, const char *mode) { ensure_init(); return do_fopen(real_fopen, "fopen", path, mode); }
FILE *fopen64(const char *path, const char *mode) { ensure_init(); return do_fopen(real_fopen64, "fopen64", path, mode); }
static FILE *do_freopen(FILE *(*real)(const char *, const char *, FILE *), const char *fn, const char *path, const char *mode, FILE *f)
{
	char sp[DLB_PATH_MAX + 1024], canon[DLB_PATH_MAX];
	int err = 0, maps = 0;
	const struct dlb_entry *ent;
	switch (path ? fopen_decide(fn, &path, canon, mode, sp, sizeof sp, &err, &maps, &ent) : DLB_UNKNOWN) {
	case DLB_BUNDLED:
		if (!maps) {
			FILE *g = real(sp, mode, f);
			if (g) fd_note(fileno(g), ent);
			return g;
		}
		break; /* freopen of /proc/self/maps: rare; native */
	case DLB_KNOWN_ERR: errno = err; fclose(f); return NULL;
	}
	FILE *g = real(path, mode, f);
	if (path) fopen_marked(g, path, mode);
	return g;
}
FILE *freopen(const char *path, const char *mode, FILE *f) { ensure_init(); return do_freopen(real_freopen, "freopen", path, mode, f); }
FILE *freopen64(const char *path, const char *mode, FILE *f) { ensure_init(); return do_freopen(real_freopen64, "freopen64", path, mode, f); }


/* statfs/statvfs: only a path the table knows is missing is answered (the
 * file system's figures of a bundled path are the original's, which the
 * table does not hold): libselinux probes /selinux in every process. The
 * 64-bit names are aliases of these in glibc on 64-bit targets. */
int statfs(const char *path, struct statfs *buf)
{
	char canon[DLB_PATH_MAX];
	struct dlb_res r;
	if (path && lookup("statfs", AT_FDCWD, &path, 1, canon, &r) == DLB_KNOWN_ERR) return set_errno(r.err);
	return real_statfs(path, buf);
}
int statvfs(const char *path, struct statvfs *buf)
{
	char canon[DLB_PATH_MAX];
	struct dlb_res r;
	if (path && lookup("statvfs", AT_FDCWD, &path, 1, canon, &r) == DLB_KNOWN_ERR) return set_errno(r.err);
	return real_statvfs(path, buf);
}


/* ---- fstat of a staged fd: the original's attributes ----
 *
 * An open served from the stage remembers fd -> entry (fds below FD_TRACK).
 * fstat of such an fd makes the real call and, when the result is still the
 * staged copy of that entry (the stage's st_dev, same size and mtime: the fd
 * may have been closed behind our back, e.g. by fclose, and reused), answers
 * with the table's attributes: ino, dev, nlink, times as the original. */
#define FD_TRACK 1024
static const struct dlb_entry *fd_track[FD_TRACK] DLB_COLD;
static uint64_t fd_ino[FD_TRACK] DLB_COLD; /* the staged copy's inode: an fd closed behind our back
				     (fclose, close_range) and reused for another file on the
				     stage's device with the same size and mtime is not it */
void fd_note(int fd, const struct dlb_entry *e)
{
	struct stat st;
	if (fd < 0 || fd >= FD_TRACK) return;
	int saved = errno;
	long rc = syscall(SYS_fstat, fd, &st);
	errno = saved;
	__atomic_store_n(&fd_track[fd], NULL, __ATOMIC_RELEASE);
	if (rc != 0) return;
	__atomic_store_n(&fd_ino[fd], (uint64_t)st.st_ino, __ATOMIC_RELEASE);
	__atomic_store_n(&fd_track[fd], e, __ATOMIC_RELEASE);
}

/* same_copy: st is the staged copy of entry e (the stage's device, e's size
 * and mtime, which staging keeps). */
static int same_copy(const struct dlb_entry *e, const struct stat *st)
{
	return e && e->type == DLB_REG && st->st_dev == stage_dev && S_ISREG(st->st_mode) && st->st_size == e->size &&
	       (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec == e->mtime_ns;
}

/* entry_via_link: the entry whose staged copy st is, named by the /proc
 * magic link link (/proc/self/fd/N, /proc/self/exe ...): the kernel's name
 * of the file is the staged path. One readlink, only for a file on the
 * stage's device: an fd this process did not open (inherited, a dup, an
 * fd of 1024 or more), /proc/self/exe of a staged executable. */
const struct dlb_entry *entry_via_link(const char *link, const struct stat *st)
{
	char tmp[DLB_PATH_MAX + 1024];
	if (!table || !stage_dev || st->st_dev != stage_dev || !S_ISREG(st->st_mode)) return NULL;
	int saved = errno;
	long n = syscall(SYS_readlinkat, AT_FDCWD, link, tmp, sizeof tmp - 1);
	errno = saved;
	if (n <= (long)stage_root_len || memcmp(tmp, stage_root, stage_root_len) != 0 || tmp[stage_root_len] != '/') return NULL;
	const struct dlb_entry *e = dlb_lookup(table, tmp + stage_root_len, (size_t)n - stage_root_len);
	return same_copy(e, st) ? e : NULL;
}

const struct dlb_entry *fd_staged(int fd, const struct stat *st)
{
	if (fd < 0 || !stage_dev || st->st_dev != stage_dev) return NULL;
	const struct dlb_entry *e = fd < FD_TRACK ? __atomic_load_n(&fd_track[fd], __ATOMIC_ACQUIRE) : NULL;
	if (e && __atomic_load_n(&fd_ino[fd], __ATOMIC_ACQUIRE) == (uint64_t)st->st_ino && same_copy(e, st)) return e;
	char l[40];
	snprintf(l, sizeof l, "/proc/self/fd/%d", fd);
	return entry_via_link(l, st);
}

/* proc_stat_fix: a stat that followed a /proc magic link to a staged copy
 * (os.stat('/proc/self/fd/N'), '/proc/self/exe') shows the original's. */
void proc_stat_fix(const char *path, struct stat *st)
{
	if (path && !strncmp(path, "/proc/", 6) && stage_dev && st->st_dev == stage_dev) {
		const struct dlb_entry *e = entry_via_link(path, st);
		if (e) fill_stat(st, e);
	}
}

void fstat_fix(int fd, struct stat *st)
{
	const struct dlb_entry *e = fd_staged(fd, st);
	if (!e) e = dir_fd_entry(fd, st); /* dirfd() of a served listing */
	if (e) fill_stat(st, e);
}

int fstat(int fd, struct stat *st)
{
	ensure_init();
	int rc = real_fstat ? real_fstat(fd, st) : sys_fstatat(fd, "", st, AT_EMPTY_PATH);
	if (rc == 0) fstat_fix(fd, st);
	return rc;
}
int fstat64(int fd, struct stat64 *st) { return fstat(fd, (struct stat *)st); }
int __fxstat(int ver, int fd, struct stat *st) { (void)ver; return fstat(fd, st); }
int __fxstat64(int ver, int fd, struct stat64 *st) { (void)ver; return fstat(fd, (struct stat *)st); }


/* pathprobe: libc's path functions over a tree, one line per call with its
 * result and errno, for a differential run (natively, then under dlbundle
 * exec with the tree partly bundled): any line that differs is a
 * divergence.
 *
 * usage: pathprobe ROOT
 * ROOT holds in/ (bundled), out/ (not bundled), links between them, and
 * the probes' own binaries. Every probe prints paths relative to ROOT
 * where it can (ROOT itself is the same in both runs, but this keeps
 * lines short). Built twice: -O0, and -O2 -D_FORTIFY_SOURCE=2 (the *_chk
 * variants: __realpath_chk, __readlink_chk, __getcwd_chk ...); both must
 * print the same as each other natively.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fts.h>
#include <ftw.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static const char *root;
static size_t rootlen;

/* rel prints p with ROOT replaced by "R". */
static const char *rel(const char *p)
{
	static char buf[8][PATH_MAX + 64];
	static int k;
	char *b = buf[k++ & 7];
	if (!p) return "(null)";
	if (!strncmp(p, root, rootlen) && (p[rootlen] == '/' || !p[rootlen])) snprintf(b, sizeof buf[0], "R%s", p + rootlen);
	else snprintf(b, sizeof buf[0], "%s", p);
	return b;
}

/* A length the compiler cannot see makes a fortified build call the _chk
 * variant (with a constant one it proves the call safe and calls the plain
 * function). */
static volatile size_t vlen_pad;

static const char *err(int e) { return e ? strerrorname_np(e) : "0"; }

static void st_line(const char *what, const char *p, int rc, int e, const struct stat *st)
{
	if (rc) { printf("%s %s = -1 %s\n", what, rel(p), err(e)); return; }
	printf("%s %s = 0 mode=%o nlink=%lu uid=%u gid=%u size=%lld ino=%llu dev=%llu mtime=%lld.%09ld ctime=%lld.%09ld blocks=%lld\n",
	       what, rel(p), st->st_mode, (unsigned long)st->st_nlink, st->st_uid, st->st_gid, (long long)st->st_size,
	       (unsigned long long)st->st_ino, (unsigned long long)st->st_dev, (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec,
	       (long long)st->st_ctim.tv_sec, st->st_ctim.tv_nsec, (long long)st->st_blocks);
}

/* probe_path runs every single-path call on p. */
static void probe_path(const char *p)
{
	struct stat st;
	char buf[PATH_MAX];
	int rc, e;

	errno = 0;
	char *r = realpath(p, NULL);
	e = errno;
	printf("realpath(NULL) %s = %s %s\n", rel(p), rel(r), r ? "0" : err(e));
	free(r);
	errno = 0;
	r = realpath(p, buf); /* with a buffer: __realpath_chk under _FORTIFY_SOURCE */
	e = errno;
	printf("realpath(buf) %s = %s %s\n", rel(p), r ? rel(buf) : "(null)", r ? "0" : err(e));
	errno = 0;
	r = canonicalize_file_name(p);
	e = errno;
	printf("canonicalize_file_name %s = %s %s\n", rel(p), rel(r), r ? "0" : err(e));
	free(r);

	errno = 0; rc = stat(p, &st); st_line("stat", p, rc, errno, &st);
	errno = 0; rc = lstat(p, &st); st_line("lstat", p, rc, errno, &st);
	errno = 0; rc = fstatat(AT_FDCWD, p, &st, AT_SYMLINK_NOFOLLOW); st_line("fstatat(NOFOLLOW)", p, rc, errno, &st);
	for (int m = 0; m < 4; m++) {
		static const int modes[] = {F_OK, R_OK, W_OK, X_OK};
		static const char *names[] = {"F_OK", "R_OK", "W_OK", "X_OK"};
		errno = 0; rc = access(p, modes[m]); e = errno;
		printf("access(%s) %s = %d %s\n", names[m], rel(p), rc, rc ? err(e) : "0");
		errno = 0; rc = faccessat(AT_FDCWD, p, modes[m], AT_EACCESS); e = errno;
		printf("faccessat(%s,EACCESS) %s = %d %s\n", names[m], rel(p), rc, rc ? err(e) : "0");
	}
	errno = 0;
	ssize_t n = readlink(p, buf, sizeof buf - 1 - vlen_pad); /* __readlink_chk under _FORTIFY_SOURCE */
	e = errno;
	if (n >= 0) buf[n] = 0;
	printf("readlink %s = %zd %s %s\n", rel(p), n, n >= 0 ? buf : "", n >= 0 ? "0" : err(e));
	errno = 0;
	n = readlinkat(AT_FDCWD, p, buf, sizeof buf - 1 - vlen_pad); /* __readlinkat_chk */
	e = errno;
	if (n >= 0) buf[n] = 0;
	printf("readlinkat %s = %zd %s %s\n", rel(p), n, n >= 0 ? buf : "", n >= 0 ? "0" : err(e));

	errno = 0;
	int fd = open(p, O_RDONLY);
	e = errno;
	if (fd < 0) printf("open %s = -1 %s\n", rel(p), err(e));
	else {
		char head[17] = "";
		ssize_t got = read(fd, head, 16);
		int re = got < 0 ? errno : 0;
		if (got > 0) { head[got] = 0; for (char *c = head; *c; c++) if (*c < ' ') *c = '.'; }
		rc = fstat(fd, &st);
		printf("open %s = ok read=%zd %s %s\n", rel(p), got, got > 0 ? head : "", err(re));
		st_line("fstat(open)", p, rc, errno, &st);
		close(fd);
	}
	errno = 0;
	fd = open(p, O_RDONLY | O_DIRECTORY);
	e = errno;
	printf("open(O_DIRECTORY) %s = %s %s\n", rel(p), fd < 0 ? "-1" : "ok", fd < 0 ? err(e) : "0");
	if (fd >= 0) close(fd);
	errno = 0;
	FILE *f = fopen(p, "r");
	e = errno;
	if (!f) printf("fopen %s = NULL %s\n", rel(p), err(e));
	else {
		char line[64] = "";
		char *g = fgets(line, sizeof line, f);
		line[strcspn(line, "\n")] = 0;
		printf("fopen %s = ok %s %s\n", rel(p), g ? line : "(eof-or-error)", ferror(f) ? err(errno) : "0");
		fclose(f);
	}
}

/* list prints a directory's names in readdir order (with d_type), then
 * scandir's alphasort order and count. */
static void list(const char *p)
{
	errno = 0;
	DIR *d = opendir(p);
	if (!d) { printf("opendir %s = NULL %s\n", rel(p), err(errno)); return; }
	printf("opendir %s = ok:", rel(p));
	struct dirent *de;
	while ((errno = 0, de = readdir(d))) printf(" %s/%d", de->d_name, de->d_type);
	printf(" end=%s\n", err(errno));
	closedir(d);
	struct dirent **names;
	errno = 0;
	int n = scandir(p, &names, NULL, alphasort);
	if (n < 0) { printf("scandir %s = -1 %s\n", rel(p), err(errno)); return; }
	printf("scandir %s = %d:", rel(p), n);
	for (int i = 0; i < n; i++) { printf(" %s", names[i]->d_name); free(names[i]); }
	printf("\n");
	free(names);
}

static int walk_cb(const char *p, const struct stat *st, int type, struct FTW *ftw)
{
	printf("  %s type=%d level=%d mode=%o size=%lld\n", rel(p), type, ftw->level,
	       type == FTW_NS ? 0 : st->st_mode, type == FTW_NS || S_ISDIR(st->st_mode) ? 0LL : (long long)st->st_size);
	return 0;
}

static void walks(const char *p)
{
	static const int flags[] = {FTW_PHYS, 0, FTW_PHYS | FTW_DEPTH, FTW_PHYS | FTW_MOUNT};
	for (int i = 0; i < 4; i++) {
		printf("nftw %s flags=%d:\n", rel(p), flags[i]);
		errno = 0;
		int rc = nftw(p, walk_cb, 16, flags[i]);
		printf("nftw %s flags=%d = %d %s\n", rel(p), flags[i], rc, rc ? err(errno) : "0");
	}
	static const int ftsflags[] = {FTS_PHYSICAL, FTS_LOGICAL, FTS_PHYSICAL | FTS_NOCHDIR, FTS_COMFOLLOW | FTS_PHYSICAL};
	for (int i = 0; i < 4; i++) {
		char *argv[] = {(char *)p, NULL};
		errno = 0;
		FTS *fts = fts_open(argv, ftsflags[i], NULL);
		if (!fts) { printf("fts_open %s = NULL %s\n", rel(p), err(errno)); continue; }
		printf("fts %s flags=%d:\n", rel(p), ftsflags[i]);
		FTSENT *e;
		while ((errno = 0, e = fts_read(fts)))
			printf("  %s info=%d level=%d errno=%s\n", rel(e->fts_path), e->fts_info, (int)e->fts_level, err(e->fts_errno));
		printf("fts %s end=%s\n", rel(p), err(errno));
		fts_close(fts);
	}
}

static void globs(const char *pattern)
{
	glob_t g;
	for (int i = 0; i < 3; i++) {
		static const int flags[] = {0, GLOB_MARK, GLOB_NOSORT | GLOB_ONLYDIR};
		errno = 0;
		int rc = glob(pattern, flags[i], NULL, &g);
		printf("glob %s flags=%d = %d:", rel(pattern), flags[i], rc);
		if (!rc) for (size_t k = 0; k < g.gl_pathc; k++) printf(" %s", rel(g.gl_pathv[k]));
		printf("\n");
		if (!rc) globfree(&g);
	}
}

/* openat_chain opens dir, then each name relative to the previous fd. */
static void openat_chain(const char *dir, const char *const *names)
{
	errno = 0;
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	printf("chain %s", rel(dir));
	if (fd < 0) { printf(" = -1 %s\n", err(errno)); return; }
	for (; *names; names++) {
		struct stat st;
		errno = 0;
		int rc = fstatat(fd, *names, &st, 0);
		printf(" | fstatat(%s)=%d %s", *names, rc, rc ? err(errno) : "0");
		if (!rc) printf(" mode=%o size=%lld ino=%llu", st.st_mode, S_ISDIR(st.st_mode) ? 0LL : (long long)st.st_size, (unsigned long long)st.st_ino);
		errno = 0;
		int nfd = openat(fd, *names, O_RDONLY);
		printf(" openat=%s", nfd < 0 ? err(errno) : "ok");
		if (nfd < 0) break;
		errno = 0;
		rc = fstat(nfd, &st);
		printf(" fstat=%d ino=%llu nlink=%lu", rc, (unsigned long long)st.st_ino, (unsigned long)st.st_nlink);
		close(fd);
		fd = nfd;
	}
	printf("\n");
	close(fd);
}

int main(int argc, char **argv)
{
	if (argc < 2) { fprintf(stderr, "usage: pathprobe ROOT\n"); return 2; }
	root = argv[1];
	rootlen = strlen(root);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("uid=%d\n", (int)geteuid());

	char p[PATH_MAX + 600];
	static const char *const paths[] = {
		"", "in", "in/", "in/.", "in/..", "in/file", "in/file/", "in/file/x", "in/sub", "in/sub/deep/leaf",
		"in/sub/../file", "in/sub/./deep/../../file", "in/nosuch", "in/nosuch/x", "in/link-file", "in/link-abs",
		"in/link-dir", "in/link-dir/deep/leaf", "in/link-dir/../file", "in/link-out", "in/link-out/ofile",
		"in/link-out/../in/file", "in/link-out-file", "in/dangling", "in/loop1", "in/loop1/x", "in/chain1",
		"in/link-dotdot", "in/link-dotdot/in/file", "in/noperm", "in/closed", "in/closed/inner", "in/exec.sh",
		"in/empty", "in/sub/deep", "in/sub/deep/", "in/sub//deep", "in/link-dir/", "in/hard",
		"out", "out/ofile", "out/odir/x", "out/link-in", "out/link-in/deep/leaf", "out/link-in/../file",
		"out/link-in-file", "out/nosuch", "out/ofile/x",
		"/", "/usr", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2", "/lib/../usr/bin",
		"/usr/share/doc/bash/copyright", "/etc/passwd", "/nonexistent", "/proc/self/exe", ".", "..",
		"/usr/lib/python3.11/json/__init__.py", "/usr/lib/python3.11/json/../os.py", "/usr/lib/x86_64-linux-gnu/../../bin/sh",
		"/usr/lib/x86_64-linux-gnu/nosuch.so", "/usr/lib/x86_64-linux-gnu/libc.so.6/x", "/usr/share/zoneinfo/UTC",
		"/etc/../usr/lib/os-release", "/proc/self/cwd", "/proc/self/fd/0", "/dev/null", "/var/../usr/bin",
		"/usr/bin/python3", "/bin/sh", "/lib64/../lib/x86_64-linux-gnu/libc.so.6",
		NULL,
	};
	for (const char *const *q = paths; *q; q++) {
		if ((*q)[0] == '/' || !strcmp(*q, ".") || !strcmp(*q, "..")) snprintf(p, sizeof p, "%s", *q);
		else snprintf(p, sizeof p, "%s/%s", root, *q);
		probe_path(p);
	}
	/* Relative to a working directory inside, outside and across. */
	static const char *const cwds[] = {"in", "in/sub", "in/link-dir", "out", "in/link-out"};
	static const char *const relpaths[] = {"file", "../file", "./deep/leaf", "../in/file", "deep/../../file",
		"link-file", "../out/ofile", "nosuch", "../link-out/ofile", "..", ".", NULL};
	for (int c = 0; c < 5; c++) {
		snprintf(p, sizeof p, "%s/%s", root, cwds[c]);
		errno = 0;
		int rc = chdir(p);
		char cwd[PATH_MAX];
		char *g = getcwd(cwd, sizeof cwd - vlen_pad); /* __getcwd_chk under _FORTIFY_SOURCE */
		printf("chdir %s = %d %s getcwd=%s\n", rel(p), rc, rc ? err(errno) : "0", g ? rel(cwd) : "(null)");
		if (rc) continue;
		for (const char *const *q = relpaths; *q; q++) probe_path(*q);
	}
	if (chdir("/")) return 1;
	/* ENAMETOOLONG: a component of 256 bytes, and a path longer than PATH_MAX. */
	char longname[300];
	memset(longname, 'n', 256);
	longname[256] = 0;
	snprintf(p, sizeof p, "%s/in/%s", root, longname);
	probe_path(p);
	snprintf(p, sizeof p, "%s/out/%s", root, longname);
	probe_path(p);
	{
		size_t k = snprintf(p, sizeof p, "%s/in", root);
		while (k + 3 < PATH_MAX + 20) k += snprintf(p + k, sizeof p - k, "/.");
		snprintf(p + k, sizeof p - k, "/file");
		probe_path(p);
	}

	static const char *const dirs[] = {"in", "in/sub", "in/sub/deep", "in/big", "in/link-dir", "out", "in/empty", "in/closed",
		"in/file", "in/nosuch", "in/link-out", NULL};
	for (const char *const *q = dirs; *q; q++) {
		snprintf(p, sizeof p, "%s/%s", root, *q);
		list(p);
	}
	snprintf(p, sizeof p, "%s/in", root);
	walks(p);
	snprintf(p, sizeof p, "%s/out", root);
	walks(p);
	static const char *const patterns[] = {"in/*", "in/*/*", "in/sub/*/leaf", "in/link-*", "in/big/0*", "in/nosuch*", "*/link-*",
		"in/[a-f]*", "out/*", "in/link-dir/*", "in/.*", NULL};
	for (const char *const *q = patterns; *q; q++) {
		snprintf(p, sizeof p, "%s/%s", root, *q);
		globs(p);
	}
	static const char *const chain1[] = {"sub", "deep", "leaf", NULL};
	static const char *const chain2[] = {"link-dir", "..", "file", NULL};
	static const char *const chain3[] = {"link-out", "ofile", NULL};
	static const char *const chain4[] = {"sub", "..", "..", "out", "link-in", "file", NULL};
	static const char *const chain5[] = {"closed", "inner", NULL};
	static const char *const chain6[] = {"nosuch", NULL};
	static const char *const *chains[] = {chain1, chain2, chain3, chain4, chain5, chain6, NULL};
	snprintf(p, sizeof p, "%s/in", root);
	for (const char *const *const *c = chains; *c; c++) openat_chain(p, *c);
	return 0;
}

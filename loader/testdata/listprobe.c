/* listprobe: every way a C program reads a directory, printed so that a run
 * under dlbundle exec can be compared line by line with a native run
 * (loader/listing_exec_test.go). Each argument is a directory; for each it
 * prints readdir, readdir_r, telldir/seekdir/rewinddir, getdents64 on dirfd,
 * fdopendir of a dup, fstat of dirfd, openat/fstatat/faccessat/readlinkat
 * relative to dirfd, fchdir into it, glob (unsorted, sorted, directories
 * only, marked), scandir and scandirat (unsorted and alphasort), and the
 * errors of bad calls. d_off and
 * telldir's cookies are not printed: they are opaque (the file system's hash
 * cookies natively, positions under the shim). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *err(int e)
{
	static char b[32];
	switch (e) {
	case ENOENT: return "ENOENT";
	case ENOTDIR: return "ENOTDIR";
	case EACCES: return "EACCES";
	case EINVAL: return "EINVAL";
	case ELOOP: return "ELOOP";
	case EISDIR: return "EISDIR";
	case EBADF: return "EBADF";
	}
	snprintf(b, sizeof b, "errno%d", e);
	return b;
}

static void entry(const char *tag, const struct dirent *e)
{
	printf("%s %s type=%d ino=%lu reclen=%d\n", tag, e->d_name, e->d_type, (unsigned long)e->d_ino, e->d_reclen);
}

static void at_names(const char *d, DIR *dir)
{
	int fd = dirfd(dir);
	struct dirent *e;
	rewinddir(dir);
	while ((e = readdir(dir))) {
		const char *n = e->d_name;
		struct stat st;
		if (fstatat(fd, n, &st, AT_SYMLINK_NOFOLLOW) == 0)
			printf("fstatat %s mode=%o ino=%lu nlink=%lu size=%lld mtime=%lld\n", n, st.st_mode, (unsigned long)st.st_ino,
			       (unsigned long)st.st_nlink, (long long)(S_ISDIR(st.st_mode) ? 0 : st.st_size), (long long)st.st_mtime);
		else
			printf("fstatat %s %s\n", n, err(errno));
		printf("faccessat %s R_OK=%d\n", n, faccessat(fd, n, R_OK, 0) == 0 ? 0 : errno);
		char l[4096];
		ssize_t k = readlinkat(fd, n, l, sizeof l - 1);
		if (k >= 0) printf("readlinkat %s %.*s\n", n, (int)k, l);
		int f = openat(fd, n, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a fifo: no wait */
		if (f < 0) {
			printf("openat %s %s\n", n, err(errno));
			continue;
		}
		unsigned char head[16] = {0};
		ssize_t r = S_ISREG(st.st_mode) ? read(f, head, sizeof head) : 0;
		unsigned sum = 0;
		for (ssize_t i = 0; i < r; i++) sum = sum * 31 + head[i];
		if (fstat(f, &st) == 0)
			printf("openat %s ino=%lu size=%lld head=%u/%zd\n", n, (unsigned long)st.st_ino,
			       (long long)(S_ISDIR(st.st_mode) ? 0 : st.st_size), sum, r);
		close(f);
	}
	printf("openat nope %s\n", openat(fd, "dlbundle-nope", O_RDONLY) < 0 ? err(errno) : "opened");
	struct stat st;
	printf("fstatat nope/x %s\n", fstatat(fd, "dlbundle-nope/x", &st, 0) < 0 ? err(errno) : "ok");
}

static void probe(const char *d)
{
	printf("== %s\n", d);
	DIR *dir = opendir(d);
	if (!dir) {
		printf("opendir %s\n", err(errno));
		return;
	}
	struct dirent *e;
	long pos[4096];
	int n = 0;
	errno = 0;
	for (;;) {
		long p = telldir(dir);
		if (!(e = readdir(dir))) break;
		if (n < 4096) pos[n++] = p;
		entry("readdir", e);
	}
	printf("readdir end errno=%d\n", errno == 0 ? 0 : 1);
	if (n > 0) {
		seekdir(dir, pos[n / 2]);
		while ((e = readdir(dir))) entry("seek", e);
		rewinddir(dir);
		if ((e = readdir(dir))) entry("rewind", e);
	}
	struct stat st;
	if (fstat(dirfd(dir), &st) == 0)
		printf("fstat dirfd mode=%o ino=%lu nlink=%lu uid=%u mtime=%lld\n", st.st_mode, (unsigned long)st.st_ino,
		       (unsigned long)st.st_nlink, st.st_uid, (long long)st.st_mtime);

	/* readdir_r on a second stream */
	DIR *d2 = opendir(d);
	struct dirent buf, *res;
	while (d2 && readdir_r(d2, &buf, &res) == 0 && res) entry("readdir_r", res);

	/* getdents64 on a third stream's fd: too small a buffer, then small ones */
	DIR *d3 = opendir(d);
	if (d3) {
		char gb[256];
		printf("getdents64 tiny %s\n", getdents64(dirfd(d3), gb, 10) < 0 ? err(errno) : "ok");
		ssize_t k;
		while ((k = getdents64(dirfd(d3), gb, sizeof gb)) > 0)
			for (ssize_t o = 0; o < k;) {
				struct dirent64 *g = (struct dirent64 *)(gb + o);
				printf("getdents64 %s type=%d ino=%lu reclen=%d\n", g->d_name, g->d_type, (unsigned long)g->d_ino, g->d_reclen);
				o += g->d_reclen;
			}
		printf("getdents64 end %zd\n", k);
		closedir(d3);
	}

	/* fdopendir of a dup of a rewound stream's fd (a dup shares the offset) */
	rewinddir(d2);
	int dup_fd = d2 ? dup(dirfd(d2)) : -1;
	DIR *d4 = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
	while (d4 && (e = readdir(d4))) entry("fdopendir", e);
	if (d4) closedir(d4);
	if (d2) closedir(d2);

	at_names(d, dir);

	/* fchdir into it: getcwd, relative lookups */
	int back = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fchdir(dirfd(dir)) == 0) {
		char cwd[4096];
		printf("fchdir getcwd %s\n", getcwd(cwd, sizeof cwd) ? cwd : err(errno));
		rewinddir(dir);
		while ((e = readdir(dir))) {
			if (stat(e->d_name, &st) == 0) printf("relative stat %s ino=%lu\n", e->d_name, (unsigned long)st.st_ino);
			else printf("relative stat %s %s\n", e->d_name, err(errno));
		}
		printf("relative nope %s\n", access("dlbundle-nope", F_OK) < 0 ? err(errno) : "exists");
		if (fchdir(back) != 0) printf("fchdir back %s\n", err(errno));
	} else
		printf("fchdir %s\n", err(errno));
	close(back);
	closedir(dir);

	char p[4200];
	snprintf(p, sizeof p, "%s/dlbundle-nope", d);
	printf("opendir nope %s\n", opendir(p) ? "opened" : err(errno));

	/* glob */
	const char *pats[] = {"*", "*.py", "[_a-m]*", "dlbundle-nope*", "__init__.py"};
	int gflags[] = {GLOB_NOSORT, 0, GLOB_ONLYDIR | GLOB_NOSORT, GLOB_MARK | GLOB_NOSORT};
	for (unsigned i = 0; i < sizeof pats / sizeof *pats; i++)
		for (unsigned j = 0; j < sizeof gflags / sizeof *gflags; j++) {
			glob_t g;
			snprintf(p, sizeof p, "%s/%s", d, pats[i]);
			int rc = glob(p, gflags[j], NULL, &g);
			printf("glob %s flags=%#x rc=%d gl_flags=%#x:", pats[i], gflags[j], rc, rc == 0 ? g.gl_flags : 0);
			for (size_t k = 0; rc == 0 && k < g.gl_pathc; k++) printf(" %s", g.gl_pathv[k] + strlen(d) + 1);
			printf("\n");
			if (rc == 0) globfree(&g);
		}

	/* scandir, scandirat */
	struct dirent **nl;
	for (int sorted = 0; sorted < 2; sorted++) {
		int k = scandir(d, &nl, NULL, sorted ? alphasort : NULL);
		printf("scandir sorted=%d n=%d:", sorted, k);
		for (int i = 0; i < k; i++) {
			printf(" %s/%d/%lu/%d", nl[i]->d_name, nl[i]->d_type, (unsigned long)nl[i]->d_ino, nl[i]->d_reclen);
			free(nl[i]);
		}
		printf("\n");
		if (k >= 0) free(nl);
	}
	char parent[4200];
	snprintf(parent, sizeof parent, "%s", d);
	char *slash = strrchr(parent, '/');
	if (slash && slash != parent) {
		*slash = 0;
		DIR *pd = opendir(parent);
		int pfd = pd ? dirfd(pd) : -1;
		int k = scandirat(pfd, slash + 1, &nl, NULL, NULL);
		printf("scandirat n=%d:", k);
		for (int i = 0; i < k; i++) {
			printf(" %s", nl[i]->d_name);
			free(nl[i]);
		}
		printf("\n");
		if (k >= 0) free(nl);
		if (pd) closedir(pd);
	}
	printf("scandir nope %d %s\n", scandir(p, &nl, NULL, NULL), err(errno));
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		probe(argv[i]);
		fflush(stdout);
	}
	/* more streams open at once than the shim serves (128): every one
	 * lists the same names in the same order (the last ones, from the
	 * original directory, under the shim) */
	if (argc > 1 && getenv("LISTPROBE_MANY")) {
		enum { N = 130 };
		DIR *ds[N];
		unsigned long sums[N];
		int same = 0, opened = 0;
		for (int i = 0; i < N; i++) {
			ds[i] = opendir(argv[1]);
			opened += ds[i] != NULL;
		}
		for (int i = 0; i < N; i++) {
			struct dirent *e;
			unsigned long h = 5381;
			while (ds[i] && (e = readdir(ds[i])))
				for (const char *c = e->d_name; *c; c++) h = h * 33 + (unsigned char)*c;
			sums[i] = h;
			same += sums[i] == sums[0];
		}
		for (int i = 0; i < N; i++)
			if (ds[i]) closedir(ds[i]);
		printf("streams %d opened=%d same=%d\n", N, opened, same);
	}
	/* opendir of a regular file: the first regular name of the first dir */
	if (argc > 1) {
		DIR *d = opendir(argv[1]);
		struct dirent *e;
		while (d && (e = readdir(d)))
			if (e->d_type == DT_REG) {
				char p[4200];
				snprintf(p, sizeof p, "%s/%s", argv[1], e->d_name);
				printf("opendir file %s\n", opendir(p) ? "opened" : err(errno));
				break;
			}
		if (d) closedir(d);
	}
	return 0;
}

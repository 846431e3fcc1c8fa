/* walker.c — the driver of the differential walker test (loader/walker_test.go):
 * the same calls made natively and under the shim, their results compared.
 *
 * stdin holds blocks of commands, one a line, fields separated by tabs; a line
 * "end" closes a block. Each block runs in a child process of its own (fork),
 * so that its chdir and whatever the shim remembers (directories written into)
 * end with it; the driver prints the child's results, then "done" and
 * flushes. Commands:
 *
 *   rp P          realpath(P, buf): the result, or the errno and what glibc
 *                 leaves in buf (the partial path after ENOENT/EACCES)
 *   rpn P         realpath(P, NULL)
 *   canon P       canonicalize_file_name(P)
 *   rpchk P       __realpath_chk(P, buf, sizeof buf) (_FORTIFY_SOURCE callers)
 *   stat P, lstat P, statx P, readlink P, open P, fopen P, opendir P
 *   access P M    access, and faccessat with AT_EACCESS and AT_SYMLINK_NOFOLLOW
 *   cd P          chdir(P)
 *   at D P        with a dirfd D opened O_RDONLY|O_DIRECTORY: openat, fstatat
 *                 (follow, nofollow), faccessat, readlinkat of P
 *   mkdir P       mkdir(P, 0755) (removed again when it succeeded: the tree
 *                 stays as it was), then the stat of P
 *
 * Times at or after the base time (argv[1], seconds) print as "new": a
 * directory this driver wrote into (mkdir, then rmdir) natively has a newer
 * mtime than the image recorded, and the two runs write at different moments.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char *__realpath_chk(const char *, char *, size_t);

static long long base;

static const char *en(int e)
{
	const char *s = strerrorname_np(e);
	return s ? s : "E?";
}

static void ptime(const char *what, long long s, long long ns)
{
	if (s >= base) printf(" %s=new", what);
	else printf(" %s=%lld.%09lld", what, s, ns);
}

static void pst(int rc, const struct stat *st)
{
	if (rc != 0) { printf(" %s\n", en(errno)); return; }
	printf(" mode=%o uid=%u gid=%u nlink=%lu size=%lld blocks=%lld blksize=%ld ino=%lu dev=%lu",
	       st->st_mode, st->st_uid, st->st_gid, (unsigned long)st->st_nlink, (long long)st->st_size,
	       (long long)st->st_blocks, (long)st->st_blksize, (unsigned long)st->st_ino, (unsigned long)st->st_dev);
	ptime("mtime", st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
	ptime("ctime", st->st_ctim.tv_sec, st->st_ctim.tv_nsec);
	ptime("atime", st->st_atim.tv_sec, st->st_atim.tv_nsec);
	printf("\n");
}

static void pstatx(int rc, const struct statx *sx)
{
	if (rc != 0) { printf(" %s\n", en(errno)); return; }
	printf(" mask=%x mode=%o uid=%u gid=%u nlink=%u size=%llu blocks=%llu ino=%llu dev=%u:%u",
	       sx->stx_mask & STATX_BASIC_STATS, sx->stx_mode, sx->stx_uid, sx->stx_gid, sx->stx_nlink,
	       (unsigned long long)sx->stx_size, (unsigned long long)sx->stx_blocks, (unsigned long long)sx->stx_ino,
	       sx->stx_dev_major, sx->stx_dev_minor);
	ptime("mtime", sx->stx_mtime.tv_sec, sx->stx_mtime.tv_nsec);
	printf("\n");
}

/* pcontent: the first bytes of an open file, as a length and a checksum. */
static void pcontent(int fd)
{
	char b[256];
	ssize_t n = read(fd, b, sizeof b);
	unsigned long h = 5381;
	for (ssize_t i = 0; i < n; i++) h = h * 33 + (unsigned char)b[i];
	printf(" read=%zd sum=%lx", n, n > 0 ? h : 0);
}

static void prp(const char *what, const char *p, char *r, char *buf)
{
	printf("%s %s:", what, p);
	if (r) { printf(" = %s\n", r); return; }
	int e = errno;
	printf(" %s", en(e));
	if (buf) {
		if (buf[0] == 1) printf(" buf=untouched");
		else printf(" buf=%s", buf);
	}
	printf("\n");
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void listing(const char *p)
{
	printf("opendir %s:", p);
	DIR *d = opendir(p);
	if (!d) { printf(" %s\n", en(errno)); return; }
	static char names[512][300];
	static char *v[512];
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) && n < 512) {
		/* d_ino of ".." is the listings' area (docs/loader.md, known differences). */
		if (!strcmp(de->d_name, ".."))
			snprintf(names[n], sizeof names[n], "%s/%u", de->d_name, de->d_type);
		else
			snprintf(names[n], sizeof names[n], "%s/%u/%lu", de->d_name, de->d_type, (unsigned long)de->d_ino);
		v[n] = names[n];
		n++;
	}
	closedir(d);
	qsort(v, (size_t)n, sizeof *v, cmp); /* the order is the listings' area too */
	for (int i = 0; i < n; i++) printf(" %s", v[i]);
	printf("\n");
}

static void run(char *cmd, char *a, char *b)
{
	struct stat st;
	static char buf[PATH_MAX + 64];
	if (!strcmp(cmd, "rp")) {
		memset(buf, 1, sizeof buf);
		buf[sizeof buf - 1] = 0;
		prp("rp", a, realpath(a, buf), buf);
	} else if (!strcmp(cmd, "rpn")) {
		char *r = realpath(a, NULL);
		prp("rpn", a, r, NULL);
		free(r);
	} else if (!strcmp(cmd, "canon")) {
		char *r = canonicalize_file_name(a);
		prp("canon", a, r, NULL);
		free(r);
	} else if (!strcmp(cmd, "rpchk")) {
		memset(buf, 1, sizeof buf);
		buf[sizeof buf - 1] = 0;
		prp("rpchk", a, __realpath_chk(a, buf, sizeof buf), buf);
	} else if (!strcmp(cmd, "stat")) {
		printf("stat %s:", a);
		pst(stat(a, &st), &st);
	} else if (!strcmp(cmd, "lstat")) {
		printf("lstat %s:", a);
		pst(lstat(a, &st), &st);
	} else if (!strcmp(cmd, "statx")) {
		struct statx sx;
		printf("statx %s:", a);
		pstatx(statx(AT_FDCWD, a, 0, STATX_BASIC_STATS, &sx), &sx);
		printf("statx-nofollow %s:", a);
		pstatx(statx(AT_FDCWD, a, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx), &sx);
	} else if (!strcmp(cmd, "readlink")) {
		ssize_t n = readlink(a, buf, sizeof buf);
		if (n < 0) printf("readlink %s: %s\n", a, en(errno));
		else printf("readlink %s: = %.*s\n", a, (int)n, buf);
	} else if (!strcmp(cmd, "open")) {
		int fd = open(a, O_RDONLY | O_CLOEXEC);
		printf("open %s:", a);
		if (fd < 0) { printf(" %s\n", en(errno)); return; }
		pcontent(fd);
		pst(fstat(fd, &st), &st);
		close(fd);
	} else if (!strcmp(cmd, "fopen")) {
		FILE *f = fopen(a, "re");
		printf("fopen %s:", a);
		if (!f) { printf(" %s\n", en(errno)); return; }
		pcontent(fileno(f));
		pst(fstat(fileno(f), &st), &st);
		fclose(f);
	} else if (!strcmp(cmd, "opendir")) {
		listing(a);
	} else if (!strcmp(cmd, "access")) {
		int m = atoi(b);
		printf("access %s %d: %s", a, m, access(a, m) == 0 ? "ok" : en(errno));
		printf(" eaccess %s", faccessat(AT_FDCWD, a, m, AT_EACCESS) == 0 ? "ok" : en(errno));
		printf(" nofollow %s\n", faccessat(AT_FDCWD, a, m, AT_SYMLINK_NOFOLLOW) == 0 ? "ok" : en(errno));
	} else if (!strcmp(cmd, "cd")) {
		printf("cd %s: %s\n", a, chdir(a) == 0 ? "ok" : en(errno));
	} else if (!strcmp(cmd, "at")) {
		int d = open(a, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		printf("at %s %s:", a, b);
		if (d < 0) { printf(" dirfd %s\n", en(errno)); return; }
		int fd = openat(d, b, O_RDONLY | O_CLOEXEC);
		if (fd < 0) printf(" openat %s", en(errno));
		else { printf(" openat"); pcontent(fd); close(fd); }
		printf(" fstatat");
		int rc = fstatat(d, b, &st, 0);
		if (rc != 0) printf(" %s", en(errno));
		else printf(" mode=%o ino=%lu size=%lld", st.st_mode, (unsigned long)st.st_ino, (long long)st.st_size);
		rc = fstatat(d, b, &st, AT_SYMLINK_NOFOLLOW);
		printf(" nofollow");
		if (rc != 0) printf(" %s", en(errno));
		else printf(" mode=%o ino=%lu size=%lld", st.st_mode, (unsigned long)st.st_ino, (long long)st.st_size);
		printf(" faccessat %s", faccessat(d, b, R_OK, 0) == 0 ? "ok" : en(errno));
		ssize_t n = readlinkat(d, b, buf, sizeof buf);
		if (n < 0) printf(" readlinkat %s\n", en(errno));
		else printf(" readlinkat = %.*s\n", (int)n, buf);
		close(d);
	} else if (!strcmp(cmd, "mkdir")) {
		int rc = mkdir(a, 0755);
		printf("mkdir %s: %s", a, rc == 0 ? "ok" : en(errno));
		if (rc == 0) printf(" rmdir %s", rmdir(a) == 0 ? "ok" : en(errno));
		printf(" then stat");
		pst(stat(a, &st), &st);
	} else {
		printf("unknown command %s\n", cmd);
	}
}

int main(int argc, char **argv)
{
	if (argc != 2) { fprintf(stderr, "usage: walker BASE-TIME < commands\n"); return 2; }
	base = atoll(argv[1]);
	static char line[65536], block[1 << 20];
	for (;;) {
		/* One block: read it whole, then run it in a child. */
		size_t bn = 0;
		int eof = 1;
		while (fgets(line, sizeof line, stdin)) {
			if (!strcmp(line, "end\n")) { eof = 0; break; }
			size_t l = strlen(line);
			if (bn + l < sizeof block) { memcpy(block + bn, line, l); bn += l; }
		}
		if (eof && bn == 0) return 0;
		block[bn] = 0;
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0) { perror("fork"); return 1; }
		if (pid == 0) {
			for (char *s = block, *nl; *s; s = nl + 1) {
				nl = strchr(s, '\n');
				if (!nl) break;
				*nl = 0;
				char *f[3] = {s, "", ""};
				char *t = strchr(s, '\t');
				if (t) { *t = 0; f[1] = t + 1; t = strchr(f[1], '\t'); if (t) { *t = 0; f[2] = t + 1; } }
				run(f[0], f[1], f[2]);
			}
			fflush(stdout);
			_exit(0);
		}
		int status;
		waitpid(pid, &status, 0);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) printf("child status %#x\n", status);
		printf("done\n");
		fflush(stdout);
		if (eof) return 0;
	}
}

/* writes.c — read-your-writes probe for the C entry points Python does not
 * use (creat, renameat2, symlinkat, linkat, mknodat, mkfifoat, lutimes,
 * futimesat, fchownat, fopen for writing, unlinkat with AT_REMOVEDIR), and
 * dlopen of a library it wrote there (argv[2]: a library to copy): writes
 * into the bundled directory argv[1] and prints what the process and a child
 * then observe. Output natively and under the shim must be byte-identical;
 * the tree's names and contents are put back at the end. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <unistd.h>

static const char *D;
static const char *names[] = {"data.txt", "old.txt", "c-creat", "c-renamed", "c-sym", "c-hard", "c-node", "c-fifo",
			      "c-fopen", "c-dir", "c-dir/inner", "sub/x"};

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void show(const char *tag)
{
	char p[4096], *ls[256];
	int n = 0;
	DIR *d = opendir(D);
	struct dirent *e;
	while (d && (e = readdir(d)) && n < 256)
		if (e->d_name[0] != '.') ls[n++] = strdup(e->d_name);
	if (d) closedir(d);
	qsort(ls, (size_t)n, sizeof *ls, cmp);
	printf("%s listing:", tag);
	for (int i = 0; i < n; i++) { printf(" %s", ls[i]); free(ls[i]); }
	printf("\n");
	for (unsigned i = 0; i < sizeof names / sizeof *names; i++) {
		struct stat st;
		snprintf(p, sizeof p, "%s/%s", D, names[i]);
		if (lstat(p, &st) != 0) { printf("%s %s: %s\n", tag, names[i], strerror(errno)); continue; }
		char *r = realpath(p, NULL);
		/* times only of the tree's own files: created ones differ between runs */
		long long mt = i < 2 || !strcmp(names[i], "sub/x") ? (long long)st.st_mtime : 0;
		printf("%s %s: mode=%o size=%lld nlink=%lu mtime=%lld realpath=%s access=%d\n", tag, names[i], st.st_mode,
		       (long long)st.st_size, (unsigned long)st.st_nlink, mt, r ? r : "-", access(p, W_OK));
		free(r);
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) return 2;
	D = argv[1];
	setvbuf(stdout, NULL, _IOLBF, 0);
	char p[4096], q[4096];
	struct stat x0;
	snprintf(p, sizeof p, "%s/sub/x", D);
	if (stat(p, &x0) != 0) return 1;
	show("before");
	snprintf(p, sizeof p, "%s/c-creat", D);
	int fd = creat(p, 0644);
	if (fd >= 0) { (void)!write(fd, "creat\n", 6); close(fd); }
	show("creat");
	int dfd = open(D, O_RDONLY | O_DIRECTORY);
	renameat2(dfd, "c-creat", dfd, "c-renamed", RENAME_NOREPLACE);
	symlinkat("data.txt", dfd, "c-sym");
	linkat(dfd, "data.txt", dfd, "c-hard", 0);
	mknodat(dfd, "c-node", S_IFREG | 0600, 0);
	mkfifoat(dfd, "c-fifo", 0600);
	mkdirat(dfd, "c-dir", 0755);
	snprintf(p, sizeof p, "%s/c-dir/inner", D);
	FILE *f = fopen(p, "w");
	if (f) { fputs("inner\n", f); fclose(f); }
	snprintf(p, sizeof p, "%s/c-fopen", D);
	f = fopen(p, "a");
	if (f) { fputs("appended\n", f); fclose(f); }
	struct timeval tv[2] = {{1, 0}, {2, 0}};
	futimesat(dfd, "sub/x", tv);
	snprintf(p, sizeof p, "%s/c-sym", D);
	lutimes(p, tv);
	fchownat(dfd, "old.txt", getuid(), getgid(), AT_SYMLINK_NOFOLLOW);
	show("written");
	/* A library written at run time (a JIT or build cache), then dlopen'ed:
	 * ld.so's search (the audit object) must see it too. */
	if (argc > 2) {
		FILE *in = fopen(argv[2], "rb");
		snprintf(p, sizeof p, "%s/c-lib.so", D);
		FILE *out = fopen(p, "wb");
		char buf[65536];
		size_t k;
		while (in && out && (k = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, k, out);
		if (in) fclose(in);
		if (out) fclose(out);
		void *h = dlopen(p, RTLD_NOW);
		int (*fn)(void) = h ? (int (*)(void))dlsym(h, "probe_dep_value") : NULL;
		Dl_info info;
		printf("dlopen written: %s %d %s\n", h ? "ok" : dlerror(), fn ? fn() : -1,
		       fn && dladdr((void *)fn, &info) ? info.dli_fname : "-");
		unlink(p);
	}
	fflush(stdout);
	snprintf(q, sizeof q, "test -e %s/c-dir/inner && test -p %s/c-fifo && echo child-sees-writes", D, D);
	printf("child: %d\n", system(q));
	/* Put names and contents back. */
	unlinkat(dfd, "c-renamed", 0);
	unlinkat(dfd, "c-sym", 0);
	unlinkat(dfd, "c-hard", 0);
	unlinkat(dfd, "c-node", 0);
	unlinkat(dfd, "c-fifo", 0);
	unlinkat(dfd, "c-fopen", 0);
	unlinkat(dfd, "c-dir/inner", 0);
	unlinkat(dfd, "c-dir", AT_REMOVEDIR);
	struct timespec ts[2] = {x0.st_atim, x0.st_mtim};
	utimensat(dfd, "sub/x", ts, 0);
	close(dfd);
	show("restored");
	return 0;
}

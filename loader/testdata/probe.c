/* probe.c — prints what a C program observes of the tree T (argv[2]), for the
 * differential conformance test: its output natively and under the shim must
 * be byte-identical. Modes: "full" (everything) and "helper" (what an exec'd
 * bundled program sees of itself). */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
int probe_lib_where(void);    /* libprobe.so */
static const char *T;

/* own reports whether name is one of the shim's own files (the LD_AUDIT and
 * LD_PRELOAD objects, the table): those are visible like any preloaded
 * library; any other name under the stage is a leak. */
static int own(const char *name)
{
	const char *st = getenv("DLBUNDLE_STAGE");
	if (!st) return 0;
	size_t n = strlen(st);
	return !strncmp(name, st, n) && (!strncmp(name + n, "/shim/", 6) || !strncmp(name + n, "/table", 6));
}

static void path(char *out, const char *rel) { snprintf(out, 4096, "%s%s", T, rel); }

static const char *err(int e)
{
	switch (e) {
	case ENOENT: return "ENOENT";
	case ENOTDIR: return "ENOTDIR";
	case EACCES: return "EACCES";
	case ELOOP: return "ELOOP";
	case EINVAL: return "EINVAL";
	default: { static char b[32]; snprintf(b, sizeof b, "errno%d", e); return b; }
	}
}

static void pstat(const char *what, const char *rel, int rc, struct stat *st)
{
	if (rc != 0) { printf("%s %s: %s\n", what, rel, err(errno)); return; }
	printf("%s %s: mode=%o size=%lld mtime=%lld.%09ld uid=%d gid=%d nlink=%lu ino=%lu dev=%lu "
	       "atime=%lld.%09ld ctime=%lld.%09ld blocks=%lld blksize=%ld\n", what, rel,
	       st->st_mode, (long long)st->st_size, (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec, st->st_uid,
	       st->st_gid, (unsigned long)st->st_nlink, (unsigned long)st->st_ino, (unsigned long)st->st_dev,
	       (long long)st->st_atim.tv_sec, st->st_atim.tv_nsec, (long long)st->st_ctim.tv_sec, st->st_ctim.tv_nsec,
	       (long long)st->st_blocks, (long)st->st_blksize);
}

static const char *rels[] = {
	"", "/lib", "/lib/libprobe.so", "/lib/libdep.so", "/lib/link-to-probe.so", "/lib/abs-link.so", "/lib/dangling",
	"/lib/loop1", "/lib/nope.so", "/lib/libprobe.so/x", "/data", "/data/hello.txt", "/data/", "/data/./hello.txt",
	"/data/../lib/libdep.so", "/data/sub/../hello.txt", "/nolib/libx.so", "/bin/probe", "/data/noperm.txt",
	"/data/notlisted.txt", "/lib/plugins", "/data/hard.txt", "/data/big",
};
#define NRELS (sizeof rels / sizeof *rels)

/* relpaths: paths relative to a working directory the image does not
 * bundle (T/../outside/sub: listed, external), with ".." over it. */
static const char *relrels[] = {
	"../../tree/data/hello.txt", "../../tree/lib/link-to-probe.so", "../../tree/data/../lib/libdep.so",
	"../../tree/nolib/x", "../file", ".", "..", "../../tree/lib/to-outside-dir/sub/../file", "./../../tree/data/sub/x",
};
static void relpaths(void)
{
	char d[4096];
	snprintf(d, sizeof d, "%s/../outside/sub", T);
	if (chdir(d) != 0) { printf("chdir: %s\n", err(errno)); return; }
	for (unsigned i = 0; i < sizeof relrels / sizeof *relrels; i++) {
		const char *p = relrels[i];
		struct stat st;
		pstat("rel stat", p, stat(p, &st), &st);
		pstat("rel lstat", p, lstat(p, &st), &st);
		char *r = realpath(p, NULL);
		printf("rel realpath %s: %s\n", p, r ? r : err(errno));
		free(r);
		int fd = open(p, O_RDONLY);
		printf("rel open %s: %s\n", p, fd >= 0 ? "ok" : err(errno));
		if (fd >= 0) close(fd);
		printf("rel access %s: %s\n", p, access(p, R_OK) == 0 ? "ok" : err(errno));
	}
	if (chdir("/") != 0) printf("chdir /: %s\n", err(errno));
}

static void stats(void)
{
	char p[4096];
	struct stat st;
	for (unsigned i = 0; i < NRELS; i++) {
		path(p, rels[i]);
		pstat("stat", rels[i], stat(p, &st), &st);
		pstat("lstat", rels[i], lstat(p, &st), &st);
		pstat("fstatat-nofollow", rels[i], fstatat(AT_FDCWD, p, &st, AT_SYMLINK_NOFOLLOW), &st);
		struct statx sx;
		if (statx(AT_FDCWD, p, 0, STATX_BASIC_STATS, &sx) != 0) printf("statx %s: %s\n", rels[i], err(errno));
		else printf("statx %s: mode=%o size=%llu mtime=%lld.%09u ino=%llu dev=%u:%u atime=%lld.%09u nlink=%u blocks=%llu\n",
			    rels[i], sx.stx_mode, (unsigned long long)sx.stx_size, (long long)sx.stx_mtime.tv_sec,
			    sx.stx_mtime.tv_nsec, (unsigned long long)sx.stx_ino, sx.stx_dev_major, sx.stx_dev_minor,
			    (long long)sx.stx_atime.tv_sec, sx.stx_atime.tv_nsec, sx.stx_nlink, (unsigned long long)sx.stx_blocks);
		for (int m = 0; m < 4; m++) {
			int modes[] = {F_OK, R_OK, W_OK, X_OK};
			int rc = access(p, modes[m]);
			printf("access%d %s: %s\n", m, rels[i], rc == 0 ? "ok" : err(errno));
		}
		char buf[4096];
		ssize_t n = readlink(p, buf, sizeof buf);
		if (n < 0) printf("readlink %s: %s\n", rels[i], err(errno));
		else printf("readlink %s: %.*s\n", rels[i], (int)n, buf);
		char *r = realpath(p, NULL);
		if (!r) printf("realpath %s: %s\n", rels[i], err(errno));
		else { printf("realpath %s: %s\n", rels[i], r); free(r); }
		int fd = open(p, O_RDONLY);
		if (fd < 0) printf("open %s: %s\n", rels[i], err(errno));
		else {
			char c[64];
			ssize_t k = read(fd, c, sizeof c);
			printf("open %s: read %zd\n", rels[i], k);
			pstat("fstat", rels[i], fstat(fd, &st), &st);
			pstat("fstatat-empty", rels[i], fstatat(fd, "", &st, AT_EMPTY_PATH), &st);
			if (statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &sx) == 0)
				printf("statx-fd %s: ino=%llu nlink=%u dev=%u:%u atime=%lld\n", rels[i], (unsigned long long)sx.stx_ino,
				       sx.stx_nlink, sx.stx_dev_major, sx.stx_dev_minor, (long long)sx.stx_atime.tv_sec);
			close(fd);
		}
		FILE *f = fopen(p, "r");
		if (!f) printf("fopen %s: %s\n", rels[i], err(errno));
		else {
			printf("fopen %s: ok\n", rels[i]);
			pstat("fstat-fopen", rels[i], fstat(fileno(f), &st), &st);
			fclose(f);
		}
	}
}

static int cmpstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void listdir(const char *rel)
{
	char p[4096], *names[512];
	int n = 0;
	path(p, rel);
	DIR *d = opendir(p);
	if (!d) { printf("opendir %s: %s\n", rel, err(errno)); return; }
	struct dirent *e;
	while ((e = readdir(d)) && n < 512) {
		char *s;
		if (asprintf(&s, "%s type=%d ino=%lu", e->d_name, e->d_type, (unsigned long)e->d_ino) > 0) names[n++] = s;
	}
	closedir(d);
	qsort(names, (size_t)n, sizeof *names, cmpstr);
	for (int i = 0; i < n; i++) { printf("opendir %s: %s\n", rel, names[i]); free(names[i]); }
}

static int phdr_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size; (void)data;
	if ((strstr(info->dlpi_name, T) || strstr(info->dlpi_name, "stage")) && !own(info->dlpi_name)) printf("dl_iterate_phdr: %s\n", info->dlpi_name);
	return 0;
}

static void maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[8192], last[8192] = "";
	if (!f) { printf("maps: %s\n", err(errno)); return; }
	while (fgets(line, sizeof line, f)) {
		char *s = strchr(line, '/');
		if (!s || !(strstr(s, T) || strstr(s, "stage")) || own(s)) continue;
		if (strcmp(s, last) != 0) printf("maps: %s", s);
		strcpy(last, s);
	}
	fclose(f);
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/maps", (int)getpid());
	int fd = open(p, O_RDONLY);
	char b[65536];
	ssize_t n = fd < 0 ? -1 : read(fd, b, sizeof b - 1);
	if (n >= 0) b[n] = 0;
	printf("maps by pid: staged leak=%d\n", n >= 0 && strstr(b, "/stage/root/") != NULL);
	if (fd >= 0) close(fd);
}

static void *thread_main(void *arg)
{
	char p[4096];
	struct stat st;
	long ok = 0;
	for (int i = 0; i < 2000; i++) {
		path(p, rels[i % NRELS]);
		ok += stat(p, &st) == 0 ? (long)st.st_size : -1;
	}
	*(long *)arg = ok;
	return NULL;
}

static void self(void)
{
	char b[4096];
	ssize_t n = readlink("/proc/self/exe", b, sizeof b);
	printf("exe: %.*s\n", (int)(n < 0 ? 0 : n), b);
	char *rp = realpath("/proc/self/exe", NULL); /* through /proc into the stage: the original */
	printf("realpath exe: %s\n", rp ? rp : err(errno));
	free(rp);
	Dl_info info;
	if (dladdr((void *)probe_lib_where, &info)) printf("dladdr: %s\n", info.dli_fname);
	printf("lib: %d\n", probe_lib_where());
}

static void fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d))) n++;
	if (d) closedir(d);
	printf("open fds: %d\n", n - 3); /* ., .., the dir itself */
}

static void spawn(const char *what, char *const argv[])
{
	pid_t pid;
	fflush(stdout);
	int rc = posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ);
	if (rc != 0) { printf("%s: spawn %s\n", what, err(rc)); return; }
	int status;
	waitpid(pid, &status, 0);
	printf("%s: status %d\n", what, WEXITSTATUS(status));
}

/* paths: one line of results per path read from stdin (the random-path
 * differential test). */
static void paths(void)
{
	char line[8192];
	while (fgets(line, sizeof line, stdin)) {
		line[strcspn(line, "\n")] = 0;
		struct stat st;
		int rc = stat(line, &st);
		printf("%s | stat %s", line, rc == 0 ? "" : err(errno));
		if (rc == 0) printf("%o %lld %lu", st.st_mode, (long long)st.st_size, (unsigned long)st.st_ino);
		rc = lstat(line, &st);
		printf(" | lstat %s", rc == 0 ? "" : err(errno));
		if (rc == 0) printf("%o %lld %lu", st.st_mode, (long long)st.st_size, (unsigned long)st.st_ino);
		char *r = realpath(line, NULL);
		printf(" | realpath %s", r ? r : err(errno));
		free(r);
		int fd = open(line, O_RDONLY);
		printf(" | open %s", fd >= 0 ? "ok" : err(errno));
		if (fd >= 0) close(fd);
		printf(" | access %s", access(line, R_OK) == 0 ? "ok" : err(errno));
		char b[4096];
		ssize_t n = readlink(line, b, sizeof b);
		printf(" | readlink %.*s\n", n < 0 ? 0 : (int)n, n < 0 ? "" : b);
	}
}

int main(int argc, char **argv)
{
	if (argc < 3) return 2;
	T = argv[2];
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);
	if (strcmp(argv[1], "paths") == 0) { paths(); return 0; }
	if (strcmp(argv[1], "relpaths") == 0) { relpaths(); return 0; }
	setvbuf(stdout, NULL, _IOLBF, 0);
	fds();
	self();
	if (strcmp(argv[1], "helper") == 0) return 0;
	stats();
	relpaths();
	listdir("");
	listdir("/data/big");
	listdir("/lib");
	listdir("/data");
	listdir("/nolib");
	listdir("/data/hello.txt");
	dl_iterate_phdr(phdr_cb, NULL);
	void *h = dlopen("libplug.so", RTLD_NOW);
	if (!h) printf("dlopen libplug.so: %s\n", dlerror());
	else {
		int (*fn)(void) = (int (*)(void))dlsym(h, "plug_value");
		printf("dlopen libplug.so: %d\n", fn ? fn() : -1);
		Dl_info info;
		if (fn && dladdr((void *)fn, &info)) printf("dladdr plug: %s\n", info.dli_fname);
		char origin[4096];
		if (dlinfo(h, RTLD_DI_ORIGIN, origin) == 0) printf("dlinfo origin plug: %s\n", origin);
	}
	if (!dlopen("libnothere.so", RTLD_NOW)) printf("dlopen libnothere.so: %s\n", dlerror());
	char bad[4096];
	path(bad, "/lib/libbad.so");
	if (!dlopen(bad, RTLD_NOW)) printf("dlopen libbad.so: %s\n", dlerror());
	maps();
	pthread_t th[4];
	long res[4];
	for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, thread_main, &res[i]);
	for (int i = 0; i < 4; i++) { pthread_join(th[i], NULL); printf("thread %d: %ld\n", i, res[i]); }
	char helper[4096];
	path(helper, "/bin/probe");
	char *a1[] = {helper, "helper", (char *)T, NULL};
	spawn("posix_spawn helper", a1);
	char cmd[8192];
	snprintf(cmd, sizeof cmd, "%s helper %s && test -e %s/data/hello.txt && ! test -e %s/data/nope && echo dash-ok", helper, T, T, T);
	char *a2[] = {"dash", "-c", cmd, NULL};
	spawn("dash", a2);
	pid_t pid = vfork();
	if (pid == 0) { execv(helper, (char *[]){helper, "helper", (char *)T, NULL}); _exit(127); }
	int status;
	waitpid(pid, &status, 0);
	printf("vfork+execv: status %d\n", WEXITSTATUS(status));
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		char pathvar[8192];
		snprintf(pathvar, sizeof pathvar, "%s/nolib:%s/data/hello.txt:%s/bin:/usr/bin", T, T, T);
		setenv("PATH", pathvar, 1);
		execvp("probe", (char *[]){"probe", "helper", (char *)T, NULL});
		_exit(127);
	}
	waitpid(pid, &status, 0);
	printf("fork+execvp: status %d\n", WEXITSTATUS(status));
	return 0;
}

/* hard.c — the probe of loader/shimhard_test.go: the shim's C at its edges.
 *
 *   hard pass DIR N     stat N distinct missing paths below DIR whose names hold
 *                       '"', '\', control characters, bytes >= 0x80, some longer
 *                       than 255 bytes in total (they pass through the shim)
 *   hard access PATH    access(PATH, R_OK) and euidaccess: "0" or the errno name
 *   hard name PATH      stat, lstat, open, access, readlink of PATH: the result of each
 *   hard exit           _exit(0) right after setting DLB_IN_EXIT=1 (see snoop.c)
 *   hard objects        the names dl_iterate_phdr shows, one a line
 *   hard env            the environment as the app sees it, one entry a line
 *   hard maps SUFFIX    how many lines of /proc/self/maps end in SUFFIX
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *res(int rc)
{
	static char b[64];
	if (rc >= 0) return "0";
	snprintf(b, sizeof b, "%s", strerrorname_np(errno));
	return b;
}

static int obj(struct dl_phdr_info *i, size_t n, void *d)
{
	(void)n; (void)d;
	printf("%s\n", i->dlpi_name);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) return 2;
	if (!strcmp(argv[1], "pass") && argc == 4) {
		int n = atoi(argv[3]);
		for (int i = 0; i < n; i++) {
			char p[4096];
			int o = snprintf(p, sizeof p, "%s/q\"b\\s\x01\x1f\t\xff\xc3\xa9-%d-", argv[2], i);
			int len = i % 7 == 0 ? 1000 : 200; /* some longer than a 255-byte slot */
			while (o < len) {
				p[o] = "\"\\\n\x7f"[o % 4];
				o++;
				if (o % 100 == 0) p[o++] = '/';
			}
			p[o] = 0;
			struct stat st;
			stat(p, &st);
		}
		return 0;
	}
	if (!strcmp(argv[1], "access") && argc == 3) {
		printf("access %s\n", res(access(argv[2], R_OK)));
		printf("euidaccess %s\n", res(euidaccess(argv[2], R_OK)));
		printf("faccessat %s\n", res(faccessat(AT_FDCWD, argv[2], R_OK, AT_EACCESS)));
		int fd = open(argv[2], O_RDONLY);
		printf("open %s\n", res(fd));
		return 0;
	}
	if (!strcmp(argv[1], "name") && argc == 3) {
		struct stat st;
		printf("stat %s\n", res(stat(argv[2], &st)));
		printf("lstat %s\n", res(lstat(argv[2], &st)));
		printf("open %s\n", res(open(argv[2], O_RDONLY)));
		printf("access %s\n", res(access(argv[2], F_OK)));
		char b[64];
		printf("readlink %s\n", res((int)readlink(argv[2], b, sizeof b)));
		return 0;
	}
	if (!strcmp(argv[1], "exit")) {
		setenv("DLB_IN_EXIT", "1", 1);
		_exit(0);
	}
	if (!strcmp(argv[1], "maps") && argc == 3) {
		FILE *f = fopen("/proc/self/maps", "r");
		if (!f) return 1;
		char line[8192];
		size_t n = 0, sl = strlen(argv[2]);
		while (fgets(line, sizeof line, f)) {
			size_t l = strcspn(line, "\n");
			n += l >= sl && !memcmp(line + l - sl, argv[2], sl);
		}
		fclose(f);
		printf("%zu\n", n);
		return 0;
	}
	if (!strcmp(argv[1], "env")) {
		for (char **e = environ; *e; e++) printf("%s\n", *e);
		return 0;
	}
	if (!strcmp(argv[1], "objects")) {
		dl_iterate_phdr(obj, NULL);
		return 0;
	}
	return 2;
}

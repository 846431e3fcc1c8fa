#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		struct stat st;
		errno = 0; int s = stat(argv[i], &st); int se = errno;
		errno = 0; int fd = open(argv[i], O_RDONLY); int oe = errno;
		errno = 0; FILE *f = fopen(argv[i], "r"); int fe = errno;
		errno = 0; int a = access(argv[i], R_OK); int ae = errno;
		printf("%s: stat=%d %s open=%s %s fopen=%s %s access(R_OK)=%d %s\n", argv[i], s, strerrorname_np(se) ?: "0",
		       fd < 0 ? "-1" : "ok", strerrorname_np(oe) ?: "0", f ? "ok" : "NULL", strerrorname_np(fe) ?: "0", a, strerrorname_np(ae) ?: "0");
	}
	return 0;
}

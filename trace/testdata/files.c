// files: the plain lookups of a C program, with paths given on the command line.
//   files DIR   where DIR holds data.txt, sub/ and link -> data.txt
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc != 2) return 2;
	char p[4096], buf[256];
	struct stat st;
	if (chdir(argv[1]) != 0) return 3;
	int fd = open("data.txt", O_RDONLY);              // relative to the cwd
	if (fd < 0) return 4;
	close(fd);
	stat("missing-1.txt", &st);                        // ENOENT
	snprintf(p, sizeof p, "%s/data.txt/not-a-dir", argv[1]);
	stat(p, &st);                                      // ENOTDIR
	lstat("link", &st);
	access("missing-2.txt", R_OK);                     // ENOENT
	ssize_t n = readlink("link", buf, sizeof buf - 1); // path2 = data.txt
	if (n < 0) return 5;
	int dfd = open("sub", O_RDONLY | O_DIRECTORY);
	int f2 = openat(dfd, "../data.txt", O_RDONLY);     // relative to a dirfd
	if (f2 < 0) return 6;
	close(f2);
	fstat(dfd, &st);                                   // fd-based: not a lookup
	DIR *d = fdopendir(dfd);
	while (readdir(d) != NULL) {}
	closedir(d);
	mkdir("newdir", 0755);
	int w = open("newdir/out.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (w < 0) return 7;
	if (write(w, "x", 1) != 1) return 8;
	close(w);
	rename("newdir/out.txt", "newdir/out2.txt");
	symlink("out2.txt", "newdir/sym");
	unlink("newdir/sym");
	unlink("newdir/out2.txt");
	rmdir("newdir");
	if (chdir("sub") != 0) return 9;
	stat("missing-3.txt", &st);                        // relative to the new cwd
	return 0;
}

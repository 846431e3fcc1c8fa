#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		errno = 0;
		char *r = realpath(argv[i], NULL);
		printf("realpath(%s) = %s %s\n", argv[i], r ? r : "NULL", r ? "" : strerrorname_np(errno));
	}
	return 0;
}

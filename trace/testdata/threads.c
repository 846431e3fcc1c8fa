// threads: N threads, each opens its own file: threads DIR N
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *dir;

static void *worker(void *arg) {
	char p[4096];
	snprintf(p, sizeof p, "%s/t%ld.txt", dir, (long)arg);
	int fd = open(p, O_RDONLY);
	if (fd >= 0) close(fd);
	return NULL;
}

int main(int argc, char **argv) {
	if (argc != 3) return 2;
	dir = argv[1];
	long n = atol(argv[2]);
	pthread_t th[64];
	for (long i = 0; i < n && i < 64; i++) pthread_create(&th[i], NULL, worker, (void *)i);
	for (long i = 0; i < n && i < 64; i++) pthread_join(th[i], NULL);
	return 0;
}

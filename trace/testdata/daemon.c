// daemon: double-forks a child that detaches, points its stdio at /dev/null
// and sleeps SECONDS; the app writes the child's pid to PIDFILE and exits at
// once, so the child outlives the traced app.   daemon SECONDS PIDFILE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc != 3) return 2;
	int secs = atoi(argv[1]);
	int pfd[2];
	if (pipe(pfd) != 0) return 2;
	if (fork() == 0) {
		setsid();
		if (fork() == 0) {
			int null = open("/dev/null", O_RDWR);
			dup2(null, 0);
			dup2(null, 1);
			dup2(null, 2);
			close(null);
			pid_t me = getpid();
			if (write(pfd[1], &me, sizeof me) != sizeof me) _exit(1);
			close(pfd[0]);
			close(pfd[1]);
			sleep(secs);
			_exit(0);
		}
		_exit(0);
	}
	close(pfd[1]);
	pid_t d;
	if (read(pfd[0], &d, sizeof d) != sizeof d) return 3;
	FILE *f = fopen(argv[2], "w");
	if (!f) return 4;
	fprintf(f, "%d\n", (int)d);
	return fclose(f) == 0 ? 0 : 5;
}

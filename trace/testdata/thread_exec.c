// thread_exec: a second thread execs /bin/true while the main thread waits;
// after the exec the process keeps the main thread's id.
#include <pthread.h>
#include <unistd.h>

static void *run(void *arg) {
	(void)arg;
	execl("/bin/true", "true", (char *)NULL);
	_exit(127);
}

int main(void) {
	pthread_t th;
	pthread_create(&th, NULL, run, NULL);
	for (;;) pause();
}

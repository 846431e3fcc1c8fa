// spawn: fork+exec and posix_spawn (vfork-style clone) of /bin/cat on FILE.
//   spawn fork FILE | spawn posix FILE
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv) {
	if (argc != 3) return 2;
	char *args[] = {"cat", argv[2], NULL};
	pid_t pid;
	if (strcmp(argv[1], "fork") == 0) {
		pid = fork();
		if (pid == 0) {
			execv("/bin/cat", args);
			_exit(127);
		}
	} else if (posix_spawn(&pid, "/bin/cat", NULL, NULL, args, environ) != 0) {
		return 3;
	}
	int st;
	if (waitpid(pid, &st, 0) != pid) return 4;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 5;
}

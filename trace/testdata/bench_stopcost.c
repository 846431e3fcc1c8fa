// The cost of one ptrace stop on this machine, for make bench-trace: the
// floor under any pilot's per-call cost. A child calls
// fstatat("/nonexistent/x") N times; with MODE "traced" it runs under a
// seccomp filter that stops newfstatat in this tracer, which resumes it at
// once; with "work" the tracer also does what dlbundle does at an answered
// stop (PTRACE_GETREGS, process_vm_readv of the path, its own fstatat).
// Prints microseconds per call.
//
// Usage (bench_trace.py builds it): bench_stopcost N untraced|traced|work
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: %s N untraced|traced|work\n", argv[0]);
		return 2;
	}
	int n = atoi(argv[1]);
	int traced = strcmp(argv[2], "untraced") != 0, work = strcmp(argv[2], "work") == 0;
	int pipefd[2];
	if (pipe(pipefd)) return 1;
	pid_t pid = fork();
	if (pid == 0) {
		if (traced) {
			ptrace(PTRACE_TRACEME, 0, 0, 0);
			raise(SIGSTOP);
			struct sock_filter f[] = {
				BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
				BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_newfstatat, 0, 1),
				BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE),
				BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
			};
			struct sock_fprog prog = {4, f};
			if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)) {
				perror("seccomp");
				_exit(1);
			}
		}
		struct stat st;
		double t0 = now();
		for (int i = 0; i < n; i++) fstatat(AT_FDCWD, "/nonexistent/x", &st, 0);
		double us = (now() - t0) / n * 1e6;
		if (write(pipefd[1], &us, sizeof us) != sizeof us) _exit(1);
		_exit(0);
	}
	int ws;
	if (traced) {
		waitpid(pid, &ws, 0); // the SIGSTOP
		ptrace(PTRACE_SETOPTIONS, pid, 0, PTRACE_O_TRACESECCOMP | PTRACE_O_EXITKILL);
		ptrace(PTRACE_CONT, pid, 0, 0);
		char buf[4096];
		for (;;) {
			if (waitpid(pid, &ws, __WALL) < 0 || WIFEXITED(ws) || WIFSIGNALED(ws)) break;
			if (work && (ws >> 16) == PTRACE_EVENT_SECCOMP) {
				struct user_regs_struct r;
				ptrace(PTRACE_GETREGS, pid, 0, &r);
				size_t len = 4096 - (r.rsi % 4096);
				struct iovec local = {buf, len}, remote = {(void *)r.rsi, len};
				struct stat st;
				if (process_vm_readv(pid, &local, 1, &remote, 1, 0) > 0) {
					buf[sizeof buf - 1] = 0;
					fstatat(AT_FDCWD, buf, &st, 0);
				}
			}
			ptrace(PTRACE_CONT, pid, 0, 0);
		}
	} else {
		waitpid(pid, &ws, 0);
	}
	double us;
	if (read(pipefd[0], &us, sizeof us) != sizeof us) return 1;
	printf("%.2f\n", us);
	return 0;
}

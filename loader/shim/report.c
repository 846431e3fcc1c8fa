/* report.c — see report.h. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "report.h"
#include "table.h"

#define MAX_PATHS 512
#define PATH_SLOT 256

static char report_file[1024];
static uint64_t counts[3];
static uint64_t path_hash[MAX_PATHS * 2]; /* open-addressing set of seen passed-through paths */
static char paths[MAX_PATHS][PATH_SLOT];
static uint32_t npaths, dropped;
static pid_t report_pid; /* the process whose counts these are */

/* After fork the child starts counting afresh (the parent reports its own). */
static void report_child_reset(void)
{
	report_pid = getpid();
	memset(counts, 0, sizeof counts);
	memset(path_hash, 0, sizeof path_hash);
	npaths = dropped = 0;
}

void report_init(void)
{
	const char *f = getenv("DLBUNDLE_REPORT");
	if (!f || !f[0] || strlen(f) >= sizeof report_file) return;
	strcpy(report_file, f);
	report_pid = getpid();
	pthread_atfork(NULL, NULL, report_child_reset);
}

void report_count(int kind, const char *p)
{
	if (!report_file[0]) return;
	__atomic_fetch_add(&counts[kind], 1, __ATOMIC_RELAXED);
	if (kind != REPORT_PASSED || !p) return;
	size_t n = strlen(p);
	uint64_t h = dlb_hash(p, n) | 1;
	for (uint32_t i = (uint32_t)h % (MAX_PATHS * 2), k = 0; k < MAX_PATHS * 2; k++, i = (i + 1) % (MAX_PATHS * 2)) {
		uint64_t cur = __atomic_load_n(&path_hash[i], __ATOMIC_RELAXED);
		if (cur == h) return; /* seen */
		if (cur != 0) continue;
		if (!__atomic_compare_exchange_n(&path_hash[i], &cur, h, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
			if (cur == h) return;
			continue;
		}
		uint32_t slot = __atomic_fetch_add(&npaths, 1, __ATOMIC_RELAXED);
		if (slot >= MAX_PATHS) { __atomic_fetch_add(&dropped, 1, __ATOMIC_RELAXED); return; }
		if (n >= PATH_SLOT) n = PATH_SLOT - 1;
		memcpy(paths[slot], p, n);
		paths[slot][n] = 0;
		return;
	}
}

static size_t put_json_string(char *out, size_t cap, size_t o, const char *s)
{
	if (o + 2 >= cap) return o;
	out[o++] = '"';
	for (; *s && o + 8 < cap; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') { out[o++] = '\\'; out[o++] = (char)c; }
		else if (c < 0x20) o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
		else out[o++] = (char)c;
	}
	out[o++] = '"';
	return o;
}

/* One JSON line per process: {"pid","exe","answered","missing","passed","passed_paths","dropped"}.
 * Written by the destructor (exit) or by _exit (below). A vfork child shares
 * the parent's memory and counts: it does not report (its pid differs). */
__attribute__((destructor)) void report_write(void)
{
	static char line[MAX_PATHS * (PATH_SLOT + 4) + 8192];
	static int reported;
	if (!report_file[0] || (pid_t)syscall(SYS_getpid) != report_pid || reported) return;
	reported = 1;
	char exe[DLB_PATH_MAX];
	long en = syscall(SYS_readlinkat, AT_FDCWD, "/proc/self/exe", exe, sizeof exe - 1);
	exe[en > 0 ? en : 0] = 0;
	size_t o = (size_t)snprintf(line, sizeof line, "{\"pid\":%d,\"exe\":", (int)getpid());
	o = put_json_string(line, sizeof line, o, exe);
	o += (size_t)snprintf(line + o, sizeof line - o, ",\"answered\":%llu,\"missing\":%llu,\"passed\":%llu,\"passed_paths\":[",
			      (unsigned long long)counts[REPORT_ANSWERED], (unsigned long long)counts[REPORT_MISSING],
			      (unsigned long long)counts[REPORT_PASSED]);
	uint32_t n = npaths < MAX_PATHS ? npaths : MAX_PATHS;
	for (uint32_t i = 0; i < n; i++) {
		if (i) line[o++] = ',';
		o = put_json_string(line, sizeof line, o, paths[i]);
	}
	o += (size_t)snprintf(line + o, sizeof line - o, "],\"dropped\":%u}\n", dropped);
	int fd = (int)syscall(SYS_openat, AT_FDCWD, report_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) return;
	syscall(SYS_write, fd, line, o);
	syscall(SYS_close, fd);
}

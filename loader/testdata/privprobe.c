/* privprobe: prints what an exec gave it: its effective ids, whether it
 * holds any effective capability, and whether the shim's variables reached
 * it. The privilege tests run copies of it made setuid, setgid or given
 * file capabilities. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

int main(void)
{
	unsigned long long capeff = 0;
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "CapEff:", 7)) sscanf(line + 7, "%llx", &capeff);
	if (f) fclose(f);
	int shim = 0;
	for (char **e = environ; *e; e++)
		if (!strncmp(*e, "DLBUNDLE_", 9) || !strncmp(*e, "LD_AUDIT=", 9)) shim = 1;
	printf("euid=%d egid=%d caps=%d shimvars=%d\n", (int)geteuid(), (int)getegid(), capeff != 0, shim);
	return 0;
}

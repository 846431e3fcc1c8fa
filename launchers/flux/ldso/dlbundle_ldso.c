/*
 * dlbundle_ldso: the Flux job shell's half of "an image runs on a node of
 * another glibc", which dlbundle.lua cannot do in Lua (the shell's Lua API
 * sets a task's environment, not its command).
 *
 * dlbundle.lua loads this plugin (beside it, or from the shell's plugin
 * path) and puts the shim's variables, DLBUNDLE_STAGE among them, into the
 * job's environment. When the stage holds an ldso record (written at
 * staging when the image's ld.so is another glibc build than this node's:
 * loader/stagefmt/ldso.go), a bundled program must start under the image's
 * ld.so, with the program as its argument: the kernel would take the node's
 * ld.so from the program's PT_INTERP, and two halves of glibc from two
 * builds fail before main, or the shim gives the process the node's libc.
 * So in task.init (in the shell, before the task is forked) the task's
 * command becomes, as `dlbundle exec` would start it (loader/launch.go):
 *
 *   STAGE/root/<ld.so> [--argv0 ARGV0] STAGE/root/<program> ARGS...
 *
 * with DLBUNDLE_EXE=<program> (what /proc/self/exe stands for: the shim
 * answers with it). --argv0 from glibc 2.33 (the record names the image's
 * version). A program the image does not hold, or that is not a dynamic
 * ELF executable, is left alone, as is every task of a node of the image's
 * glibc (no record: one failed readlink per task). The plugin opens only
 * files in the user's stage (the shell runs as the user) and creates none.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FLUX_SHELL_PLUGIN_NAME "dlbundle-ldso"
#include <flux/core.h>
#include <flux/shell.h>

/* dynamic_elf says whether path is a 64-bit ELF with a PT_INTERP. */
static int dynamic_elf(const char *path)
{
	unsigned char eh[64];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 0;
	struct stat st;
	int ok = 0;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && pread(fd, eh, sizeof eh, 0) == (ssize_t)sizeof eh &&
	    !memcmp(eh, "\177ELF", 4) && eh[4] == 2 /* 64-bit */ && eh[5] == 1 /* little-endian */) {
		uint64_t phoff;
		uint16_t phentsize, phnum;
		memcpy(&phoff, eh + 32, 8);
		memcpy(&phentsize, eh + 54, 2);
		memcpy(&phnum, eh + 56, 2);
		for (unsigned i = 0; i < phnum && i < 256 && phentsize >= 4; i++) {
			uint32_t type;
			if (pread(fd, &type, 4, (off_t)(phoff + (uint64_t)i * phentsize)) != 4)
				break;
			if (type == 3 /* PT_INTERP */) {
				ok = 1;
				break;
			}
		}
	}
	close(fd);
	return ok;
}

/* staged finds the program as the task would (a path from the task's
 * directory, a bare name in its PATH), asking the stage only: the absolute
 * original path in orig and its staged copy in out. 0 when the stage holds
 * it as a regular file. */
static int staged(const char *stage, const char *arg0, flux_cmd_t *cmd, char *orig, char *out)
{
	if (strchr(arg0, '/')) {
		const char *cwd = flux_cmd_getcwd(cmd);
		if (arg0[0] == '/')
			snprintf(orig, PATH_MAX, "%s", arg0);
		else if (!cwd || snprintf(orig, PATH_MAX, "%s/%s", cwd, arg0) >= PATH_MAX)
			return -1;
		if (snprintf(out, PATH_MAX, "%s/root%s", stage, orig) >= PATH_MAX)
			return -1;
		struct stat st;
		return stat(out, &st) == 0 && S_ISREG(st.st_mode) ? 0 : -1;
	}
	const char *path = flux_cmd_getenv(cmd, "PATH");
	for (const char *d = path ? path : "/usr/local/bin:/usr/bin:/bin"; *d;) {
		size_t len = strcspn(d, ":");
		if (len && d[0] == '/' && snprintf(orig, PATH_MAX, "%.*s/%s", (int)len, d, arg0) < PATH_MAX &&
		    snprintf(out, PATH_MAX, "%s/root%s", stage, orig) < PATH_MAX) {
			struct stat st;
			if (stat(out, &st) == 0 && S_ISREG(st.st_mode))
				return 0;
		}
		d += len;
		if (*d == ':')
			d++;
	}
	return -1;
}

static int task_init(flux_plugin_t *p, const char *topic, flux_plugin_arg_t *args, void *data)
{
	(void)topic;
	(void)args;
	(void)data;
	flux_shell_t *shell = flux_plugin_get_shell(p);
	flux_shell_task_t *task = shell ? flux_shell_current_task(shell) : NULL;
	flux_cmd_t *cmd = task ? flux_shell_task_cmd(task) : NULL;
	const char *stage = cmd ? flux_cmd_getenv(cmd, "DLBUNDLE_STAGE") : NULL;
	if (!stage || stage[0] != '/' || flux_cmd_argc(cmd) < 1)
		return 0;
	static char rec[PATH_MAX], text[PATH_MAX], ldso[PATH_MAX], orig[PATH_MAX], prog[PATH_MAX];
	if (snprintf(rec, sizeof rec, "%s/ldso", stage) >= (int)sizeof rec)
		return 0;
	ssize_t n = readlink(rec, text, sizeof text - 1);
	if (n < 0)
		return 0; /* the image's glibc is this node's */
	text[n] = 0;
	/* "<glibc version> <image path of its ld.so>" */
	char *sp = strchr(text, ' ');
	if (!sp || sp[1] != '/')
		return 0;
	*sp = 0;
	int major = 0, minor = 0;
	int argv0 = sscanf(text, "%d.%d", &major, &minor) == 2 && (major > 2 || (major == 2 && minor >= 33));
	if (snprintf(ldso, sizeof ldso, "%s/root%s", stage, sp + 1) >= (int)sizeof ldso)
		return 0;
	const char *arg0 = flux_cmd_arg(cmd, 0);
	if (!arg0 || !strcmp(arg0, ldso)) /* done already (loaded twice) */
		return 0;
	if (staged(stage, arg0, cmd, orig, prog) != 0 || !dynamic_elf(prog))
		return 0; /* not the image's program: the node's, as it is */
	char *a0 = strdup(arg0);
	if (!a0 || flux_cmd_argv_delete(cmd, 0) < 0 || flux_cmd_argv_insert(cmd, 0, prog) < 0 ||
	    (argv0 && (flux_cmd_argv_insert(cmd, 0, a0) < 0 || flux_cmd_argv_insert(cmd, 0, "--argv0") < 0)) ||
	    flux_cmd_argv_insert(cmd, 0, ldso) < 0 || flux_cmd_setenvf(cmd, 1, "DLBUNDLE_EXE", "%s", orig) < 0) {
		free(a0);
		shell_die(1, "dlbundle: cannot start %s under the image's ld.so %s (this node's glibc is not the image's)",
			  arg0, ldso);
		return -1;
	}
	free(a0);
	return 0;
}

int flux_plugin_init(flux_plugin_t *p)
{
	if (flux_plugin_set_name(p, FLUX_SHELL_PLUGIN_NAME) < 0 ||
	    flux_plugin_add_handler(p, "task.init", task_init, NULL) < 0)
		return -1;
	return 0;
}

/*
 * spank_dlbundle: srun/sbatch/salloc --dlbundle=IMAGE.
 *
 * Every task of a step starts from the node's stage of IMAGE, with no
 * launcher process between slurmstepd and the app: once per node and step
 * (slurm_spank_user_init, in slurmstepd) the plugin runs
 * `dlbundle env --format=env0 IMAGE` as the job's user, which stages the
 * image (or finds its stage) exactly as `dlbundle exec` would and prints the
 * variables that serve a process from it; each task gets them
 * (slurm_spank_task_init, spank_setenv) just before slurmstepd execs it.
 * The staging protocol is dlbundle's alone: this file only runs it.
 *
 * plugstack.conf (arguments optional):
 *   optional /usr/lib/slurm/spank_dlbundle.so dlbundle=/usr/local/bin/dlbundle \
 *            stage_dir=/local/dlbundle-%u fallback default=/site/base.dlimg
 *   dlbundle=PATH   the dlbundle binary (default: "dlbundle" in the job's PATH)
 *   stage_dir=DIR   passed as --stage-dir (else the job's DLBUNDLE_STAGE_DIR)
 *   fallback        a stage that fails runs the step natively, as
 *                   --dlbundle-fallback does, instead of failing it
 *   default=IMAGE   the image of every step that names none
 *                   (--dlbundle=none turns it off for one step)
 *
 * --dlbundle=auto[:DIR] needs no image: see auto_setup.
 *
 * A stage that fails ends the step: user_init returns an error after
 * logging dlbundle's own message (slurmstepd sends it to srun's stderr).
 * Nothing is half-staged: dlbundle publishes a stage atomically or not.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(dlbundle, 1);

/* What the plugin knows. Options are parsed again in slurmstepd (remote
 * context) from what srun sent, before user_init; the variables live in
 * slurmstepd's memory from user_init on and every task's copy is read in
 * task_init (after fork, before exec). Fixed sizes: nothing here grows
 * with what a user passes. */
#define ARG_MAX_LEN 4096
#define ENV_MAX_LEN 65536
#define MSG_MAX_LEN 4096
#define VARS_MAX 32

static char opt_image[ARG_MAX_LEN];   /* --dlbundle=IMAGE, or default= */
static int opt_fallback;              /* --dlbundle-fallback, or fallback */
static char conf_dlbundle[ARG_MAX_LEN] = "dlbundle";
static char conf_stage_dir[ARG_MAX_LEN];

static char env_buf[ENV_MAX_LEN]; /* dlbundle env's output: NAME=VALUE\0... */
static size_t env_len;
static int env_ready;
static int env_failed;
static char fallback_msg[MSG_MAX_LEN + 128]; /* said by the node's first task */

/* --dlbundle=auto[:DIR]: the command's image is DIR/auto-<key>.dlimg (key:
 * a hash of the command's absolute path; DIR defaults to
 * $HOME/.dlbundle/auto). When it exists the step runs from it like any
 * image; when not, the step's first task is traced (dlbundle in its place,
 * told by DLBUNDLE_AUTO_* what to run: cmd/dlbundle/autotrace.go), the
 * others run natively, and slurm_spank_task_exit builds the image from
 * that trace when the traced task has ended. */
static int auto_trace;                   /* this step traces its first task */
static char auto_dir[ARG_MAX_LEN];
static char auto_base[ARG_MAX_LEN + 64]; /* DIR/auto-<key> */
static char auto_path[ARG_MAX_LEN + 96]; /* scratch: auto_base + suffix */
static char dlbundle_path[ARG_MAX_LEN + ARG_MAX_LEN];

static int opt_image_cb(int val, const char *optarg, int remote);
static int opt_fallback_cb(int val, const char *optarg, int remote);

/* Registered in slurm_spank_init (spank_option_register) rather than
 * exported as spank_options: sbatch and salloc of Slurm 22.05 load the
 * plugin but did not offer a table's options ("unrecognized option
 * '--dlbundle'"), which left #SBATCH --dlbundle unusable. */
static struct spank_option options[] = {
	{"dlbundle", "IMAGE",
	 "Start every task from the node's stage of IMAGE (a .dlimg file or oci://REF), staged once "
	 "per node and step by dlbundle: no call on the shared file system for what the image holds. "
	 "--dlbundle=none: no image (over a site default). --dlbundle=auto[:DIR]: the command's image in DIR "
	 "(default ~/.dlbundle/auto), made from a trace of the first task of the first step that lacks it.",
	 1, 0, opt_image_cb},
	{"dlbundle-fallback", NULL,
	 "If the image cannot be staged, warn and run the tasks natively instead of failing the step.", 0, 0,
	 opt_fallback_cb},
	SPANK_OPTIONS_TABLE_END,
};

static int opt_image_cb(int val, const char *optarg, int remote)
{
	(void)val;
	(void)remote;
	if (!optarg || !*optarg) {
		slurm_error("dlbundle: --dlbundle needs an image: --dlbundle=app.dlimg or --dlbundle=oci://REGISTRY/REPO:TAG");
		return -1;
	}
	if (strlen(optarg) >= sizeof opt_image) {
		slurm_error("dlbundle: --dlbundle=%.40s...: longer than %zu bytes", optarg, sizeof opt_image - 1);
		return -1;
	}
	strcpy(opt_image, optarg);
	return 0;
}

static int opt_fallback_cb(int val, const char *optarg, int remote)
{
	(void)val;
	(void)optarg;
	(void)remote;
	opt_fallback = 1;
	return 0;
}

/* copy_arg copies a plugstack.conf value; 0 on success. */
static int copy_arg(char *dst, size_t size, const char *val, const char *name)
{
	if (strlen(val) >= size) {
		slurm_error("dlbundle: plugstack.conf %s= is longer than %zu bytes", name, size - 1);
		return -1;
	}
	strcpy(dst, val);
	return 0;
}

/* slurm_spank_init reads plugstack.conf's arguments, in every context. A
 * site default image goes in before the options: a user's --dlbundle
 * (parsed after init) replaces it. */
int slurm_spank_init(spank_t sp, int ac, char **av)
{
	for (struct spank_option *o = options; o->name; o++)
		if (spank_option_register(sp, o) != ESPANK_SUCCESS) {
			slurm_error("dlbundle: cannot register --%s", o->name);
			return -1;
		}
	for (int i = 0; i < ac; i++) {
		int rc = 0;
		if (!strncmp(av[i], "dlbundle=", 9))
			rc = copy_arg(conf_dlbundle, sizeof conf_dlbundle, av[i] + 9, "dlbundle");
		else if (!strncmp(av[i], "stage_dir=", 10))
			rc = copy_arg(conf_stage_dir, sizeof conf_stage_dir, av[i] + 10, "stage_dir");
		else if (!strncmp(av[i], "default=", 8))
			rc = copy_arg(opt_image, sizeof opt_image, av[i] + 8, "default");
		else if (!strcmp(av[i], "fallback"))
			opt_fallback = 1;
		else {
			slurm_error("dlbundle: unknown plugstack.conf argument %s (known: dlbundle=PATH stage_dir=DIR "
				    "fallback default=IMAGE)",
				    av[i]);
			rc = -1;
		}
		if (rc)
			return -1;
	}
	return 0;
}

/* read_all reads fd until EOF into buf (at most size bytes; the rest is
 * drained) and returns the length kept, or -1 on a read error. */
static ssize_t read_all(int fd, char *buf, size_t size, int *truncated)
{
	size_t n = 0;
	char sink[4096];
	*truncated = 0;
	for (;;) {
		char *p = n < size ? buf + n : sink;
		size_t room = n < size ? size - n : sizeof sink;
		ssize_t r = read(fd, p, room);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			return (ssize_t)(n < size ? n : size);
		if (n < size)
			n += (size_t)r;
		else
			*truncated = 1;
	}
}

/* job_env_get returns NAME's value in the job's environment, or NULL. */
static const char *job_env_get(char **env, const char *name)
{
	size_t len = strlen(name);
	for (; env && *env; env++)
		if (!strncmp(*env, name, len) && (*env)[len] == '=')
			return *env + len + 1;
	return NULL;
}

/* become_user makes the child the job's user for good: slurmstepd runs
 * user_init with only the effective ids dropped (the real uid is still
 * root), and dlbundle takes the stage dir's owner from its real uid, so
 * the child sets all three ids, the groups, and no_new_privs. */
static int become_user(spank_t sp)
{
	uid_t uid;
	gid_t gid;
	gid_t *gids = NULL;
	int ngids = 0;
	if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS)
		return -1;
	if (spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &gids, &ngids) != ESPANK_SUCCESS)
		ngids = 0;
	if (getuid() == 0) { /* slurmd as root: regain root, then drop all of it */
		if (geteuid() != 0 && seteuid(0) != 0)
			return -1;
		if (setgroups((size_t)ngids, gids) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0)
			return -1;
	}
	if (getuid() != uid || geteuid() != uid) {
		errno = EPERM;
		return -1;
	}
	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

/* run_env runs `dlbundle env --format=env0 [--stage-dir DIR] IMAGE` as the
 * job's user, in the job's environment and working directory (a relative
 * image is the user's), and keeps its output in env_buf and its message in
 * msg. It returns dlbundle's exit status, or -1 with msg set. */
static int run_env(spank_t sp, char *msg, size_t msgsize)
{
	char **env = NULL;
	uint32_t jobid = 0, stepid = 0;
	if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS) {
		snprintf(msg, msgsize, "cannot read the job's environment");
		return -1;
	}
	spank_get_item(sp, S_JOB_ID, &jobid);
	spank_get_item(sp, S_JOB_STEPID, &stepid);
	int out[2], err[2];
	if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
		snprintf(msg, msgsize, "pipe: %s", strerror(errno));
		return -1;
	}
	/* The child's environment and command line are made here, before the
	 * fork: slurmstepd has threads, and between fork and exec the child
	 * calls only what is safe there (no malloc, no setenv). The job's
	 * variables (the stage dir patterns, the registry's credentials, PATH),
	 * and the ids of this step: the tasks' SLURM_STEP_ID is set later, but
	 * the alias key must name it. */
	size_t nenv = 0;
	while (env && env[nenv])
		nenv++;
	char **envp = calloc(nenv + 3, sizeof *envp);
	if (!envp) {
		snprintf(msg, msgsize, "out of memory");
		close(out[0]), close(out[1]), close(err[0]), close(err[1]);
		return -1;
	}
	static char job_var[64], step_var[64];
	snprintf(job_var, sizeof job_var, "SLURM_JOB_ID=%u", jobid);
	snprintf(step_var, sizeof step_var, "SLURM_STEP_ID=%u", stepid);
	size_t k = 0;
	for (size_t i = 0; i < nenv; i++)
		if (strncmp(env[i], "SLURM_JOB_ID=", 13) && strncmp(env[i], "SLURM_STEP_ID=", 14))
			envp[k++] = env[i];
	envp[k++] = job_var;
	envp[k++] = step_var;
	envp[k] = NULL;
	char *argv[8];
	int a = 0;
	argv[a++] = conf_dlbundle;
	argv[a++] = "env";
	argv[a++] = "--format=env0";
	if (conf_stage_dir[0]) {
		argv[a++] = "--stage-dir";
		argv[a++] = conf_stage_dir;
	}
	argv[a++] = "--";
	argv[a++] = opt_image;
	argv[a] = NULL;
	const char *cwd = job_env_get(env, "PWD");
	const char *path = job_env_get(env, "PATH");
	if (!path)
		path = "/usr/local/bin:/usr/bin:/bin";
	static char cand[ARG_MAX_LEN + ARG_MAX_LEN];

	pid_t pid = fork();
	if (pid < 0) {
		snprintf(msg, msgsize, "fork: %s", strerror(errno));
		free(envp);
		close(out[0]), close(out[1]), close(err[0]), close(err[1]);
		return -1;
	}
	if (pid == 0) {
		dup2(out[1], 1);
		dup2(err[1], 2);
		int null = open("/dev/null", O_RDONLY);
		if (null >= 0)
			dup2(null, 0);
		if (become_user(sp) != 0) {
			static const char m[] = "cannot become the job's user (setresuid, setgroups or no_new_privs failed)\n";
			write(2, m, sizeof m - 1);
			_exit(126);
		}
		if (cwd && chdir(cwd) != 0 && opt_image[0] != '/' && strncmp(opt_image, "oci://", 6)) {
			static const char m[] = "the image is a relative path and the job's working directory cannot be "
						"entered on this node; give an absolute path\n";
			write(2, m, sizeof m - 1);
			_exit(1);
		}
		if (strchr(conf_dlbundle, '/')) {
			execve(conf_dlbundle, argv, envp);
		} else { /* the job's PATH, as execvp would search it */
			for (const char *d = path; *d;) {
				size_t len = strcspn(d, ":");
				if (len + 1 + strlen(conf_dlbundle) < sizeof cand) {
					memcpy(cand, len ? d : ".", len ? len : 1);
					size_t l = len ? len : 1;
					cand[l] = '/';
					strcpy(cand + l + 1, conf_dlbundle);
					execve(cand, argv, envp);
				}
				d += len;
				if (*d == ':')
					d++;
			}
		}
		static const char m[] = "cannot run dlbundle (set dlbundle=PATH in plugstack.conf, or put dlbundle in "
					"the job's PATH)\n";
		write(2, m, sizeof m - 1);
		_exit(127);
	}
	free(envp);
	close(out[1]);
	close(err[1]);
	/* Two pipes, one reader: dlbundle writes its message only once its
	 * output is complete or it failed, and a message fits the pipe (64 KiB):
	 * stdout first, then stderr, cannot deadlock. */
	int trunc_out = 0, trunc_err = 0;
	ssize_t n = read_all(out[0], env_buf, sizeof env_buf, &trunc_out);
	ssize_t m = read_all(err[0], msg, msgsize - 1, &trunc_err);
	close(out[0]);
	close(err[0]);
	msg[m < 0 ? 0 : m] = 0;
	while (m > 0 && msg[m - 1] == '\n')
		msg[--m] = 0;
	/* dlbundle env's hint names its own --fallback; the plugin's is given
	 * in the plugin's message. */
	char *hint = strstr(msg, "\n(use --fallback");
	if (hint)
		*hint = 0;
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			snprintf(msg, msgsize, "waitpid: %s", strerror(errno));
			return -1;
		}
	if (n < 0 || trunc_out) {
		snprintf(msg, msgsize, "dlbundle env's output is %s", n < 0 ? "unreadable" : "larger than 64 KiB");
		return -1;
	}
	env_len = (size_t)n;
	if (WIFSIGNALED(status)) {
		snprintf(msg + strlen(msg), msgsize - strlen(msg), "%sdlbundle env was killed by signal %d",
			 msg[0] ? "; " : "", WTERMSIG(status));
		return -1;
	}
	return WEXITSTATUS(status);
}

/* find_dlbundle puts the dlbundle binary's absolute path in dlbundle_path:
 * plugstack.conf's, else the first in the job's PATH. 0 on success. */
static int find_dlbundle(char **env)
{
	if (strchr(conf_dlbundle, '/')) {
		snprintf(dlbundle_path, sizeof dlbundle_path, "%s", conf_dlbundle);
		return 0;
	}
	const char *path = job_env_get(env, "PATH");
	for (const char *d = path ? path : "/usr/local/bin:/usr/bin:/bin"; *d;) {
		size_t len = strcspn(d, ":");
		if (len && d[0] == '/' && len + 1 + strlen(conf_dlbundle) < sizeof dlbundle_path) {
			snprintf(dlbundle_path, sizeof dlbundle_path, "%.*s/%s", (int)len, d, conf_dlbundle);
			if (access(dlbundle_path, X_OK) == 0)
				return 0;
		}
		d += len;
		if (*d == ':')
			d++;
	}
	return -1;
}

/* auto_setup resolves --dlbundle=auto[:DIR] for this step's command: the
 * image when it exists (then opt_image names it), else auto_trace. */
static int auto_setup(spank_t sp)
{
	int argc = 0;
	char **argv = NULL, **env = NULL;
	const char *dir = opt_image + 4; /* after "auto" */
	if (*dir == ':')
		dir++;
	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1 || !argv[0] || argv[0][0] != '/') {
		slurm_error("dlbundle: --dlbundle=auto needs the command as an absolute path (srun makes one of a command it finds)");
		return -1;
	}
	spank_get_item(sp, S_JOB_ENV, &env);
	if (!*dir) {
		const char *home = job_env_get(env, "HOME");
		if (!home || snprintf(auto_dir, sizeof auto_dir, "%s/.dlbundle/auto", home) >= (int)sizeof auto_dir) {
			slurm_error("dlbundle: --dlbundle=auto: no HOME in the job's environment; give a directory: --dlbundle=auto:DIR");
			return -1;
		}
	} else if (snprintf(auto_dir, sizeof auto_dir, "%s", dir) >= (int)sizeof auto_dir || dir[0] != '/') {
		slurm_error("dlbundle: --dlbundle=auto:%s: give an absolute directory", dir);
		return -1;
	}
	uint64_t h = 1469598103934665603ULL; /* FNV-1a: names a file in the user's own directory */
	for (const char *c = argv[0]; *c; c++)
		h = (h ^ (unsigned char)*c) * 1099511628211ULL;
	snprintf(auto_base, sizeof auto_base, "%s/auto-%016llx", auto_dir, (unsigned long long)h);
	snprintf(auto_path, sizeof auto_path, "%s.dlimg", auto_base);
	if (faccessat(AT_FDCWD, auto_path, R_OK, AT_EACCESS) == 0) { /* as the job's user: its effective ids */
		strcpy(opt_image, auto_path);
		return 0;
	}
	if (find_dlbundle(env) != 0) {
		slurm_error("dlbundle: --dlbundle=auto: no dlbundle in the job's PATH (or dlbundle=PATH in plugstack.conf)");
		return -1;
	}
	auto_trace = 1;
	return 0;
}

/* auto_task points the step's first task at dlbundle, which traces the
 * command (DLBUNDLE_AUTO_TRACE, DLBUNDLE_AUTO_ARGV0). */
static int auto_task(spank_t sp)
{
	uint32_t gid = 1;
	int argc = 0;
	char **argv = NULL;
	if (spank_get_item(sp, S_TASK_GLOBAL_ID, &gid) != ESPANK_SUCCESS || gid != 0)
		return 0;
	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1)
		return -1;
	char parent[ARG_MAX_LEN];
	snprintf(parent, sizeof parent, "%s", auto_dir);
	char *slash = strrchr(parent, '/');
	if (slash && slash != parent) {
		*slash = 0;
		mkdir(parent, 0700);
	}
	if (mkdir(auto_dir, 0700) != 0 && errno != EEXIST) {
		slurm_error("dlbundle: --dlbundle=auto: cannot create %s: %s", auto_dir, strerror(errno));
		return -1;
	}
	snprintf(auto_path, sizeof auto_path, "%s.trace", auto_base);
	if (spank_setenv(sp, "DLBUNDLE_AUTO_TRACE", auto_path, 1) != ESPANK_SUCCESS ||
	    spank_setenv(sp, "DLBUNDLE_AUTO_ARGV0", argv[0], 1) != ESPANK_SUCCESS)
		return -1;
	argv[0] = dlbundle_path;
	return 0;
}

/* auto_build builds DIR/auto-<key>.dlimg from the first task's trace, as
 * the job's user, under a temporary name renamed when complete (a later
 * step never sees half an image); the command's directory is bundled even
 * where build's policy leaves such places out (/tmp, /var/tmp). */
static void auto_build(spank_t sp)
{
	int argc = 0;
	char **argv = NULL, **env = NULL;
	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1 || !argv[0])
		return;
	spank_get_item(sp, S_JOB_ENV, &env);
	static char trace[ARG_MAX_LEN + 96], img[ARG_MAX_LEN + 96], tmp[ARG_MAX_LEN + 128], appdir[ARG_MAX_LEN];
	snprintf(trace, sizeof trace, "%s.trace.0", auto_base);
	snprintf(img, sizeof img, "%s.dlimg", auto_base);
	snprintf(tmp, sizeof tmp, "%s.dlimg.tmp.%d", auto_base, (int)getpid());
	/* argv[0] is dlbundle's path in the traced task only: the step's is the command */
	snprintf(appdir, sizeof appdir, "%s", argv[0]);
	char *slash = strrchr(appdir, '/');
	if (slash && slash != appdir)
		*slash = 0;
	char *bargv[] = {dlbundle_path, "build", "--include", appdir, "-o", tmp, trace, NULL};
	pid_t pid = fork();
	if (pid < 0)
		return;
	if (pid == 0) {
		if (become_user(sp) != 0 || access(trace, R_OK) != 0)
			_exit(1);
		int null = open("/dev/null", O_RDWR);
		if (null >= 0)
			dup2(null, 1);
		/* build's messages, for the user: DIR/auto-<key>.log */
		static char log[ARG_MAX_LEN + 96];
		snprintf(log, sizeof log, "%s.log", auto_base);
		int lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (lfd >= 0)
			dup2(lfd, 2);
		pid_t b = fork();
		if (b == 0) {
			execve(dlbundle_path, bargv, env);
			_exit(127);
		}
		int st = 0;
		while (b > 0 && waitpid(b, &st, 0) < 0 && errno == EINTR)
			;
		if (b < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			dprintf(2, "dlbundle: --dlbundle=auto: %s build: %s %d\n", dlbundle_path,
				b < 0 ? "cannot fork" : WIFSIGNALED(st) ? "killed by signal" : "exit status",
				b < 0 ? 0 : WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
		else if (rename(tmp, img) != 0)
			dprintf(2, "dlbundle: --dlbundle=auto: rename %s to %s: %s\n", tmp, img, strerror(errno));
		else {
			unlink(trace);
			_exit(0);
		}
		unlink(tmp);
		_exit(1);
	}
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		slurm_error("dlbundle: --dlbundle=auto: building %s from %s failed (status %#x; its messages: %s.log); the next step traces again",
			    img, trace, st, auto_base);
	else
		slurm_info("dlbundle: --dlbundle=auto: built %s; later steps of this command run from it", img);
}

/* slurm_spank_task_exit: in slurmstepd as each task's exit is collected.
 * The build runs when the traced task has ended, inside this callback:
 * at the step's end (slurm_spank_exit) slurmstepd has already sent
 * SIGTERM to every process it started, and the build was one of them. */
int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	uint32_t gid = 1;
	if (auto_trace && spank_remote(sp) && spank_get_item(sp, S_TASK_GLOBAL_ID, &gid) == ESPANK_SUCCESS && gid == 0)
		auto_build(sp);
	return 0;
}

/* wanted says whether this step asked for an image: srun steps only (not
 * the batch script, whose bash would run under the shim, nor the extern
 * step). */
static int wanted(spank_t sp)
{
	uint32_t stepid = 0;
	if (!spank_remote(sp) || !opt_image[0] || !strcmp(opt_image, "none"))
		return 0;
	if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS)
		return 0;
	return stepid != SLURM_BATCH_SCRIPT && stepid != SLURM_EXTERN_CONT && stepid != SLURM_INTERACTIVE_STEP;
}

/* slurm_spank_user_init: once per node and step, in slurmstepd, as the
 * job's user, before any task is forked. */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!wanted(sp))
		return 0;
	if (!strncmp(opt_image, "auto", 4) && (opt_image[4] == 0 || opt_image[4] == ':')) {
		if (auto_setup(sp) != 0)
			return -1;
		if (auto_trace)
			return 0; /* no image yet: natively, the first task traced */
	}
	char msg[MSG_MAX_LEN] = "";
	int rc = run_env(sp, msg, sizeof msg);
	if (rc == 0) {
		env_ready = 1;
		return 0;
	}
	if (opt_fallback) {
		/* slurm_info stays in slurmd's log; the user is told in
		 * task_init, on the first task's stderr. */
		snprintf(fallback_msg, sizeof fallback_msg,
			 "dlbundle: warning: %s; running the tasks natively (--dlbundle-fallback)\n",
			 msg[0] ? msg : "dlbundle env failed");
		slurm_info("%s", fallback_msg);
		return 0;
	}
	slurm_error("dlbundle: %s (--dlbundle-fallback runs the tasks natively instead)",
		    msg[0] ? msg : "dlbundle env failed without a message");
	/* The step ends in task_init, where every task fails before exec: a
	 * user_init failure is a launch failure, for which srun 22.05 exits 0. */
	env_failed = 1;
	return 0;
}

/* staged_program points the task's argv[0] at the staged copy of the
 * program when the stage holds it as an ELF executable: slurmstepd execs
 * the path in argv[0] (made absolute by srun), and from the stage the
 * kernel reads the program node-locally instead of from the shared file
 * system (a lookup and reads per task). The shim gives the app its
 * original argv[0] back (loader/shim/exec.c, unstage_argv0). A bundled #! script
 * is left to the kernel as given: its interpreter would see the staged
 * path. The argv array is the task's (slurmstepd forked the task before
 * task_init), so the change is the task's alone. */
static char staged_path[ARG_MAX_LEN + ARG_MAX_LEN];
static void staged_program(spank_t sp, const char *stage)
{
	int argc = 0;
	char **argv = NULL;
	if (!stage || spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1 || !argv ||
	    !argv[0] || argv[0][0] != '/')
		return;
	if (snprintf(staged_path, sizeof staged_path, "%s/root%s", stage, argv[0]) >= (int)sizeof staged_path)
		return;
	int fd = open(staged_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return;
	char magic[4] = {0};
	ssize_t n = read(fd, magic, sizeof magic);
	close(fd);
	if (n == 4 && !memcmp(magic, "\177ELF", 4) && access(staged_path, X_OK) == 0)
		argv[0] = staged_path;
}

/* slurm_spank_task_init: in each task, just before slurmstepd execs it:
 * dlbundle env's variables into the task's environment. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (env_failed)
		return -1; /* the task exits 1 without starting the app: the message is user_init's */
	if (auto_trace)
		return auto_task(sp);
	int local = -1;
	if (fallback_msg[0] && spank_get_item(sp, S_TASK_ID, &local) == ESPANK_SUCCESS && local == 0) {
		ssize_t w = write(2, fallback_msg, strlen(fallback_msg));
		(void)w;
	}
	if (!env_ready)
		return 0;
	const char *stage = NULL;
	for (size_t i = 0; i < env_len;) {
		char *kv = env_buf + i;
		size_t len = strnlen(kv, env_len - i);
		if (i + len >= env_len)
			break; /* no terminating NUL: dlbundle env always writes one */
		i += len + 1;
		char *eq = strchr(kv, '=');
		spank_err_t e;
		if (eq) {
			*eq = 0;
			e = spank_setenv(sp, kv, eq + 1, 1);
			*eq = '=';
		} else
			e = spank_unsetenv(sp, kv);
		if (e != ESPANK_SUCCESS) {
			slurm_error("dlbundle: cannot set %s in the task's environment: %s", kv, spank_strerror(e));
			return -1;
		}
		if (eq && !strncmp(kv, "DLBUNDLE_STAGE=", 15))
			stage = eq + 1;
	}
	staged_program(sp, stage);
	return 0;
}

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
 * The staging protocol is dlbundle's alone: this file only runs it, and
 * creates, opens or removes no file of its own (the auto build log, the
 * auto dir and the trace are dlbundle's, written under its trust rules).
 *
 * plugstack.conf (in Slurm's plugin dir: Debian's is
 * /usr/lib/x86_64-linux-gnu/slurm-wlm; arguments optional):
 *   required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_dlbundle.so \
 *            dlbundle=/usr/local/bin/dlbundle stage_dir=/local/dlbundle-%u \
 *            default=/site/base.dlimg timeout=300
 *   dlbundle=PATH   the dlbundle binary (default: "dlbundle" in the job's PATH)
 *   stage_dir=DIR   passed as --stage-dir (else the job's DLBUNDLE_STAGE_DIR)
 *   fallback        a stage that fails runs the step natively, as
 *                   --dlbundle-fallback does, instead of failing it
 *   default=IMAGE   the image of every step that names none
 *                   (--dlbundle=none turns it off for one step)
 *   timeout=SECONDS how long a dlbundle the plugin runs may take (staging,
 *                   auto's build and folds; default 300): then it is killed and the
 *                   step fails (or falls back)
 *   bcast=1         --dlbundle-bcast for every step with a file image
 *
 * --dlbundle-bcast: the image is read from the shared file system once per
 * job. srun names a node-local copy for the job, user and image (its path
 * and identity: a rewritten image is a new copy) and has dlbundle copy it to
 * every node of the job with sbcast (dlbundle __bcast), unless a step of the
 * job did already (dlbundle's record on srun's host); each node stages its
 * copy (dlbundle stage --consume) and removes it, and a later step finds
 * that stage through the consumed record. A node that ran no step keeps its
 * copy until the job's Epilog (dlbundle gc --job) removes it.
 *
 * --dlbundle=auto[:DIR] needs no image: see auto_setup.
 *
 * On a node whose glibc is not the image's (the stage's ldso record), each
 * task whose program the image holds starts dlbundle in its place, which
 * execs the image's ld.so with the program: see check_glibc.
 *
 * A stage that fails ends the step under any plugstack line, `optional`
 * included (where Slurm 22.05 ignores a plugin's errors): every task exits
 * 1 in task_init, before exec, the first with dlbundle's message; only
 * --dlbundle-fallback (or the site's fallback) runs the tasks natively.
 * Nothing is half-staged: dlbundle publishes a stage atomically or not.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
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
static int opt_bcast;                 /* --dlbundle-bcast, or bcast=1 */
static int child_local;               /* run_child in srun: already the user */
static char bcast_local[ARG_MAX_LEN]; /* the node-local copy sbcast wrote */
static char bcast_id[17];             /* the image's identity, 16 hex: srun's */
#define BCAST_ID_VAR "DLBUNDLE_BCAST_ID"
static char conf_dlbundle[ARG_MAX_LEN] = "dlbundle";
static char conf_stage_dir[ARG_MAX_LEN];
static int conf_timeout = 300; /* seconds: timeout= */

static char env_buf[ENV_MAX_LEN]; /* dlbundle env's output: NAME=VALUE\0... */
static size_t env_len;
static int env_ready;
static int env_failed;
static int cross_glibc; /* the stage's ldso record: this node's glibc is not the image's */
static char fallback_msg[MSG_MAX_LEN + 128]; /* said by the node's first task */
static char failed_msg[MSG_MAX_LEN + 128];   /* said by the step's first task */

/* --dlbundle=auto[:DIR]: the command's image is DIR/auto-<key>.dlimg (key:
 * a hash of the command's absolute path; DIR defaults to
 * $HOME/.dlbundle/auto). When it exists the step runs from it like any
 * image; when not, the step's first task is traced (dlbundle in its place,
 * told by DLBUNDLE_AUTO_* what to run: cmd/dlbundle/autotrace.go), the
 * others run natively, and slurm_spank_task_exit builds the image from
 * that trace when the traced task has ended. */
static int auto_trace;                   /* this step traces its first task */
static int auto_serve;                   /* this step runs from the auto image: folds its misses in */
static uint32_t tasks_ended;             /* this node's tasks whose exit task_exit saw */
static char auto_dir[ARG_MAX_LEN];
static char auto_base[ARG_MAX_LEN + 64]; /* DIR/auto-<key> */
static char auto_path[ARG_MAX_LEN + 96]; /* scratch: auto_base + suffix */
static char auto_prog[ARG_MAX_LEN];      /* the command, resolved as the task would */
static char dlbundle_path[ARG_MAX_LEN + ARG_MAX_LEN];

static int opt_image_cb(int val, const char *optarg, int remote);
static void step_fails(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int opt_fallback_cb(int val, const char *optarg, int remote);
static int opt_bcast_cb(int val, const char *optarg, int remote);

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
	{"dlbundle-bcast", NULL,
	 "Read the image once for the job: the job's first step with it copies it to every node with sbcast "
	 "(slurmd's tree), each node stages that copy and removes it, and the job's later steps use those stages.",
	 0, 0, opt_bcast_cb},
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

static int opt_bcast_cb(int val, const char *optarg, int remote)
{
	(void)val;
	(void)optarg;
	(void)remote;
	opt_bcast = 1;
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
		else if (!strcmp(av[i], "bcast=1") || !strcmp(av[i], "bcast"))
			opt_bcast = 1;
		else if (!strcmp(av[i], "bcast=0"))
			opt_bcast = 0;
		else if (!strncmp(av[i], "timeout=", 8)) {
			char *end;
			long v = strtol(av[i] + 8, &end, 10);
			if (*end || end == av[i] + 8 || v < 1 || v > 86400) {
				slurm_error("dlbundle: plugstack.conf timeout=%s: give whole seconds from 1 to 86400", av[i] + 8);
				rc = -1;
			} else
				conf_timeout = (int)v;
		}
		else {
			slurm_error("dlbundle: unknown plugstack.conf argument %s (known: dlbundle=PATH stage_dir=DIR "
				    "fallback default=IMAGE timeout=SECONDS bcast=1)",
				    av[i]);
			rc = -1;
		}
		if (rc)
			return -1;
	}
	return 0;
}

/* escape copies len bytes of text (a child's output: the user's bytes)
 * into dst as printable ASCII: a non-printable byte as \xNN, a newline
 * kept when keep_nl (else as \x0a), at most dstsize-1 bytes, ending in
 * "..." when cut. Returns dst. */
static char *escape(char *dst, size_t dstsize, const char *text, size_t len, int keep_nl)
{
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)text[i];
		char e[8];
		size_t el;
		if ((c >= 0x20 && c < 0x7f) || (c == '\n' && keep_nl)) {
			e[0] = (char)c;
			el = 1;
		} else
			el = (size_t)snprintf(e, sizeof e, "\\x%02x", c);
		if (o + el + 4 > dstsize) {
			memcpy(dst + o, "...", 3);
			o += 3;
			break;
		}
		memcpy(dst + o, e, el);
		o += el;
	}
	dst[o] = 0;
	return dst;
}

/* log_text puts a child's text into slurmd's log, line by line, escaped
 * and bounded (MSG_MAX_LEN in all): what a user's dlbundle (or whatever
 * the job's PATH named dlbundle) printed is not the log's to interpret. */
static void log_text(int is_error, const char *what, const char *text, size_t len)
{
	static char esc[MSG_MAX_LEN];
	escape(esc, sizeof esc, text, len, 1);
	for (char *line = esc; *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = 0;
		if (*line) {
			if (is_error)
				slurm_error("dlbundle: %s%s%s", what ? what : "", what ? ": " : "", line);
			else
				slurm_info("dlbundle: %s%s%s", what ? what : "", what ? ": " : "", line);
		}
		if (!nl)
			break;
		line = nl + 1;
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

/* A child's outcome: its wait status, what it printed (stdout and stderr
 * apart, each bounded), and whether the timeout ended it. */
struct child {
	int status;         /* waitpid's */
	int timed_out;      /* killed at conf_timeout */
	size_t out_len, err_len;
	int out_trunc, err_trunc;
};

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* keep appends r bytes just read to buf (size bytes), dropping what does
 * not fit. */
static void keep(char *buf, size_t size, size_t *len, int *trunc, const char *data, size_t r)
{
	size_t room = size - *len;
	if (r > room) {
		*trunc = 1;
		r = room;
	}
	memcpy(buf + *len, data, r);
	*len += r;
}

/* run_child runs prog (a path, or a name searched in path) with argv and
 * envp as the job's user (become_user) in its own process group, in cwd
 * when given (required when cwd_required), stdin /dev/null. It reads the
 * child's stdout and stderr together (poll: a child that fills one pipe
 * while the plugin waits on the other cannot hang the step) into out and
 * err, and kills the group when conf_timeout seconds have passed. 0 with
 * c filled, or -1 with msg set when the child could not be started. */
static int run_child(spank_t sp, const char *prog, const char *path, char *const argv[], char **envp, const char *cwd,
		     int cwd_required, char *out, size_t outsize, char *err, size_t errsize, struct child *c, char *msg,
		     size_t msgsize)
{
	memset(c, 0, sizeof *c);
	int po[2], pe[2];
	if (pipe2(po, O_CLOEXEC)) {
		snprintf(msg, msgsize, "pipe: %s", strerror(errno));
		return -1;
	}
	if (pipe2(pe, O_CLOEXEC)) {
		snprintf(msg, msgsize, "pipe: %s", strerror(errno));
		close(po[0]), close(po[1]);
		return -1;
	}
	static char cand[ARG_MAX_LEN + ARG_MAX_LEN];
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(msg, msgsize, "fork: %s", strerror(errno));
		close(po[0]), close(po[1]), close(pe[0]), close(pe[1]);
		return -1;
	}
	if (pid == 0) {
		/* Between fork and exec only what is safe in a child of a
		 * threaded process: no malloc, no stdio. */
		setpgid(0, 0);
		dup2(po[1], 1);
		dup2(pe[1], 2);
		int null = open("/dev/null", O_RDONLY);
		if (null >= 0)
			dup2(null, 0);
		if (!child_local && become_user(sp) != 0) {
			static const char m[] = "cannot become the job's user (setresuid, setgroups or no_new_privs failed)\n";
			write(2, m, sizeof m - 1);
			_exit(126);
		}
		if (cwd && chdir(cwd) != 0 && cwd_required) {
			static const char m[] = "the image is a relative path and the job's working directory cannot be "
						"entered on this node; give an absolute path\n";
			write(2, m, sizeof m - 1);
			_exit(1);
		}
		if (strchr(prog, '/')) {
			execve(prog, argv, envp);
		} else { /* the job's PATH, as execvp would search it */
			for (const char *d = path; *d;) {
				size_t len = strcspn(d, ":");
				if (len + 1 + strlen(prog) < sizeof cand) {
					memcpy(cand, len ? d : ".", len ? len : 1);
					size_t l = len ? len : 1;
					cand[l] = '/';
					strcpy(cand + l + 1, prog);
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
	setpgid(pid, pid); /* both sides: whichever runs first */
	close(po[1]);
	close(pe[1]);
	struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
	long deadline = now_ms() + (long)conf_timeout * 1000;
	char chunk[4096];
	while (fds[0].fd >= 0 || fds[1].fd >= 0) {
		long left = deadline - now_ms();
		if (left <= 0) {
			c->timed_out = 1;
			break;
		}
		int n = poll(fds, 2, left > 1000 ? 1000 : (int)left);
		if (n < 0 && errno != EINTR)
			break;
		for (int i = 0; n > 0 && i < 2; i++) {
			if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t r = read(fds[i].fd, chunk, sizeof chunk);
			if (r < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (r <= 0) {
				close(fds[i].fd);
				fds[i].fd = -1;
				continue;
			}
			if (i == 0)
				keep(out, outsize, &c->out_len, &c->out_trunc, chunk, (size_t)r);
			else
				keep(err, errsize, &c->err_len, &c->err_trunc, chunk, (size_t)r);
		}
	}
	/* Both pipes closed: the child is ending (or closed them and goes
	 * on: it still has until the deadline to exit). */
	for (;;) {
		pid_t w = c->timed_out ? 0 : waitpid(pid, &c->status, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR) {
			snprintf(msg, msgsize, "waitpid: %s", strerror(errno));
			c->status = -1;
			break;
		}
		if (c->timed_out || now_ms() >= deadline) {
			c->timed_out = 1;
			kill(-pid, SIGKILL);
			kill(pid, SIGKILL);
			while (waitpid(pid, &c->status, 0) < 0 && errno == EINTR)
				;
			break;
		}
		poll(NULL, 0, 10);
	}
	for (int i = 0; i < 2; i++)
		if (fds[i].fd >= 0)
			close(fds[i].fd);
	return 0;
}

/* job_envp makes the environment of a dlbundle the plugin runs: the job's
 * variables (the stage dir patterns, the registry's credentials, PATH),
 * this step's ids (the tasks' SLURM_STEP_ID is set later, but the alias key
 * must name it), and extra ("NAME=VALUE" strings, NULL-ended). Made before
 * the fork: slurmstepd has threads, and between fork and exec the child
 * calls only what is safe there (no malloc, no setenv). Free with free(). */
static char **job_envp(spank_t sp, char **env, char *const extra[])
{
	uint32_t jobid = 0, stepid = 0;
	spank_get_item(sp, S_JOB_ID, &jobid);
	spank_get_item(sp, S_JOB_STEPID, &stepid);
	size_t nenv = 0, nextra = 0;
	while (env && env[nenv])
		nenv++;
	while (extra && extra[nextra])
		nextra++;
	char **envp = calloc(nenv + nextra + 3, sizeof *envp);
	if (!envp)
		return NULL;
	static char job_var[64], step_var[64];
	snprintf(job_var, sizeof job_var, "SLURM_JOB_ID=%u", jobid);
	snprintf(step_var, sizeof step_var, "SLURM_STEP_ID=%u", stepid);
	size_t k = 0;
	for (size_t i = 0; i < nenv; i++) {
		const char *eq = strchr(env[i], '=');
		size_t nl = eq ? (size_t)(eq - env[i]) + 1 : strlen(env[i]);
		int replaced = !strncmp(env[i], "SLURM_JOB_ID=", 13) || !strncmp(env[i], "SLURM_STEP_ID=", 14);
		for (size_t j = 0; j < nextra && !replaced; j++)
			replaced = !strncmp(env[i], extra[j], nl);
		if (!replaced)
			envp[k++] = env[i];
	}
	for (size_t j = 0; j < nextra; j++)
		envp[k++] = extra[j];
	envp[k++] = job_var;
	envp[k++] = step_var;
	envp[k] = NULL;
	return envp;
}

/* run_env runs `dlbundle env --format=env0 [--stage-dir DIR] IMAGE` as the
 * job's user, in the job's environment and working directory (a relative
 * image is the user's), and keeps its output in env_buf and its message in
 * msg (raw: escaped where it is shown). It returns dlbundle's exit status,
 * or -1 with msg set. */
static int run_env(spank_t sp, int consume, char *msg, size_t msgsize)
{
	/* consume: `dlbundle stage -q --consume IMAGE` instead, for the copy
	 * sbcast left on the node (--dlbundle-bcast): staged, then removed,
	 * with a record through which env finds the stage. */
	static char scratch[MSG_MAX_LEN];
	const char *verb = consume ? "dlbundle stage --consume" : "dlbundle env";
	char **env = NULL;
	if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS) {
		snprintf(msg, msgsize, "cannot read the job's environment");
		return -1;
	}
	/* dlbundle words its messages for the launcher that ran it: srun's
	 * option in the hint, plugstack.conf's stage_dir= named as the site's
	 * setting. */
	static char *extra[3];
	int e = 0;
	extra[e++] = "DLBUNDLE_LAUNCHER=slurm";
	if (conf_stage_dir[0])
		extra[e++] = "DLBUNDLE_STAGE_DIR_SOURCE=stage_dir= in Slurm's plugstack.conf";
	extra[e] = NULL;
	char **envp = job_envp(sp, env, extra);
	if (!envp) {
		snprintf(msg, msgsize, "out of memory");
		return -1;
	}
	char *argv[10];
	int a = 0;
	argv[a++] = conf_dlbundle;
	if (consume) {
		argv[a++] = "stage";
		argv[a++] = "-q";
		argv[a++] = "--consume";
	} else {
		argv[a++] = "env";
		argv[a++] = "--format=env0";
	}
	if (conf_stage_dir[0]) {
		argv[a++] = "--stage-dir";
		argv[a++] = conf_stage_dir;
	}
	argv[a++] = "--";
	argv[a++] = opt_image;
	argv[a] = NULL;
	const char *path = job_env_get(env, "PATH");
	struct child c;
	int rc = run_child(sp, conf_dlbundle, path ? path : "/usr/local/bin:/usr/bin:/bin", argv, envp,
			   job_env_get(env, "PWD"), opt_image[0] != '/' && strncmp(opt_image, "oci://", 6),
			   consume ? scratch : env_buf, consume ? sizeof scratch : sizeof env_buf, msg, msgsize - 1, &c, msg,
			   msgsize);
	free(envp);
	if (rc != 0)
		return -1;
	msg[c.err_len] = 0;
	size_t m = c.err_len;
	while (m > 0 && msg[m - 1] == '\n')
		msg[--m] = 0;
	if (c.timed_out) {
		snprintf(msg, msgsize,
			 "%s %.1024s did not end within %d seconds and was killed (plugstack.conf's timeout=)", verb,
			 opt_image, conf_timeout);
		return -1;
	}
	if (c.status < 0)
		return -1;
	if (consume) {
		if (WIFSIGNALED(c.status)) {
			snprintf(msg + strlen(msg), msgsize - strlen(msg), "%s%s was killed by signal %d", msg[0] ? "; " : "",
				 verb, WTERMSIG(c.status));
			return -1;
		}
		return WEXITSTATUS(c.status);
	}
	if (c.out_trunc) {
		snprintf(msg, msgsize, "dlbundle env's output is larger than 64 KiB");
		return -1;
	}
	env_len = c.out_len;
	if (WIFSIGNALED(c.status)) {
		snprintf(msg + strlen(msg), msgsize - strlen(msg), "%sdlbundle env was killed by signal %d",
			 msg[0] ? "; " : "", WTERMSIG(c.status));
		return -1;
	}
	return WEXITSTATUS(c.status);
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

/* is_program says whether p is a regular file the job's user may execute
 * (user_init runs with the user's effective ids: AT_EACCESS asks as them). */
static int is_program(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode) && faccessat(AT_FDCWD, p, X_OK, AT_EACCESS) == 0;
}

/* join puts dir/name (dir relative to cwd when not absolute) in dst; 0 on
 * success. */
static int join(char *dst, size_t size, const char *cwd, const char *dir, size_t dirlen, const char *name)
{
	int n;
	if (dirlen && dir[0] == '/')
		n = snprintf(dst, size, "%.*s/%s", (int)dirlen, dir, name);
	else if (!cwd)
		return -1;
	else if (dirlen)
		n = snprintf(dst, size, "%s/%.*s/%s", cwd, (int)dirlen, dir, name);
	else
		n = snprintf(dst, size, "%s/%s", cwd, name);
	return n < 0 || (size_t)n >= size ? -1 : 0;
}

/* resolve_prog finds the step's command as slurmstepd will exec it: a
 * name with a slash from the job's working directory, a bare name in the
 * task's PATH (Slurm 22.05's srun passes it as given), the first regular
 * file the job's user may execute. 0 with dst absolute, else -1. */
static int resolve_prog(const char *name, char **env, char *dst, size_t size)
{
	const char *cwd = job_env_get(env, "PWD");
	if (name[0] == '/')
		return snprintf(dst, size, "%s", name) < (int)size ? 0 : -1;
	if (strchr(name, '/'))
		return join(dst, size, cwd, "", 0, name);
	const char *path = job_env_get(env, "PATH");
	for (const char *d = path ? path : "/usr/local/bin:/usr/bin:/bin"; *d;) {
		size_t len = strcspn(d, ":");
		if (join(dst, size, cwd, d, len, name) == 0 && is_program(dst))
			return 0;
		d += len;
		if (*d == ':')
			d++;
	}
	return -1;
}

/* is_interpreter says whether the program runs a program it is given (a
 * script, a module, code): then that program, not the interpreter alone,
 * is what identifies the command. */
static int is_interpreter(const char *prog)
{
	static const char *const names[] = {"python", "perl", "ruby", "Rscript", "node", "julia", "lua", "php",
					    "bash", "sh", "dash", "zsh", "ksh", "tclsh", NULL};
	const char *b = strrchr(prog, '/');
	b = b ? b + 1 : prog;
	for (int i = 0; names[i]; i++) {
		size_t l = strlen(names[i]);
		/* python3, python3.11, perl5.36, lua5.4: the name and a version */
		if (!strncmp(b, names[i], l) && strspn(b + l, "0123456789.") == strlen(b + l))
			return 1;
	}
	return 0;
}

static uint64_t fnv(uint64_t h, const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
	return h;
}

/* auto_key hashes what identifies the command: the program's resolved
 * path; for an interpreter also the program it runs: the script (its
 * absolute path), or -m MODULE, -c/-e CODE. Its other arguments (inputs,
 * flags) are left out: every run of the program shares one image. The
 * script's directory goes into auto_script_dir (bundled with the image). */
static char auto_script_dir[ARG_MAX_LEN];
static uint64_t auto_key(int argc, char **argv, char **env)
{
	uint64_t h = fnv(1469598103934665603ULL, auto_prog, strlen(auto_prog));
	auto_script_dir[0] = 0;
	if (!is_interpreter(auto_prog))
		return h;
	const char *cwd = job_env_get(env, "PWD");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--")) {
			a = i + 1 < argc ? argv[i + 1] : NULL;
			if (!a)
				break;
		} else if (a[0] == '-') {
			/* -m MODULE, -c CODE, -e CODE (also -mMODULE): the program */
			if ((a[1] == 'm' || a[1] == 'c' || a[1] == 'e' || a[1] == 'E') && (a[2] || i + 1 < argc)) {
				h = fnv(fnv(h, "\0", 1), a, 2);
				const char *v = a[2] ? a + 2 : argv[i + 1];
				return fnv(fnv(h, "\0", 1), v, strlen(v));
			}
			/* options that take a value: skip it */
			if (!a[2] && strchr("WXoOIrL", a[1]) && i + 1 < argc)
				i++;
			else if (!strcmp(a, "--require") && i + 1 < argc)
				i++;
			continue;
		}
		/* the script, by its absolute path */
		static char script[ARG_MAX_LEN];
		if (a[0] == '/')
			snprintf(script, sizeof script, "%s", a);
		else if (!cwd || join(script, sizeof script, cwd, "", 0, a) != 0)
			snprintf(script, sizeof script, "%s", a);
		h = fnv(fnv(h, "\0", 1), script, strlen(script));
		char *slash = strrchr(script, '/');
		if (slash && slash != script && script[0] == '/') {
			*slash = 0;
			snprintf(auto_script_dir, sizeof auto_script_dir, "%s", script);
		}
		return h;
	}
	return h;
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
	spank_get_item(sp, S_JOB_ENV, &env);
	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1 || !argv[0]) {
		step_fails("--dlbundle=auto: the step's command cannot be read");
		return -1;
	}
	if (resolve_prog(argv[0], env, auto_prog, sizeof auto_prog) != 0) {
		step_fails("--dlbundle=auto: %.1024s: no such program in the job's PATH or working directory (as the job's "
			   "user); give its path",
			   argv[0]);
		return -1;
	}
	if (!*dir) {
		const char *home = job_env_get(env, "HOME");
		if (!home || snprintf(auto_dir, sizeof auto_dir, "%s/.dlbundle/auto", home) >= (int)sizeof auto_dir) {
			step_fails("--dlbundle=auto: no HOME in the job's environment; give a directory: --dlbundle=auto:DIR");
			return -1;
		}
	} else if (snprintf(auto_dir, sizeof auto_dir, "%s", dir) >= (int)sizeof auto_dir || dir[0] != '/') {
		step_fails("--dlbundle=auto:%.1024s: give an absolute directory", dir);
		return -1;
	}
	/* FNV-1a: names a file in the user's own directory */
	uint64_t h = auto_key(argc, argv, env);
	snprintf(auto_base, sizeof auto_base, "%s/auto-%016llx", auto_dir, (unsigned long long)h);
	snprintf(auto_path, sizeof auto_path, "%s.dlimg", auto_base);
	if (faccessat(AT_FDCWD, auto_path, R_OK, AT_EACCESS) == 0) { /* as the job's user: its effective ids */
		strcpy(opt_image, auto_path);
		/* the fold at the step's end runs dlbundle as auto_build does */
		auto_serve = find_dlbundle(env) == 0;
		return 0;
	}
	if (find_dlbundle(env) != 0) {
		step_fails("--dlbundle=auto: no dlbundle in the job's PATH (or dlbundle=PATH in plugstack.conf)");
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
	/* DIR is made by dlbundle, as the user, under its trust rule */
	snprintf(auto_path, sizeof auto_path, "%s.trace", auto_base);
	if (spank_setenv(sp, "DLBUNDLE_AUTO_TRACE", auto_path, 1) != ESPANK_SUCCESS ||
	    spank_setenv(sp, "DLBUNDLE_AUTO_ARGV0", auto_prog, 1) != ESPANK_SUCCESS)
		return -1;
	argv[0] = dlbundle_path;
	return 0;
}

/* run_auto_verb runs dlbundle as the job's user, in the job's environment
 * plus extra (the DLBUNDLE_AUTO_* request that picks its work), and copies
 * what it printed on stderr into slurmd's log under what. Returns 0 with c
 * filled in, or -1 (logged, naming doing) when it could not be started. */
static int run_auto_verb(spank_t sp, char *extra[], const char *what, const char *doing, struct child *c)
{
	char **env = NULL;
	spank_get_item(sp, S_JOB_ENV, &env);
	char **envp = job_envp(sp, env, extra);
	if (!envp)
		return -1;
	char *bargv[] = {dlbundle_path, NULL};
	static char out[MSG_MAX_LEN], err[MSG_MAX_LEN], msg[256];
	int rc = run_child(sp, dlbundle_path, "", bargv, envp, NULL, 0, out, sizeof out, err, sizeof err, c, msg, sizeof msg);
	free(envp);
	if (rc != 0) {
		slurm_error("dlbundle: --dlbundle=auto: cannot run %s to %s %s.dlimg: %s", dlbundle_path, doing, auto_base, msg);
		return -1;
	}
	log_text(0, what, err, c->err_len);
	return 0;
}

/* auto_build has dlbundle build DIR/auto-<key>.dlimg from the first task's
 * trace, as the job's user (DLBUNDLE_AUTO_BUILD: cmd/dlbundle/autotrace.go):
 * dlbundle writes the image under a temporary name renamed when complete (a
 * later step never sees half an image) and build's messages into
 * DIR/auto-<key>.log, both under its trust rule; the command's directory is
 * bundled even where build's policy leaves such places out (/tmp,
 * /var/tmp). What dlbundle prints goes to slurmd's log, escaped. */
static void auto_build(spank_t sp)
{
	int argc = 0;
	char **argv = NULL;
	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1 || !argv[0])
		return;
	static char base_var[ARG_MAX_LEN + 96], include_var[3 * ARG_MAX_LEN];
	snprintf(base_var, sizeof base_var, "DLBUNDLE_AUTO_BUILD=%s", auto_base);
	/* the program's directory and an interpreter's script's (resolved in
	 * user_init), one a line */
	static char progdir[ARG_MAX_LEN];
	snprintf(progdir, sizeof progdir, "%s", auto_prog);
	char *slash = strrchr(progdir, '/');
	if (slash && slash != progdir)
		*slash = 0;
	snprintf(include_var, sizeof include_var, "DLBUNDLE_AUTO_INCLUDE=%s%s%s", progdir, auto_script_dir[0] ? "\n" : "",
		 auto_script_dir);
	char *extra[] = {base_var, include_var, NULL};
	struct child c;
	if (run_auto_verb(sp, extra, "--dlbundle=auto build", "build", &c) != 0)
		return;
	if (c.timed_out)
		slurm_error("dlbundle: --dlbundle=auto: building %s.dlimg took longer than %d seconds and was killed "
			    "(plugstack.conf's timeout=); the next step traces again",
			    auto_base, conf_timeout);
	else if (c.status < 0 || !WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0)
		slurm_error("dlbundle: --dlbundle=auto: building %s.dlimg failed (status %#x; its messages: %s.log); "
			    "the next step traces again",
			    auto_base, c.status, auto_base);
	else
		slurm_info("dlbundle: --dlbundle=auto: built %s.dlimg; later steps of this command run from it", auto_base);
}

/* auto_fold has dlbundle fold this node's records of the step into
 * DIR/auto-<key>.dlimg, as the job's user (DLBUNDLE_AUTO_FOLD:
 * cmd/dlbundle/autofold.go), when the step ran from that image: the next
 * step of the command then loads from the image what this one missed.
 * dlbundle decides whether the records name anything the image lacks,
 * serialises the nodes' folds on a lock in DIR and renames each new image
 * over the old one when complete; the plugin only starts it. The stage dir
 * is the one env staged in (plugstack.conf's stage_dir=, else the job's),
 * where the step's tasks left their records. */
static void auto_fold(spank_t sp)
{
	static char base_var[ARG_MAX_LEN + 96], stage_var[ARG_MAX_LEN + 32];
	snprintf(base_var, sizeof base_var, "DLBUNDLE_AUTO_FOLD=%s", auto_base);
	char *extra[3] = {base_var, NULL, NULL};
	if (conf_stage_dir[0]) {
		snprintf(stage_var, sizeof stage_var, "DLBUNDLE_STAGE_DIR=%s", conf_stage_dir);
		extra[1] = stage_var;
	}
	struct child c;
	if (run_auto_verb(sp, extra, "--dlbundle=auto fold", "fold this step's misses into", &c) != 0)
		return;
	if (c.timed_out)
		slurm_error("dlbundle: --dlbundle=auto: folding this step's misses into %s.dlimg took longer than %d seconds "
			    "and was killed (plugstack.conf's timeout=); the image is as it was",
			    auto_base, conf_timeout);
	else if (c.status < 0 || !WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0)
		slurm_error("dlbundle: --dlbundle=auto: folding this step's misses into %s.dlimg failed (status %#x); "
			    "the image is as it was",
			    auto_base, c.status);
}

/* slurm_spank_task_exit: in slurmstepd as each task's exit is collected.
 * The build runs when the traced task has ended, and the fold of a step
 * served from the auto image when the node's last task has ended (every
 * task's processes have written their records), inside this callback: at
 * the step's end (slurm_spank_exit) slurmstepd has already sent SIGTERM to
 * every process it started, and the build was one of them. */
int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	uint32_t gid = 1, ntasks = 0;
	if (!spank_remote(sp))
		return 0;
	if (auto_trace && spank_get_item(sp, S_TASK_GLOBAL_ID, &gid) == ESPANK_SUCCESS && gid == 0)
		auto_build(sp);
	if (auto_serve && env_ready && spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks) == ESPANK_SUCCESS &&
	    ++tasks_ended == ntasks)
		auto_fold(sp);
	return 0;
}

/* bcast_applies says whether --dlbundle-bcast (or bcast=1) covers this
 * step's image: a file (not oci://, not auto, not none). */
static int bcast_applies(void)
{
	return opt_bcast && opt_image[0] && strcmp(opt_image, "none") && strncmp(opt_image, "oci://", 6) &&
	       !(!strncmp(opt_image, "auto", 4) && (opt_image[4] == 0 || opt_image[4] == ':'));
}

/* bcast_name puts the node-local copy's path in bcast_local, the same in
 * srun and on every node: node-local /tmp (sticky), the user, the job and
 * bcast_id, the image's identity that srun computed (bcast_identity): one
 * copy per job and image, which the job's later steps reuse, and a new one
 * when the image file changed (node/consume.go's BcastCopyPrefix; dlbundle
 * gc --job removes what is left at the job's end). sbcast creates it with
 * O_EXCL as the user: a name someone took first fails the copy (and
 * dlbundle refuses a copy that is not the user's own regular file), it is
 * never written through. */
static int bcast_name(spank_t sp)
{
	uint32_t jobid = 0, uid = 0;
	if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS || strlen(bcast_id) != 16)
		return -1;
	uid_t u;
	if (spank_get_item(sp, S_JOB_UID, &u) == ESPANK_SUCCESS)
		uid = (uint32_t)u;
	else
		uid = (uint32_t)getuid();
	snprintf(bcast_local, sizeof bcast_local, "/tmp/dlbundle-bcast-%u.%u-%s.dlimg", uid, jobid, bcast_id);
	return 0;
}

/* bcast_identity: in srun, the image's identity as bcast_id: a hash of
 * its path as given and what stat says of the file (device, inode, size,
 * modification time), without opening it; a stat that fails leaves the
 * path alone (sbcast then says why it cannot read it). */
static void bcast_identity(void)
{
	struct stat st;
	uint64_t h = fnv(1469598103934665603ULL, opt_image, strlen(opt_image));
	if (stat(opt_image, &st) == 0) {
		uint64_t f[6] = {(uint64_t)st.st_dev, (uint64_t)st.st_ino, (uint64_t)st.st_size,
				 (uint64_t)st.st_mtim.tv_sec, (uint64_t)st.st_mtim.tv_nsec, (uint64_t)st.st_ctim.tv_sec};
		h = fnv(h, (const char *)f, sizeof f);
	}
	snprintf(bcast_id, sizeof bcast_id, "%016llx", (unsigned long long)h);
}

/* slurm_spank_init_post_opt: in srun, after its options. With
 * --dlbundle-bcast the image's identity goes to the nodes in the step's
 * environment (srun's own, which every step of srun carries; a variable
 * set later in srun would not reach slurmstepd's user_init), for the
 * copy's name. */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void)sp;
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_LOCAL || !bcast_applies())
		return 0;
	bcast_identity();
	if (setenv(BCAST_ID_VAR, bcast_id, 1) != 0) {
		slurm_error("dlbundle: --dlbundle-bcast: cannot set %s in srun's environment", BCAST_ID_VAR);
		return -1;
	}
	return 0;
}

/* slurm_spank_local_user_init: in srun, once the step exists and before
 * its tasks start. With --dlbundle-bcast, dlbundle (as the user: srun's)
 * has sbcast read the image once and slurmd's tree copy it to every node of
 * the job, unless an earlier step of the job did (dlbundle's record in the
 * stage dir of srun's host); each node's user_init stages that copy. */
int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_LOCAL || !bcast_applies())
		return 0;
	uint32_t jobid = 0;
	if (spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS || bcast_name(sp) != 0) {
		slurm_error("dlbundle: --dlbundle-bcast: the job's ids cannot be read in srun");
		return -1;
	}
	static char jobarg[64];
	snprintf(jobarg, sizeof jobarg, "--job=%u", jobid);
	char *argv[8];
	int a = 0;
	argv[a++] = conf_dlbundle;
	argv[a++] = "__bcast";
	argv[a++] = jobarg;
	if (conf_stage_dir[0]) {
		argv[a++] = "--stage-dir";
		argv[a++] = conf_stage_dir;
	}
	argv[a++] = "--";
	argv[a++] = opt_image;
	argv[a++] = bcast_local;
	argv[a] = NULL;
	extern char **environ;
	static char out[MSG_MAX_LEN], err[MSG_MAX_LEN], msg[256];
	struct child c;
	const char *path = getenv("PATH");
	child_local = 1; /* srun runs as the user */
	int rc = run_child(sp, conf_dlbundle, path ? path : "/usr/local/bin:/usr/bin:/bin", argv, environ, NULL, 0, out,
			   sizeof out, err, sizeof err - 1, &c, msg, sizeof msg);
	child_local = 0;
	if (rc != 0) {
		slurm_error("dlbundle: --dlbundle-bcast: cannot run %s: %s", conf_dlbundle, msg);
		return -1;
	}
	if (c.timed_out || c.status != 0) {
		static char esc[MSG_MAX_LEN];
		escape(esc, sizeof esc, err, c.err_len, 0);
		/* the nodes find no copy and fail the step, naming the image */
		slurm_error("dlbundle: --dlbundle-bcast: copying %s to %s on the job's nodes %s: %s", opt_image, bcast_local,
			    c.timed_out ? "was killed at plugstack.conf's timeout=" : "failed", esc[0] ? esc : "");
		return -1;
	}
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

/* env_value is NAME's value in dlbundle env's output, or NULL. */
static const char *env_value(const char *name)
{
	size_t nl = strlen(name);
	for (size_t i = 0; i < env_len;) {
		const char *kv = env_buf + i;
		size_t len = strnlen(kv, env_len - i);
		if (i + len >= env_len)
			break;
		if (len > nl && !strncmp(kv, name, nl) && kv[nl] == '=')
			return kv + nl + 1;
		i += len + 1;
	}
	return NULL;
}

/* check_glibc: a stage holds an ldso record (loader/stagefmt/ldso.go) when
 * the image's ld.so is another glibc build than this node's: then a bundled
 * program must start under the image's ld.so, with the program as its
 * argument (the kernel would take the node's from PT_INTERP, and two halves
 * of glibc from two builds fail before main, or the shim gives the process
 * the node's libc, another glibc than the image's libraries were built
 * for). task_init can change the path slurmstepd execs but not add
 * arguments, so there each task starts dlbundle, which execs the image's
 * ld.so (cmd/dlbundle/ldsostart.go). On a node of the image's glibc this
 * costs one failed readlink per node and step. */
static void check_glibc(spank_t sp)
{
	const char *stage = env_value("DLBUNDLE_STAGE");
	static char rec[ARG_MAX_LEN + 16], text[ARG_MAX_LEN];
	if (!stage || snprintf(rec, sizeof rec, "%s/ldso", stage) >= (int)sizeof rec ||
	    readlink(rec, text, sizeof text - 1) < 0)
		return;
	char **env = NULL;
	spank_get_item(sp, S_JOB_ENV, &env);
	if (find_dlbundle(env) != 0) {
		step_fails("this node's glibc is not the one %.1024s was built with, and the tasks must start under the "
			   "image's ld.so through dlbundle, which is not in the job's PATH (set dlbundle=PATH in "
			   "plugstack.conf)",
			   opt_image);
		return;
	}
	cross_glibc = 1;
}

/* slurm_spank_user_init: once per node and step, in slurmstepd, as the
 * job's user, before any task is forked. */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!wanted(sp))
		return 0;
	int bcast = bcast_applies(); /* as srun saw it: not an image auto found */
	if (!strncmp(opt_image, "auto", 4) && (opt_image[4] == 0 || opt_image[4] == ':')) {
		if (auto_setup(sp) != 0)
			return 0; /* step_fails said why */
		if (auto_trace)
			return 0; /* no image yet: natively, the first task traced */
	}
	char msg[MSG_MAX_LEN] = "";
	int rc = 0;
	if (bcast) {
		/* the copy srun's sbcast left here: staged and removed (the
		 * node keeps one copy, the stage), then env finds the stage */
		static char given[ARG_MAX_LEN];
		snprintf(given, sizeof given, "%s", opt_image);
		char **env = NULL;
		spank_get_item(sp, S_JOB_ENV, &env);
		const char *id = job_env_get(env, BCAST_ID_VAR);
		/* 16 hex digits, the name's only part srun sends */
		if (!id || strlen(id) != 16 || strspn(id, "0123456789abcdef") != 16) {
			step_fails("--dlbundle-bcast: srun did not name the copy of %.1024s (%s is missing): is srun's "
				   "plugstack.conf the nodes' (the dlbundle plugin loaded by srun too)?",
				   given, BCAST_ID_VAR);
			return 0;
		}
		strcpy(bcast_id, id);
		if (bcast_name(sp) != 0) {
			step_fails("--dlbundle-bcast: the job's ids cannot be read");
			return 0;
		}
		strcpy(opt_image, bcast_local);
		rc = run_env(sp, 1, msg, sizeof msg);
		if (rc != 0) {
			static char m2[MSG_MAX_LEN];
			snprintf(m2, sizeof m2, "--dlbundle-bcast: the copy of %.1024s that sbcast was to leave on this node: %s",
				 given, msg);
			snprintf(msg, sizeof msg, "%s", m2);
		}
	}
	if (rc == 0)
		rc = run_env(sp, 0, msg, sizeof msg);
	if (rc == 0) {
		env_ready = 1;
		check_glibc(sp);
		return 0;
	}
	/* The message is the user's text (dlbundle's, or whatever the job's
	 * PATH ran as dlbundle): escaped and bounded wherever it is shown. */
	if (!msg[0])
		snprintf(msg, sizeof msg, "dlbundle env %.1024s failed (exit status %d) without a message", opt_image, rc);
	static char esc[MSG_MAX_LEN];
	escape(esc, sizeof esc, msg, strlen(msg), 1);
	/* slurmd's log; the user reads it from the tasks (task_init) */
	log_text(0, NULL, msg, strlen(msg));
	if (opt_fallback) {
		/* dlbundle's hint names the option already given */
		char *hint = strstr(esc, " (srun --dlbundle-fallback");
		if (hint)
			*hint = 0;
		/* the user is told in task_init, on the node's first task's stderr */
		snprintf(fallback_msg, sizeof fallback_msg,
			 "dlbundle: warning: %s; running the tasks natively (--dlbundle-fallback)\n", esc);
		return 0;
	}
	/* The step fails in task_init, where every task exits before exec:
	 * an error returned here is a launch failure, for which srun 22.05
	 * exits 0, and under an `optional` plugstack line Slurm ignores the
	 * plugin's errors altogether. */
	snprintf(failed_msg, sizeof failed_msg, "dlbundle: %s\n", esc);
	env_failed = 1;
	return 0;
}

/* step_fails makes every task of the step exit 1 with this message (the
 * plugin's own words: printable), and logs it. */
static void step_fails(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = snprintf(failed_msg, sizeof failed_msg, "dlbundle: ");
	vsnprintf(failed_msg + n, sizeof failed_msg - (size_t)n - 1, fmt, ap);
	va_end(ap);
	slurm_info("%s", failed_msg);
	strcat(failed_msg, "\n");
	env_failed = 1;
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
/* staged_elf says whether path is an executable ELF file (the stage's). */
static int staged_elf(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 0;
	char magic[4] = {0};
	ssize_t n = read(fd, magic, sizeof magic);
	close(fd);
	return n == 4 && !memcmp(magic, "\177ELF", 4) && access(path, X_OK) == 0;
}

/* staged_in_path finds a bare command name in the job's PATH inside the
 * stage (as exec asks the stage first): its original path in prog and its
 * staged copy in staged_path. 0 when found. */
static char cross_prog[ARG_MAX_LEN + ARG_MAX_LEN];
static int staged_in_path(spank_t sp, const char *stage, const char *name)
{
	char **env = NULL;
	spank_get_item(sp, S_JOB_ENV, &env);
	const char *path = job_env_get(env, "PATH");
	for (const char *d = path ? path : "/usr/local/bin:/usr/bin:/bin"; *d;) {
		size_t len = strcspn(d, ":");
		if (len && d[0] == '/' &&
		    snprintf(cross_prog, sizeof cross_prog, "%.*s/%s", (int)len, d, name) < (int)sizeof cross_prog &&
		    snprintf(staged_path, sizeof staged_path, "%s/root%s", stage, cross_prog) < (int)sizeof staged_path &&
		    staged_elf(staged_path))
			return 0;
		d += len;
		if (*d == ':')
			d++;
	}
	return -1;
}

static int staged_program(spank_t sp, const char *stage)
{
	int argc = 0;
	char **argv = NULL;
	if (!stage || spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1 || !argv || !argv[0])
		return 0;
	if (argv[0][0] == '/') {
		if (snprintf(staged_path, sizeof staged_path, "%s/root%s", stage, argv[0]) >= (int)sizeof staged_path ||
		    !staged_elf(staged_path))
			return 0;
		snprintf(cross_prog, sizeof cross_prog, "%s", argv[0]);
	} else if (!cross_glibc || strchr(argv[0], '/') || staged_in_path(sp, stage, argv[0]) != 0)
		return 0; /* a bare name: slurmstepd's own PATH search, except where the image's ld.so must start it */
	if (cross_glibc) {
		/* dlbundle in the task's place execs the image's ld.so with
		 * the program (check_glibc): DLBUNDLE_LDSO_PROG names it, and
		 * the task's own argv[0] stays the program's (ld.so --argv0) */
		if (spank_setenv(sp, "DLBUNDLE_LDSO_ARGV0", argv[0], 1) != ESPANK_SUCCESS ||
		    spank_setenv(sp, "DLBUNDLE_LDSO_PROG", cross_prog, 1) != ESPANK_SUCCESS) {
			slurm_error("dlbundle: cannot set DLBUNDLE_LDSO_ARGV0 in the task's environment");
			return -1;
		}
		argv[0] = dlbundle_path;
		return 0;
	}
	argv[0] = staged_path;
	return 0;
}

/* slurm_spank_task_init: in each task, just before slurmstepd execs it:
 * dlbundle env's variables into the task's environment. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (env_failed) {
		/* Every task exits 1 without starting the app, whatever the
		 * plugstack line says (a -1 here would be ignored under
		 * `optional`); each node's first task says why (a node-local
		 * cause fails that node alone). */
		int local = -1;
		if (spank_get_item(sp, S_TASK_ID, &local) == ESPANK_SUCCESS && local == 0) {
			ssize_t w = write(2, failed_msg, strlen(failed_msg));
			(void)w;
		}
		_exit(1);
	}
	if (auto_trace)
		return auto_task(sp);
	if (bcast_id[0])
		spank_unsetenv(sp, BCAST_ID_VAR); /* the plugin's, not the app's */
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
	return staged_program(sp, stage);
}

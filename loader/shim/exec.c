/* exec.c — a bundled program runs from the stage: the exec family and
 * posix_spawn (#! scripts, programs that gain privileges, a process whose
 * ids cannot read the stage), the environment a child gets, argv[0] of a
 * program started from the stage, and ld.so's names of staged objects
 * (dlinfo, dlerror) shown as the originals. */
#include "shim_state.h"

/* ---- LD_LIBRARY_PATH: ld.so searches the stage, the app sees its own ----
 *
 * dlbundle exec maps each LD_LIBRARY_PATH entry that the image bundles as a
 * directory to its staged copy (loader.ShimEnv), so that ld.so's own probes
 * (the stat of a failed candidate's directory, which no audit module sees)
 * stay on the node-local stage. DLBUNDLE_NATIVE_ENV holds the app's own entry
 * verbatim, DLBUNDLE_MAPPED_ENV the mapped one. The audit module already
 * points environ's slot at the app's entry before any constructor runs
 * (audit.c); this is the fallback. Children that inherit the app's value
 * unchanged get the mapped one back (env_mapped). Pointer swaps only: no
 * allocation. */
extern char **environ;
static char *llp_mapped; /* "LD_LIBRARY_PATH=<mapped>", inside DLBUNDLE_MAPPED_ENV */
static char *llp_native; /* "LD_LIBRARY_PATH=<the app's own>", inside DLBUNDLE_NATIVE_ENV */

void restore_native_env(const struct shim_env *v)
{
	char *n = (char *)v->native_env, *m = (char *)v->mapped_env, **e = v->llp;
	if (!n || !m || !e || strncmp(n, "LD_LIBRARY_PATH=", 16) != 0 || strncmp(m, "LD_LIBRARY_PATH=", 16) != 0)
		return;
	/* Anything else was set by a parent after dlbundle exec: leave it. */
	if (*e == n || !strcmp(*e, m)) {
		llp_mapped = m;
		llp_native = n;
		*e = n;
	}
}

/* env_for_child: the number of entries of envp, and whether it holds the
 * app's own LD_LIBRARY_PATH (unchanged) that env_mapped then swaps back. */
static int env_for_child(char *const envp[], size_t *n)
{
	int hit = 0, dirty = __atomic_load_n(&dirty_n, __ATOMIC_ACQUIRE) || __atomic_load_n(&dirty_all, __ATOMIC_ACQUIRE);
	*n = 0;
	if ((!llp_native && !dirty) || !envp) return 0;
	for (; envp[*n]; (*n)++) {
		if (llp_native && (envp[*n] == llp_native || !strcmp(envp[*n], llp_native))) hit = 1;
		/* read-your-writes: the child gets this process's dirty set (an
		 * envp copied before a write holds an older one) */
		if (dirty && !strncmp(envp[*n], "DLBUNDLE_DIRTY=", 15) && envp[*n] != dirty_env) hit = 1;
	}
	return hit;
}
/* env_mapped fills v (n + 1 slots) with envp, the mapped LD_LIBRARY_PATH and
 * the current DLBUNDLE_DIRTY swapped in. */
static char *const *env_mapped(char *const envp[], char **v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		v[i] = llp_native && (envp[i] == llp_native || !strcmp(envp[i], llp_native)) ? llp_mapped : envp[i];
		if (!strncmp(envp[i], "DLBUNDLE_DIRTY=", 15) && dirty_end > 15) v[i] = dirty_env;
	}
	v[n] = NULL;
	return v;
}


/* ---- argv[0] of a program its launcher started from the stage ----
 *
 * dlbundle exec runs a bundled executable from its staged copy with argv[0]
 * as given. A launcher that knows only a path (slurmstepd execs the path it
 * passes as argv[0], and the Slurm plugin points that at the staged copy so
 * that the kernel reads the program from the stage) starts it with argv[0]
 * = $DLBUNDLE_STAGE/root<original>. The app must see what it sees natively:
 * argv[0] is pointed at the original path, the tail of that same string
 * (no copy, no allocation), and so is glibc's program_invocation_name, which
 * glibc set from argv[0] before any constructor ran (error(3), err(3)).
 * /proc/self/cmdline still shows the staged path; /proc/self/exe is
 * answered with the original path as for exec (proc_readlink). glibc calls
 * an ELF constructor with (argc, argv, envp) on every architecture it
 * supports, and main later gets the same argv array. */
extern char *program_invocation_name;
void unstage_argv0(int argc, char **argv)
{
	if (argc < 1 || !argv || !argv[0] || !stage_root_len || inactive >= 0) return;
	char *a = argv[0];
	if (strncmp(a, stage_root, stage_root_len) != 0 || a[stage_root_len] != '/') return;
	if (program_invocation_name == a) program_invocation_name = a + stage_root_len;
	argv[0] = a + stage_root_len;
}


/* ---- exec: a bundled ELF executable runs from the stage ---- */

/* privileged_mode: a file of mode m gains privileges when executed
 * (setuid; setgid with group execute, since setgid without it means
 * mandatory locking, not privilege). m is the original's mode as the
 * builder recorded it in the image (the table's), so that deciding costs
 * no operation on the file system; an image that lies only makes the
 * program run as it would without dlbundle (bit set) or without its
 * privilege (bit cleared), never with more. */
static int privileged_mode(uint32_t m)
{
	return ((m & S_ISUID) && (m & 0111)) || ((m & S_ISGID) && (m & S_IXGRP));
}

/* exec_target returns the staged copy of path when it is a bundled ELF file
 * or, when script is not NULL, a bundled "#!" script (*script = 1; the
 * caller runs its interpreter itself, see script_argv). Other scripts are not
 * redirected: their interpreter would see the staged path in argv. Stack
 * buffers only: this runs in vfork children. */
static const char *exec_target(const char *fn, const char *path, char *sp, size_t spsz, int *err, int *script, int *priv)
{
	char canon[DLB_PATH_MAX];
	struct dlb_res r;
	const char *pp = path; /* not rewritten: the kernel hands the exec'd path to a script's interpreter */
	*err = 0;
	*priv = 0;
	if (script) *script = 0;
	switch (lookup(fn, AT_FDCWD, &pp, 1, canon, &r)) {
	case DLB_BUNDLED:
		if (r.ent->type != DLB_REG) break;
		/* A setuid or setgid original: its staged copy has neither bit
		 * (extraction drops them: an image must not create privileged
		 * files), so `passwd -S` would run as the caller and answer
		 * wrongly. The caller runs the original natively, without the
		 * shim's variables (ld.so ignores them in a secure-execution
		 * process anyway). */
		if (privileged_mode(r.ent->mode)) {
			*priv = 1;
			return path;
		}
		if (staged(sp, spsz, canon, r.len) != 0) break;
		if (!(r.ent->flags & DLB_FLAG_ELF_EXEC)) {
			/* The image may not know the kind: check the magic of the staged copy. */
			char m[4] = {0};
			int fd = (int)syscall(SYS_openat, AT_FDCWD, sp, O_RDONLY | O_CLOEXEC);
			if (fd < 0) break;
			long n = syscall(SYS_read, fd, m, 4);
			syscall(SYS_close, fd);
			if (script && n >= 2 && m[0] == '#' && m[1] == '!' && (r.ent->mode & 0111)) { *script = 1; return sp; }
			if (n != 4 || memcmp(m, "\177ELF", 4) != 0) break;
		}
		return sp;
	case DLB_KNOWN_ERR:
		*err = r.err;
		return NULL;
	}
	return path;
}

/* script_line reads the "#!" line of the staged script sp as the kernel's
 * binfmt_script does (first 256 bytes; the interpreter is the first word,
 * the rest of the line with surrounding blanks trimmed is one optional
 * argument). Returns 0 with *interp (and *arg or NULL) pointing into buf,
 * -1 when the kernel should decide (line longer than the buffer). */
static int script_line(const char *sp, char *buf, size_t bufsz, char **interp, char **arg)
{
	int fd = (int)syscall(SYS_openat, AT_FDCWD, sp, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return -1;
	long n = syscall(SYS_read, fd, buf, bufsz - 1);
	syscall(SYS_close, fd);
	if (n < 2) return -1;
	buf[n] = 0;
	char *nl = memchr(buf, '\n', (size_t)n);
	if (!nl) return -1;
	*nl = 0;
	char *p = buf + 2;
	while (*p == ' ' || *p == '\t') p++;
	if (!*p) return -1;
	*interp = p;
	while (*p && *p != ' ' && *p != '\t') p++;
	char *end = p;
	while (*p == ' ' || *p == '\t') p++;
	*end = 0;
	*arg = NULL;
	if (*p) {
		char *e = p + strlen(p);
		while (e > p && (e[-1] == ' ' || e[-1] == '\t')) e--;
		*e = 0;
		*arg = p;
	}
	return 0;
}

/* ---- a bundled child under the image's own ld.so (cross stage) ----
 *
 * DLBUNDLE_LDSO ("<glibc version> <staged ld.so>") says the stage's image
 * glibc is not the node's (STAGE/ldso, docs/exec.md "Images and nodes").
 * The kernel would take the node's ld.so from a bundled program's PT_INTERP
 * and pair it with the image's libc; so a bundled, dynamically linked
 * program is started as dlbundle exec starts one: <staged ld.so> [--argv0
 * ARGV0] <staged program> ARGS, with DLBUNDLE_EXE naming the program
 * (/proc/self/exe and the main program's $ORIGIN, audit.c). glibc before
 * 2.33 has no --argv0: argv[0] is then the staged path (unstage_argv0 shows
 * the original). Stack buffers only: this runs in vfork children. */

/* cross_ldso returns the staged ld.so when sp (a staged ELF) must start
 * under it, and sets *argv0 when that ld.so takes --argv0. */
static const char *cross_ldso(const char *sp, int *argv0)
{
	const char *v = getenv("DLBUNDLE_LDSO"), *ldso = v ? strchr(v, ' ') : NULL;
	if (!ldso || ldso[1] != '/' || !stage_root_len || strncmp(sp, stage_root, stage_root_len) || sp[stage_root_len] != '/')
		return NULL;
	ldso++;
	if (!strcmp(sp, ldso)) return NULL; /* the staged ld.so itself (ldd, or by hand) */
	/* Dynamically linked against glibc: a PT_INTERP naming glibc's ld.so
	 * (ld-linux-*.so.N, ld64.so.N). Not a static program (ld.so refuses
	 * one), not another libc's (musl's ld-musl-*), not another class (a
	 * 32-bit program's headers are not ElfW's size). */
	ElfW(Ehdr) eh;
	int fd = (int)syscall(SYS_openat, AT_FDCWD, sp, O_RDONLY | O_CLOEXEC), dyn = 0;
	if (fd < 0) return NULL;
	if (syscall(SYS_pread64, fd, &eh, sizeof eh, 0) == (long)sizeof eh && eh.e_phentsize == sizeof(ElfW(Phdr)) &&
	    eh.e_phnum > 0 && eh.e_phnum <= 64) {
		ElfW(Phdr) ph[64];
		char in[256];
		long want = (long)eh.e_phnum * (long)sizeof *ph;
		if (syscall(SYS_pread64, fd, ph, want, eh.e_phoff) == want)
			for (int i = 0; i < eh.e_phnum; i++) {
				if (ph[i].p_type != PT_INTERP || ph[i].p_filesz < 2 || ph[i].p_filesz > sizeof in) continue;
				if (syscall(SYS_pread64, fd, in, ph[i].p_filesz, ph[i].p_offset) != (long)ph[i].p_filesz) break;
				in[ph[i].p_filesz - 1] = 0;
				const char *b = strrchr(in, '/') ? strrchr(in, '/') + 1 : in;
				dyn = !strncmp(b, "ld-linux", 8) || !strncmp(b, "ld64.so", 7);
				break;
			}
	}
	syscall(SYS_close, fd);
	if (!dyn) return NULL;
	/* glibc 2.33 and later: "2.33", "2.41", "3.0" */
	long major = strtol(v, NULL, 10), minor = strchr(v, '.') ? strtol(strchr(v, '.') + 1, NULL, 10) : 0;
	*argv0 = major > 2 || (major == 2 && minor >= 33);
	return ldso;
}

/* cross_argv fills av (argc + 5 slots) with ld.so's command line. */
static void cross_argv(char **av, const char *ldso, int argv0, const char *sp, char *const argv[], int argc)
{
	int k = 0;
	av[k++] = (char *)ldso;
	if (argv0 && argc > 0) {
		av[k++] = (char *)"--argv0";
		av[k++] = argv[0];
	}
	av[k++] = (char *)sp;
	for (int i = 1; i < argc; i++) av[k++] = argv[i];
	av[k] = NULL;
}

/* cross_env fills ev (n + 2 slots) with src[0..n) less any inherited
 * DLBUNDLE_EXE (the parent's program), then exe = "DLBUNDLE_EXE=<original>".
 * ev may be src (the entries only move left). */
static char *const *cross_env(char *const src[], size_t n, char **ev, char *exe, size_t exesz, const char *sp)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(src[i], "DLBUNDLE_EXE=", 13)) ev[k++] = src[i];
	const char *orig = sp + stage_root_len;
	size_t ol = strlen(orig);
	if (13 + ol < exesz) {
		memcpy(exe, "DLBUNDLE_EXE=", 13);
		memcpy(exe + 13, orig, ol + 1);
		ev[k++] = exe;
	}
	ev[k] = NULL;
	return ev;
}

static size_t env_count(char *const envp[])
{
	size_t n = 0;
	while (envp && envp[n]) n++;
	return n;
}

/* ---- a process whose ids cannot read the stage ----
 *
 * A child that changed its ids before exec (subprocess.run(user='nobody'),
 * runuser, su) cannot read a 0700 stage: the staged copy fails with EACCES
 * and ld.so prints "cannot be preloaded" for the shim objects, or exits 127
 * when LD_LIBRARY_PATH names the stage. The exec wrappers then run the
 * original file with the environment the app would have passed natively:
 * the shim's LD_PRELOAD and LD_AUDIT entries, the DLBUNDLE_* variables
 * dropped, and LD_LIBRARY_PATH as the app's own. Stack buffers only: this
 * runs in vfork children. */
/* holds_caps: the process has a permitted, effective or inheritable
 * capability (ambient ones are both permitted and inheritable). capget(2)
 * by raw system call: libcap is not linked, and no allocation (vfork
 * children run this). Version 3 fills two 32-bit words per set. */
static int holds_caps(void)
{
	struct { uint32_t version; int pid; } hdr = {0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0};
	struct { uint32_t eff, prm, inh; } d[2];
	int saved = errno;
	long rc = syscall(SYS_capget, &hdr, d);
	errno = saved;
	if (rc < 0) return 1; /* cannot tell: assume privileged, run natively */
	return (d[0].eff | d[0].prm | d[0].inh | d[1].eff | d[1].prm | d[1].inh) != 0;
}

int stage_readable(void)
{
	if (!stage_root_len) return 1; /* no stage */
	uid_t u = (uid_t)syscall(SYS_getuid), e = (uid_t)syscall(SYS_geteuid);
	if (u == init_uid && e == init_euid) return 1;
	/* Ids changed and capabilities kept (PR_SET_KEEPCAPS, as setpriv
	 * --reuid does, or ambient ones): CAP_DAC_* would pass the check below
	 * for a process whose exec'd child, once the kernel drops them, cannot
	 * read the stage; and a child that keeps them (ambient) must not load
	 * code from a stage its new uid may write. Either way: native. */
	if (holds_caps()) return 0;
	char stage_table[DLB_STAGE_MAX + 8];
	stage_table_path(stage_table);
	int saved = errno;
	long rc = syscall(SYS_faccessat2, AT_FDCWD, stage_table, R_OK, AT_EACCESS);
	if (rc < 0 && errno == ENOSYS) rc = syscall(SYS_faccessat, AT_FDCWD, stage_table, R_OK);
	errno = saved;
	return rc == 0;
}

/* shim_entry: an LD_PRELOAD/LD_AUDIT entry p[0:n] is one of the stage's. */
static int shim_entry(const char *p, size_t n)
{
	size_t sl = stage_root_len > 5 ? stage_root_len - 5 : 0; /* the stage dir */
	return sl && n > sl && !memcmp(p, stage_root, sl) && p[sl] == '/';
}

/* env_native_len: the size of the buffer env_native needs for envp. */
static size_t env_native_len(char *const envp[], size_t *n)
{
	size_t bytes = 0;
	*n = 0;
	for (; envp && envp[*n]; (*n)++)
		if (!strncmp(envp[*n], "LD_PRELOAD=", 11) || !strncmp(envp[*n], "LD_AUDIT=", 9)) bytes += strlen(envp[*n]) + 1;
	return bytes + 1;
}

/* env_native fills v (n + 1 slots) with envp as the app would pass it
 * natively; buf holds the rewritten LD_PRELOAD/LD_AUDIT values. */
static char *const *env_native(char *const envp[], char **v, size_t n, char *buf)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		char *e = envp[i];
		if (!strncmp(e, "DLBUNDLE_", 9)) continue;
		if (llp_mapped && (e == llp_mapped || !strcmp(e, llp_mapped))) e = llp_native;
		size_t nl = !strncmp(e, "LD_PRELOAD=", 11) ? 11 : !strncmp(e, "LD_AUDIT=", 9) ? 9 : 0;
		if (nl) {
			/* keep the entries that are not the shim's (separated by ':'
			 * or, for LD_PRELOAD, blanks) */
			char *o = buf;
			memcpy(o, e, nl);
			o += nl;
			int any = 0;
			for (const char *q = e + nl; *q;) {
				size_t l = strcspn(q, nl == 11 ? ": \t" : ":");
				if (l && !shim_entry(q, l)) {
					if (any) *o++ = ':';
					memcpy(o, q, l);
					o += l;
					any = 1;
				}
				q += l;
				if (*q) q++;
			}
			*o++ = 0;
			if (!any) continue;
			e = buf;
			buf = o;
		}
		v[k++] = e;
	}
	v[k] = NULL;
	return v;
}

/* exec_native: execve of path itself, without the shim, for ids that
 * cannot read the stage. */
static int exec_native(const char *path, char *const argv[], char *const envp[])
{
	size_t n, bytes = env_native_len(envp, &n);
	char *v[n + 1], buf[bytes];
	debug_log("other-uid", "execve", path, 0);
	return real_execve(path, argv, env_native(envp, v, n, buf));
}

/* script_argv fills v (room for argc + 4 pointers) with what the kernel
 * gives a "#!" script's interpreter: interp, its one optional argument,
 * the script's path as given, then argv[1..argc-1]. execve and
 * posix_spawn of a bundled script both build it. */
static void script_argv(char **v, char *interp, char *arg, const char *path, char *const argv[], int argc)
{
	int k = 0;
	v[k++] = interp;
	if (arg) v[k++] = arg;
	v[k++] = (char *)path;
	for (int i = 1; i < argc; i++) v[k++] = argv[i];
	v[k] = NULL;
}

/* execve: a bundled ELF runs from its staged copy; a bundled "#!" script is
 * started as the kernel would start it, with the interpreter (itself looked
 * up here, so a bundled one runs from the stage) and argv = interpreter,
 * optional argument, the script's path AS GIVEN, argv[1..]: the interpreter
 * then reads the script through the shim, and argv, /proc/self/exe and
 * sys.executable are the native ones. At most 4 nested interpreters (the
 * kernel's limit: ELOOP after). */
static int execve_depth(const char *path, char *const argv[], char *const envp[], int depth)
{
	char sp[DLB_PATH_MAX + 1024];
	int err, script, priv;
	if (!stage_readable()) return exec_native(path, argv, envp);
	const char *t = exec_target("execve", path, sp, sizeof sp, &err, &script, &priv);
	if (!t) return set_errno(err);
	if (priv) return exec_native(path, argv, envp);
	if (script) {
		char line[256], *interp, *arg;
		if (script_line(sp, line, sizeof line, &interp, &arg) == 0) {
			if (depth >= 4) return set_errno(ELOOP);
			int argc = 0;
			while (argv && argv[argc]) argc++;
			char *v[argc + 4];
			script_argv(v, interp, arg, path, argv, argc);
			return execve_depth(interp, v, envp, depth + 1);
		}
		t = path; /* the kernel decides */
	}
	size_t n;
	int mapped = env_for_child(envp, &n), argv0;
	const char *ldso = t == sp ? cross_ldso(sp, &argv0) : NULL;
	if (ldso) {
		int argc = 0;
		while (argv && argv[argc]) argc++;
		if (!mapped) n = env_count(envp);
		char *av[argc + 5], *ev[n + 2], exe[DLB_PATH_MAX + 16];
		cross_argv(av, ldso, argv0, sp, argv, argc);
		debug_log("cross", "execve", ldso, sp);
		return real_execve(ldso, av, cross_env(mapped ? env_mapped(envp, ev, n) : envp, n, ev, exe, sizeof exe, sp));
	}
	if (mapped) {
		char *v[n + 1]; /* on the stack: this runs in vfork children */
		return real_execve(t, argv, env_mapped(envp, v, n));
	}
	return real_execve(t, argv, envp);
}

int execve(const char *path, char *const argv[], char *const envp[]) { return execve_depth(path, argv, envp, 0); }
int execv(const char *path, char *const argv[]) { return execve(path, argv, environ); }

/* execvp/execvpe: glibc's own PATH search calls its internal execve, which we
 * cannot see, so search PATH here as glibc does: try each candidate, go on
 * after ENOENT/ENOTDIR/EACCES (reporting EACCES if nothing else ran), run a
 * file without an ELF or #! header with /bin/sh (ENOEXEC), as glibc does.
 * Candidates the table knows are missing cost no syscall. */
static int exec_search(const char *file, char *const argv[], char *const envp[])
{
	if (!file || !file[0]) return set_errno(ENOENT);
	if (strchr(file, '/')) return execve(file, argv, envp);
	const char *path = getenv("PATH");
	if (!path) path = "/bin:/usr/bin";
	size_t fl = strlen(file);
	int saw_eacces = 0;
	for (const char *p = path;;) {
		const char *e = strchr(p, ':');
		size_t dl = e ? (size_t)(e - p) : strlen(p);
		char cand[DLB_PATH_MAX];
		if (dl + fl + 2 <= sizeof cand) {
			if (dl) { memcpy(cand, p, dl); cand[dl++] = '/'; } /* "" is the cwd */
			memcpy(cand + dl, file, fl + 1);
			execve(cand, argv, envp);
			if (errno == ENOEXEC) {
				int argc = 0;
				while (argv[argc]) argc++;
				char *sh[argc + 3];
				sh[0] = (char *)"/bin/sh";
				sh[1] = cand;
				for (int i = 1; i <= argc; i++) sh[i + 1] = argv[i];
				execve("/bin/sh", sh, envp);
				return -1;
			}
			if (errno == EACCES) saw_eacces = 1;
			else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE && errno != ENODEV && errno != ETIMEDOUT)
				return -1;
		}
		if (!e) break;
		p = e + 1;
	}
	return set_errno(saw_eacces ? EACCES : ENOENT);
}
int execvp(const char *file, char *const argv[]) { return exec_search(file, argv, environ); }
int execvpe(const char *file, char *const argv[], char *const envp[]) { return exec_search(file, argv, envp); }


/* dlinfo(RTLD_DI_ORIGIN): ld.so computed the origin of an object loaded from
 * the stage from its staged name; show the original directory. */
int dlinfo(void *handle, int request, void *arg)
{
	ensure_init();
	if (!real_dlinfo) return -1;
	int rc = real_dlinfo(handle, request, arg);
	if (rc == 0 && request == RTLD_DI_ORIGIN && arg) {
		char *o = arg;
		size_t n = strip_stage(o, strlen(o));
		o[n] = 0;
	}
	return rc;
}


/* dlerror: ld.so's messages name the file it opened, which for a bundled
 * library is the staged copy; show the original. Rewritten in place: the
 * message only gets shorter, and it is this thread's own, formatted on the
 * heap by this very call (glibc's dlerror, asprintf) and freed by its next
 * one; a message glibc could not format is its constant text, which names
 * no file and is left alone. Not a per-thread copy: that would be static
 * TLS, which glibc zeroes in every thread the app creates (8 KiB, two
 * page faults per thread). */
char *dlerror(void)
{
	ensure_init();
	char *e = real_dlerror();
	/* stage_root minus "/root": the stage dir, for STAGE/nolib/NAME, the
	 * audit object's answer for a dlopen that the table says fails: the
	 * native message names NAME alone. */
	size_t sl = stage_root_len - 5;
	if (!e || !stage_root_len || !memmem(e, strlen(e), stage_root, sl)) return e;
	char *o = e; /* o never passes s: the text moves left only */
	for (const char *s = e; *s;) {
		if (!strncmp(s, stage_root, stage_root_len) && s[stage_root_len] == '/') { s += stage_root_len; continue; }
		if (!strncmp(s, stage_root, sl) && !strncmp(s + sl, "/nolib/", 7)) { s += sl + 7; continue; }
		*o++ = *s++;
	}
	*o = 0;
	return e;
}


/* spawn_native: posix_spawn of path itself with the environment the app
 * would pass natively (exec_native's). */
static int spawn_native(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	size_t n, bytes = env_native_len(envp, &n);
	char *v[n + 1], buf[bytes];
	return real_posix_spawn(pid, path, fa, attr, argv, env_native(envp, v, n, buf));
}

/* spawn_staged: posix_spawn of t, the staged copy when staged; under the
 * image's ld.so in a cross stage (cross_ldso). */
static int spawn_staged(pid_t *pid, const char *t, int staged, const posix_spawn_file_actions_t *fa,
			const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	size_t n;
	int mapped = env_for_child(envp, &n), argv0;
	const char *ldso = staged ? cross_ldso(t, &argv0) : NULL;
	if (ldso) {
		int argc = 0;
		while (argv && argv[argc]) argc++;
		if (!mapped) n = env_count(envp);
		char *av[argc + 5], *ev[n + 2], exe[DLB_PATH_MAX + 16];
		cross_argv(av, ldso, argv0, t, argv, argc);
		debug_log("cross", "posix_spawn", ldso, t);
		return real_posix_spawn(pid, ldso, fa, attr, av, cross_env(mapped ? env_mapped(envp, ev, n) : envp, n, ev, exe, sizeof exe, t));
	}
	if (mapped) {
		char *v[n + 1];
		return real_posix_spawn(pid, t, fa, attr, argv, env_mapped(envp, v, n));
	}
	return real_posix_spawn(pid, t, fa, attr, argv, envp);
}

/* spawn_depth: posix_spawn as execve_depth: a bundled ELF from the stage, a
 * bundled "#!" script through its interpreter as the kernel would start it
 * (at most 4 levels). */
static int spawn_depth(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		       const posix_spawnattr_t *attr, char *const argv[], char *const envp[], int depth)
{
	char sp[DLB_PATH_MAX + 1024];
	int err, script, priv;
	const char *t = exec_target("posix_spawn", path, sp, sizeof sp, &err, &script, &priv);
	if (!t) return err;
	if (priv) return spawn_native(pid, path, fa, attr, argv, envp);
	if (script) {
		char line[256], *interp, *arg;
		if (script_line(sp, line, sizeof line, &interp, &arg) == 0) {
			if (depth >= 4) return ELOOP;
			int argc = 0;
			while (argv && argv[argc]) argc++;
			char *v[argc + 4];
			script_argv(v, interp, arg, path, argv, argc);
			return spawn_depth(pid, interp, fa, attr, v, envp, depth + 1);
		}
		t = path; /* the kernel decides */
	}
	return spawn_staged(pid, t, t == sp, fa, attr, argv, envp);
}

int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	if (!stage_readable()) return spawn_native(pid, path, fa, attr, argv, envp);
	return spawn_depth(pid, path, fa, attr, argv, envp, 0);
}

/* posix_spawnp: walk PATH through the table; the first bundled ELF wins, a
 * known-missing candidate is skipped, and the first one the table cannot
 * decide hands the whole search to libc (which then repeats it natively). */
static int spawnp_search(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			 const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	if (!file || !file[0] || strchr(file, '/') || !table)
		return strchr(file ? file : "", '/') ? posix_spawn(pid, file, fa, attr, argv, envp)
						      : real_posix_spawnp(pid, file, fa, attr, argv, envp);
	const char *path = getenv("PATH");
	if (!path) path = "/bin:/usr/bin";
	size_t fl = strlen(file);
	for (const char *p = path;;) {
		const char *e = strchr(p, ':');
		size_t dl = e ? (size_t)(e - p) : strlen(p);
		char cand[DLB_PATH_MAX], sp[DLB_PATH_MAX + 1024];
		if (dl == 0 || p[0] != '/' || dl + fl + 2 > sizeof cand) break; /* "" means cwd: leave it to libc */
		memcpy(cand, p, dl);
		cand[dl] = '/';
		memcpy(cand + dl + 1, file, fl + 1);
		int err, script, priv;
		const char *t = exec_target("posix_spawnp", cand, sp, sizeof sp, &err, &script, &priv);
		if (priv) return spawn_native(pid, cand, fa, attr, argv, envp);
		if (t == sp) return script ? spawn_depth(pid, cand, fa, attr, argv, envp, 0) : spawn_staged(pid, t, 1, fa, attr, argv, envp);
		if (t) break; /* undecided */
		if (!e) break;
		p = e + 1;
	}
	return real_posix_spawnp(pid, file, fa, attr, argv, envp);
}

int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
		 const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	ensure_init();
	size_t n;
	if (!stage_readable()) {
		size_t bytes = env_native_len(envp, &n);
		char *v[n + 1], buf[bytes];
		return real_posix_spawnp(pid, file, fa, attr, argv, env_native(envp, v, n, buf));
	}
	if (env_for_child(envp, &n)) {
		char *v[n + 1];
		return spawnp_search(pid, file, fa, attr, argv, env_mapped(envp, v, n));
	}
	return spawnp_search(pid, file, fa, attr, argv, envp);
}


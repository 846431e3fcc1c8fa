/* intercept.h — the one table of intercepted functions: every libc entry
 * point the preload object defines (and so exports), and nothing else.
 *
 * SHIM_FUNCS(X): the functions we forward to. X(name, return type,
 * parameters); each entry declares real_<name> (shim_state.h), a pointer to
 * the next definition (libc's), resolved once with dlsym(RTLD_NEXT) at
 * start-up (lookup.c: resolve_reals) so that a vfork child never calls into
 * the dynamic linker. The comment above each group names the file that
 * defines the group's entry points.
 *
 * SHIM_OWN(X): entry points answered without a real_ pointer of their own
 * (through another entry point, or a system call).
 *
 * shim_state.h declares every entry of both lists with its prototype, so a
 * definition that does not match its line here does not compile. The object
 * exports these names and nothing else: everything shared between the
 * shim's files is hidden (shim_state.h), report.h's functions included.
 */
#ifndef DLB_INTERCEPT_H
#define DLB_INTERCEPT_H

#define SHIM_FUNCS(X)                                                                   \
	/* statopen.c: stat, access, open, fopen, statfs, fstat of staged fds */        \
	X(open, int, (const char *, int, ...))                                          \
	X(open64, int, (const char *, int, ...))                                        \
	X(openat, int, (int, const char *, int, ...))                                   \
	X(openat64, int, (int, const char *, int, ...))                                 \
	X(__open_2, int, (const char *, int))                                           \
	X(__open64_2, int, (const char *, int))                                         \
	X(__openat_2, int, (int, const char *, int))                                    \
	X(__openat64_2, int, (int, const char *, int))                                  \
	X(fopen, FILE *, (const char *, const char *))                                  \
	X(fopen64, FILE *, (const char *, const char *))                                \
	X(freopen, FILE *, (const char *, const char *, FILE *))                        \
	X(freopen64, FILE *, (const char *, const char *, FILE *))                      \
	X(stat, int, (const char *, struct stat *))                                     \
	X(stat64, int, (const char *, struct stat64 *))                                 \
	X(lstat, int, (const char *, struct stat *))                                    \
	X(lstat64, int, (const char *, struct stat64 *))                                \
	X(fstatat, int, (int, const char *, struct stat *, int))                        \
	X(fstatat64, int, (int, const char *, struct stat64 *, int))                    \
	X(statx, int, (int, const char *, int, unsigned, struct statx *))               \
	X(access, int, (const char *, int))                                             \
	X(faccessat, int, (int, const char *, int, int))                                \
	X(euidaccess, int, (const char *, int))                                         \
	X(eaccess, int, (const char *, int))                                            \
	X(statfs, int, (const char *, struct statfs *))                                 \
	X(statvfs, int, (const char *, struct statvfs *))                               \
	X(fstat, int, (int, struct stat *))                                             \
	X(fstat64, int, (int, struct stat64 *))                                         \
	/* realpath.c: readlink, realpath */                                            \
	X(readlink, ssize_t, (const char *, char *, size_t))                            \
	X(readlinkat, ssize_t, (int, const char *, char *, size_t))                     \
	X(realpath, char *, (const char *, char *))                                     \
	X(canonicalize_file_name, char *, (const char *))                               \
	/* listings.c: opendir, the readdir family, getdents64, glob */                 \
	X(opendir, DIR *, (const char *))                                               \
	X(readdir, struct dirent *, (DIR *))                                            \
	X(readdir64, struct dirent64 *, (DIR *))                                        \
	X(readdir_r, int, (DIR *, struct dirent *, struct dirent **))                   \
	X(readdir64_r, int, (DIR *, struct dirent64 *, struct dirent64 **))             \
	X(telldir, long, (DIR *))                                                       \
	X(seekdir, void, (DIR *, long))                                                 \
	X(rewinddir, void, (DIR *))                                                     \
	X(fdopendir, DIR *, (int))                                                      \
	X(closedir, int, (DIR *))                                                       \
	X(getdents64, ssize_t, (int, void *, size_t))                                   \
	X(fchdir, int, (int))                                                           \
	X(glob, int, (const char *, int, int (*)(const char *, int), glob_t *))         \
	X(glob64, int, (const char *, int, int (*)(const char *, int), glob64_t *))     \
	/* exec.c: the exec family, posix_spawn, ld.so's names of staged objects */     \
	X(execve, int, (const char *, char *const[], char *const[]))                    \
	X(execv, int, (const char *, char *const[]))                                    \
	X(execvp, int, (const char *, char *const[]))                                   \
	X(execvpe, int, (const char *, char *const[], char *const[]))                   \
	X(posix_spawn, int, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
			     const posix_spawnattr_t *, char *const[], char *const[]))          \
	X(posix_spawnp, int, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
			      const posix_spawnattr_t *, char *const[], char *const[]))         \
	X(dlerror, char *, (void))                                                      \
	X(dlinfo, int, (void *, int, void *))                                           \
	/* report.c: a library closed before exit stays in the report */                \
	X(dlclose, int, (void *))                                                       \
	/* writes.c: calls that write (read-your-writes) */                             \
	X(creat, int, (const char *, mode_t))                                           \
	X(creat64, int, (const char *, mode_t))                                         \
	X(rename, int, (const char *, const char *))                                    \
	X(renameat, int, (int, const char *, int, const char *))                        \
	X(renameat2, int, (int, const char *, int, const char *, unsigned))             \
	X(unlink, int, (const char *))                                                  \
	X(unlinkat, int, (int, const char *, int))                                      \
	X(remove, int, (const char *))                                                  \
	X(mkdir, int, (const char *, mode_t))                                           \
	X(mkdirat, int, (int, const char *, mode_t))                                    \
	X(rmdir, int, (const char *))                                                   \
	X(symlink, int, (const char *, const char *))                                   \
	X(symlinkat, int, (const char *, int, const char *))                            \
	X(link, int, (const char *, const char *))                                      \
	X(linkat, int, (int, const char *, int, const char *, int))                     \
	X(truncate, int, (const char *, off_t))                                         \
	X(truncate64, int, (const char *, off64_t))                                     \
	X(utime, int, (const char *, const struct utimbuf *))                           \
	X(utimes, int, (const char *, const struct timeval[2]))                       \
	X(lutimes, int, (const char *, const struct timeval[2]))                      \
	X(futimesat, int, (int, const char *, const struct timeval[2]))                  \
	X(utimensat, int, (int, const char *, const struct timespec[2], int))            \
	X(chmod, int, (const char *, mode_t))                                           \
	X(fchmodat, int, (int, const char *, mode_t, int))                              \
	X(chown, int, (const char *, uid_t, gid_t))                                     \
	X(lchown, int, (const char *, uid_t, gid_t))                                    \
	X(fchownat, int, (int, const char *, uid_t, gid_t, int))                        \
	X(mknod, int, (const char *, mode_t, dev_t))                                    \
	X(mknodat, int, (int, const char *, mode_t, dev_t))                             \
	X(mkfifo, int, (const char *, mode_t))                                          \
	X(mkfifoat, int, (int, const char *, mode_t))                                   \
	/* gettext.c: an app's own message catalogs */                                  \
	X(bindtextdomain, char *, (const char *, const char *))

#define SHIM_OWN(X)                                                                                      \
	/* statopen.c: glibc < 2.33's versioned stat family, through the plain functions */              \
	X(__xstat, int, (int, const char *, struct stat *))                                              \
	X(__xstat64, int, (int, const char *, struct stat64 *))                                          \
	X(__lxstat, int, (int, const char *, struct stat *))                                             \
	X(__lxstat64, int, (int, const char *, struct stat64 *))                                         \
	X(__fxstatat, int, (int, int, const char *, struct stat *, int))                                 \
	X(__fxstatat64, int, (int, int, const char *, struct stat64 *, int))                             \
	X(__fxstat, int, (int, int, struct stat *))                                                      \
	X(__fxstat64, int, (int, int, struct stat64 *))                                                  \
	/* realpath.c: the _FORTIFY_SOURCE variants, through the plain functions */                      \
	X(__realpath_chk, char *, (const char *, char *, size_t))                                        \
	X(__readlink_chk, ssize_t, (const char *, char *, size_t, size_t))                               \
	X(__readlinkat_chk, ssize_t, (int, const char *, char *, size_t, size_t))                        \
	/* listings.c: glibc's scandir, over our readdir */                                              \
	X(scandir, int, (const char *, struct dirent ***, int (*)(const struct dirent *),               \
			 int (*)(const struct dirent **, const struct dirent **)))                       \
	X(scandir64, int, (const char *, struct dirent64 ***, int (*)(const struct dirent64 *),         \
			   int (*)(const struct dirent64 **, const struct dirent64 **)))                 \
	X(scandirat, int, (int, const char *, struct dirent ***, int (*)(const struct dirent *),        \
			   int (*)(const struct dirent **, const struct dirent **)))                     \
	X(scandirat64, int, (int, const char *, struct dirent64 ***, int (*)(const struct dirent64 *),  \
			     int (*)(const struct dirent64 **, const struct dirent64 **)))               \
	/* report.c: the report at _exit; signal dispositions as the app set them (report.c resolves \
	 * its own real sigaction: the wrapper may run in a signal handler, before the constructor) */   \
	X(_exit, void, (int))                                                                            \
	X(_Exit, void, (int))                                                                            \
	X(sigaction, int, (int, const struct sigaction *, struct sigaction *))                           \
	X(signal, sighandler_t, (int, sighandler_t))                                                     \
	X(bsd_signal, sighandler_t, (int, sighandler_t))                                                 \
	X(sysv_signal, sighandler_t, (int, sighandler_t))

#endif

/* Calls whose outcome the tracer predicts at entry (stats, failing opens),
 * their edge cases, and calls it must not predict; traced with and without
 * prediction by TestPredictionMatchesExitStops. argv[1]: a directory holding
 * file, dangling -> nowhere, loop -> loop, dirlink -> ., private/ (0700, with
 * private/f), and an empty gone/. With argv[2] = "drop", the program then
 * drops root (setresuid/setresgid to nobody) and stats private/f again. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void st(const char *p) { struct stat s; stat(p, &s); }
static void lst(const char *p) { struct stat s; lstat(p, &s); }
static void fst(int dirfd, const char *p, int flags) { struct stat s; fstatat(dirfd, p, &s, flags); }
static void stx(const char *p, int flags) { struct statx s; statx(AT_FDCWD, p, flags, STATX_BASIC_STATS, &s); }
static void op(const char *p, int flags) { int fd = open(p, flags, 0644); if (fd >= 0) close(fd); }

int main(int argc, char **argv) {
    if (argc < 2 || chdir(argv[1]) != 0) return 2;
    st("file"); st("missing"); st("file/"); st("file/x"); st("dangling"); st("loop");
    st("dirlink/dirlink/file"); st("./missing/../file"); st("");
    lst("dangling"); lst("loop"); lst("dirlink/"); lst("missing");
    fst(AT_FDCWD, "dangling", AT_SYMLINK_NOFOLLOW); fst(AT_FDCWD, "missing", 0);
    fst(AT_FDCWD, "file", 0x40000000); /* invalid flag: EINVAL */
    int dfd = open(".", O_RDONLY | O_DIRECTORY);
    fst(dfd, "file", 0); fst(dfd, "missing", 0); /* relative to a dirfd: followed to the exit */
    stx("file", 0); stx("missing", AT_SYMLINK_NOFOLLOW); stx("dangling", 0); stx("file/", 0);
    op("missing", O_RDONLY); op("file/x", O_RDONLY); op("file/", O_RDONLY); op("dangling", O_RDONLY);
    op("dangling", O_RDONLY | O_NOFOLLOW); op("loop", O_RDONLY); op("missing", O_RDONLY | O_DIRECTORY);
    op("file", O_RDONLY); op("new", O_WRONLY | O_CREAT); op(".", O_RDONLY | O_TMPFILE);
    /* Names of the caller's own fds: the tracer has no fd 200. */
    if (dup2(0, 200) == 200) { st("/dev/fd/200"); st("/proc/self/fd/200"); op("/dev/fd/200", O_RDONLY); }
    char rel[64]; snprintf(rel, sizeof rel, "private/%s", "f");
    st(rel);
    /* The working directory removed: relative lookups still go through it. */
    if (chdir("gone") == 0 && rmdir("../gone") == 0) { st("x"); st("."); op("x", O_RDONLY); }
    if (chdir(argv[1]) != 0) return 3;
    if (argc > 2 && strcmp(argv[2], "drop") == 0) {
        if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) return 4;
        st("private/f"); st("private/missing"); op("private/missing", O_RDONLY);
    }
    return 0;
}

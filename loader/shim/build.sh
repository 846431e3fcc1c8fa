#!/bin/sh
# Builds the shim objects next to this script (run by `go generate ./loader/`).
# -Wl,--no-as-needed: Debian's gcc defaults to --as-needed.
set -eu
cd "$(dirname "$0")"
CC=${CC:-gcc}
# -fno-delete-null-pointer-checks: glibc declares path arguments nonnull, but apps
# do pass NULL (statx with AT_EMPTY_PATH); the checks must stay.
CFLAGS="-O2 -fPIC -Wall -Wextra -Werror -fno-strict-aliasing -fno-delete-null-pointer-checks -Wno-nonnull-compare"
# audit.so: freestanding, no DT_NEEDED (see audit.c).
$CC $CFLAGS -shared -nostdlib -ffreestanding -fno-stack-protector -fno-builtin \
  -Wl,-z,now -Wl,--hash-style=both -o audit.so audit.c
# preload.so: libc interposition; no symbol versions, so that versioned
# references such as stat64@GLIBC_2.33 bind to our unversioned definitions.
# dlsym and dlerror are linked against a stub libdl.so.2 that defines them at
# GLIBC_2.2.5: the object then needs dlsym@GLIBC_2.2.5 from libdl.so.2, which
# glibc from 2.17 (libdl) to today (libc, compat) provides; linked against
# the build host's libc it would need dlsym@GLIBC_2.34 and not load on older
# systems (RHEL 8: 2.28).
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
printf 'GLIBC_2.2.5 { global: dlsym; dlerror; local: *; };\n' > "$stub/libdl.map"
printf 'void *dlsym(void *h, const char *s) { (void)h; (void)s; return 0; }\nchar *dlerror(void) { return 0; }\n' > "$stub/libdl.c"
$CC -shared -fPIC -nostdlib -Wl,-soname,libdl.so.2 -Wl,--version-script="$stub/libdl.map" \
  -o "$stub/libdl.so.2" "$stub/libdl.c"
$CC $CFLAGS -shared -fvisibility=default -Wl,--no-as-needed -Wl,-z,now \
  -o preload.so preload.c report.c "$stub/libdl.so.2"
strip --strip-unneeded audit.so preload.so
# The digest of the sources, checked by TestShimObjectsUpToDate.
cat build.sh audit.c preload.c report.c report.h reportfmt.h table.h rawsys.h | sha256sum | cut -d' ' -f1 > sources.sha256

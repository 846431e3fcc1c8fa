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
$CC $CFLAGS -shared -fvisibility=default -Wl,--no-as-needed -Wl,-z,now \
  -o preload.so preload.c report.c -ldl
strip --strip-unneeded audit.so preload.so
# The digest of the sources, checked by TestShimObjectsUpToDate.
cat build.sh audit.c preload.c report.c report.h table.h rawsys.h | sha256sum | cut -d' ' -f1 > sources.sha256

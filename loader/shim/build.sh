#!/bin/sh
# Builds the shim objects next to this script (run by `go generate ./loader/`).
#
#   sh build.sh               the committed objects: audit.so, preload.so, preload-2.34.so
#   sh build.sh --sanitize D  the same three, instrumented, into directory D (tests only,
#                             never committed): preload objects with ASan+UBSan (they need
#                             libasan.so preloaded first), audit.so with UBSan in trap mode
#                             (it links against nothing, so no sanitizer runtime)
#
# -Wl,--no-as-needed: Debian's gcc defaults to --as-needed.
set -eu
cd "$(dirname "$0")"
CC=${CC:-gcc}
out=.
san_audit=""
san_preload=""
strip=1
if [ "${1:-}" = "--sanitize" ]; then
	out=$2
	strip=0
	san_audit="-fsanitize=undefined -fsanitize-undefined-trap-on-error -g"
	san_preload="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
fi
# -fno-delete-null-pointer-checks: glibc declares path arguments nonnull, but apps
# do pass NULL (statx with AT_EMPTY_PATH); the checks must stay.
CFLAGS="-O2 -fPIC -Wall -Wextra -Werror -fno-strict-aliasing -fno-delete-null-pointer-checks -Wno-nonnull-compare"
# audit.so: freestanding, no DT_NEEDED (see audit.c).
$CC $CFLAGS $san_audit -shared -nostdlib -ffreestanding -fno-stack-protector -fno-builtin \
  -Wl,-z,now -Wl,--hash-style=both -o "$out/audit.so" audit.c
# The preload objects: libc interposition; no symbol versions, so that
# versioned references such as stat64@GLIBC_2.33 bind to our unversioned
# definitions. Two builds, chosen by dlbundle exec for the node's glibc
# (loader/shim.go):
#
# preload.so, for glibc 2.17 and later: dlsym and dlerror are linked against a
# stub libdl.so.2 that defines them at GLIBC_2.2.5, so the object needs
# dlsym@GLIBC_2.2.5 from libdl.so.2, which glibc from 2.17 (libdl) to today
# (libc, compat) provides; linked against the build host's libc it would need
# dlsym@GLIBC_2.34 and not load on older systems (RHEL 8: 2.28). Its cost: the
# DT_NEEDED makes every process load libdl.so.2, an object the app did not ask
# for (open + mmap, and one more entry in dl_iterate_phdr).
#
# preload-2.34.so, for glibc 2.34 and later, where dlsym is in libc: linked
# against libc.so.6 only (dlsym@GLIBC_2.34), so the shim brings no libdl.
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
printf 'GLIBC_2.2.5 { global: dlsym; dlerror; local: *; };\n' > "$stub/libdl.map"
printf 'void *dlsym(void *h, const char *s) { (void)h; (void)s; return 0; }\nchar *dlerror(void) { return 0; }\n' > "$stub/libdl.c"
$CC -shared -fPIC -nostdlib -Wl,-soname,libdl.so.2 -Wl,--version-script="$stub/libdl.map" \
  -o "$stub/libdl.so.2" "$stub/libdl.c"
$CC $CFLAGS $san_preload -shared -fvisibility=default -Wl,--no-as-needed -Wl,-z,now \
  -o "$out/preload.so" preload.c report.c "$stub/libdl.so.2"
$CC $CFLAGS $san_preload -shared -fvisibility=default -Wl,--no-as-needed -Wl,-z,now \
  -o "$out/preload-2.34.so" preload.c report.c
if [ "$strip" = 1 ]; then
	strip --strip-unneeded audit.so preload.so preload-2.34.so
	# The digest of the sources, checked by TestShimObjectsUpToDate.
	cat build.sh audit.c preload.c report.c report.h reportfmt.h table.h rawsys.h | sha256sum | cut -d' ' -f1 > sources.sha256
fi

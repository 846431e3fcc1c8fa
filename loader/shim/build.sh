#!/bin/sh
# Builds the shim objects next to this script (run by `go generate ./loader/`).
#
#   sh build.sh               the committed objects, for both architectures:
#                             amd64/ and arm64/{audit.so,preload.so,preload-2.34.so}
#                             (arm64 with Debian's cross compiler,
#                             gcc-aarch64-linux-gnu: make deps installs it)
#   sh build.sh --sanitize D  the same three for this machine's architecture,
#                             instrumented, into directory D (tests only, never
#                             committed): preload objects with ASan+UBSan (they
#                             need libasan.so preloaded first), audit.so with
#                             UBSan in trap mode (it links against nothing, so
#                             no sanitizer runtime)
#
# CC_AMD64 and CC_ARM64 name the compilers (default gcc on an x86-64 host,
# aarch64-linux-gnu-gcc; on an arm64 host gcc and x86_64-linux-gnu-gcc).
# -Wl,--no-as-needed: Debian's gcc defaults to --as-needed.
set -eu
cd "$(dirname "$0")"
# The preload object's files (docs/loader.md, "Shim sources"); the headers
# they share: shim_state.h, intercept.h (the one table of entry points),
# table.h, report.h, reportfmt.h; audit.c alone includes ldcache.h.
preload_srcs="lookup.c statopen.c realpath.c listings.c exec.c writes.c gettext.c report.c"
# -fno-delete-null-pointer-checks: glibc declares path arguments nonnull, but apps
# do pass NULL (statx with AT_EMPTY_PATH); the checks must stay.
CFLAGS="-O2 -fPIC -Wall -Wextra -Werror -fno-strict-aliasing -fno-delete-null-pointer-checks -Wno-nonnull-compare"
# Every page of .bss a process first touches costs it a page fault (~3.5 us
# on the VM measured). Each variable in a section of its own, placed by
# alignment: the scalars end up together on one page, not each beside a
# different large buffer (audit.so: 5 pages touched per process, not 8).
#
# -z noseparate-code: one read+execute segment for headers, code and
# read-only data, not three (R, R+X, R): ld.so makes two mappings fewer per
# object, and their first touches fault together (40-60 us less per process
# for the two objects on that VM). The cost: the shim's few KB of read-only
# data are executable too, as all code was before binutils 2.31 made
# separate-code the default.
PACK="-fdata-sections -Wl,--sort-section=alignment -Wl,-z,noseparate-code"
# The preload's calls to its own exported functions (the entry points it
# calls itself: stat, opendir, readdir..., and report.h's) bind inside the
# object, as glibc's own calls to them do: ~30 fewer symbol lookups when
# ld.so relocates it in every process, and no PLT hop per call.
OWN="-Wl,-Bsymbolic-functions"
# build CC BASE OUT: the three objects for one architecture (BASE: glibc's
# first symbol version there), with $san_audit and $san_preload.
stub=""
trap 'rm -rf "$stub"' EXIT
build() {
	CC=$1 base=$2 out=$3
	# audit.so: freestanding, no DT_NEEDED (see audit.c).
	"$CC" $CFLAGS $PACK $san_audit -shared -nostdlib -ffreestanding -fno-stack-protector -fno-builtin \
	  -Wl,-z,now -Wl,--hash-style=both -o "$out/audit.so" audit.c
	# The preload objects: libc interposition; no symbol versions, so that
	# versioned references such as stat64@GLIBC_2.33 bind to our unversioned
	# definitions. Two builds, chosen by dlbundle exec for the node's glibc
	# (loader/stagefmt/shim.go):
	#
	# preload.so, for glibc 2.17 and later: dlsym and dlerror are linked
	# against a stub libdl.so.2 that defines them at the architecture's base
	# version (GLIBC_2.2.5 on x86_64, GLIBC_2.17 on aarch64, whose glibc
	# starts there), so the object needs dlsym@<base> from libdl.so.2, which
	# glibc from 2.17 (libdl) to today (libc, compat) provides; linked against
	# the build host's libc it would need dlsym@GLIBC_2.34 and not load on
	# older systems (RHEL 8: 2.28). Its cost: the DT_NEEDED makes every process
	# load libdl.so.2, an object the app did not ask for (open + mmap, and one
	# more entry in dl_iterate_phdr).
	#
	# preload-2.34.so, for glibc 2.34 and later, where dlsym is in libc: linked
	# against libc.so.6 only (dlsym@GLIBC_2.34), so the shim brings no libdl.
	stub=$(mktemp -d)
	printf '%s { global: dlsym; dlerror; local: *; };\n' "$base" > "$stub/libdl.map"
	printf 'void *dlsym(void *h, const char *s) { (void)h; (void)s; return 0; }\nchar *dlerror(void) { return 0; }\n' > "$stub/libdl.c"
	"$CC" -shared -fPIC -nostdlib -Wl,-soname,libdl.so.2 -Wl,--version-script="$stub/libdl.map" \
	  -o "$stub/libdl.so.2" "$stub/libdl.c"
	"$CC" $CFLAGS $PACK $OWN $san_preload -shared -fvisibility=default -Wl,--no-as-needed -Wl,-z,now \
	  -o "$out/preload.so" $preload_srcs "$stub/libdl.so.2"
	"$CC" $CFLAGS $PACK $OWN $san_preload -shared -fvisibility=default -Wl,--no-as-needed -Wl,-z,now \
	  -o "$out/preload-2.34.so" $preload_srcs
	rm -rf "$stub"
}

if [ "${1:-}" = "--sanitize" ]; then
	san_audit="-fsanitize=undefined -fsanitize-undefined-trap-on-error -g"
	san_preload="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
	case $(uname -m) in
	x86_64) build gcc GLIBC_2.2.5 "$2" ;;
	aarch64) build gcc GLIBC_2.17 "$2" ;;
	*) echo "build.sh: no shim for $(uname -m)" >&2; exit 1 ;;
	esac
	exit 0
fi
san_audit=""
san_preload=""
if [ "$(uname -m)" = aarch64 ]; then
	cc_amd64=${CC_AMD64:-x86_64-linux-gnu-gcc} cc_arm64=${CC_ARM64:-gcc}
else
	cc_amd64=${CC_AMD64:-gcc} cc_arm64=${CC_ARM64:-aarch64-linux-gnu-gcc}
fi
for cc in "$cc_amd64" "$cc_arm64"; do
	command -v "$cc" >/dev/null || {
		echo "build.sh: $cc not found: install Debian's gcc-aarch64-linux-gnu (make deps) or gcc-x86-64-linux-gnu on arm64" >&2
		exit 1
	}
done
mkdir -p amd64 arm64
build "$cc_amd64" GLIBC_2.2.5 amd64
build "$cc_arm64" GLIBC_2.17 arm64
# The names of SHIM_FUNCS in the table's order, one per line: the stage
# records where each lies in the libc it serves (loader/stagefmt/reals.go),
# in this order, which the preload reads back.
for d in amd64 arm64; do
	printf '#include "intercept.h"\n#define N(name, ret, args) DLB_NAME name\nSHIM_FUNCS(N)\n' |
	  "$cc_amd64" -E -P -x c -I. - | tr ' ' '\n' | grep -x -A1 DLB_NAME | grep -v -x -e DLB_NAME -e -- > "$d/realnames"
done
for cc_dir in "$cc_amd64 amd64" "$cc_arm64 arm64"; do
	set -- $cc_dir
	# gcc -> strip, aarch64-linux-gnu-gcc -> aarch64-linux-gnu-strip
	"${1%gcc}strip" --strip-unneeded "$2/audit.so" "$2/preload.so" "$2/preload-2.34.so"
done
# The digest of the sources, checked by TestShimObjectsUpToDate.
cat build.sh audit.c $preload_srcs shim_state.h intercept.h report.h reportfmt.h table.h ldcache.h rawsys.h | sha256sum | cut -d' ' -f1 > sources.sha256

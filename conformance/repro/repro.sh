#!/bin/sh
# Minimal reproductions of the divergences docs/conformance.md lists, each
# printed natively, then under dlbundle exec (a pilot of the same command,
# an image, a fresh stage). Run as root from the repository:
#
#   sh conformance/repro/repro.sh [bin/dlbundle]
#
# Lines that differ between "native" and "exec" are the divergence.
set -eu
D=$(realpath "${1:-bin/dlbundle}")
src=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d /tmp/dlbundle-repro-XXXXXX)
trap 'rm -rf "$W"' EXIT
chmod 755 "$W"
cd "$W"
mkdir app
gcc -Wall -o app/realpath "$src/realpath.c"
gcc -Wall -o app/access "$src/access.c"

image() { # image NAME CMD...: pilot, then build with $W (below /tmp: left out by default) included
	name=$1; shift
	"$D" trace -q -o "$name.trace" -- "$@" >/dev/null
	"$D" build -o "$name.dlimg" ${INCLUDE-"--include=$W"} "$name.trace" >/dev/null
	chmod 644 "$name.dlimg"
}

echo "== 1. realpath(3) of a path through a symlink the image does not hold"
image rp ./app/realpath /proc/self/exe
echo "-- native"; ./app/realpath /proc/self/exe /proc/self/cwd /usr/share/doc/bash/copyright
echo "-- exec";   "$D" exec --stage-dir "$W/stage" rp.dlimg -- ./app/realpath /proc/self/exe /proc/self/cwd /usr/share/doc/bash/copyright

echo "== 2. Tcl's file normalize through a symlink outside the image (item 1)"
mkdir -p t/d && ln -s d t/l && touch t/d/f && echo 'puts [file normalize t/l/f]' > n.tcl
INCLUDE= image tcl /usr/bin/tclsh8.6 n.tcl
echo "-- native"; /usr/bin/tclsh8.6 n.tcl
echo "-- exec";   "$D" exec --stage-dir "$W/stage" tcl.dlimg -- /usr/bin/tclsh8.6 n.tcl

echo "== 3. permissions: a bundled file under a 0700 directory of root's, and a mode-000 file, as uid 1001"
mkdir app/closed && echo inner > app/closed/inner && echo secret > app/noperm
chmod 700 app/closed && chmod 000 app/noperm
image acc ./app/access app/closed/inner app/noperm
mkdir stage1001 && chown 1001:1001 stage1001 && chmod 700 stage1001
echo "-- native"; setpriv --reuid 1001 --regid 1001 --clear-groups ./app/access app/closed/inner app/noperm
echo "-- exec";   setpriv --reuid 1001 --regid 1001 --clear-groups "$D" exec --stage-dir "$W/stage1001" acc.dlimg -- ./app/access app/closed/inner app/noperm

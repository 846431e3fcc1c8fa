#!/bin/sh
# run-demo.sh DLBUNDLE — the whole cycle on two bundled examples (the C demo
# app of make-fixture.sh, and Debian's python3 importing a stdlib set):
# trace, build, exec; then native vs exec: file-system operations on the
# app's own tree (counted with strace) and wall time of a warm start.
set -eu
dlbundle=$(realpath "${1:?usage: run-demo.sh path/to/dlbundle}")
here=$(dirname "$(realpath "$0")")
runs=${DEMO_RUNS:-20}
work=$(mktemp -d "${TMPDIR:-/tmp}/dlbundle-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
stage="$work/stage"
# A clean, fixed environment: what the demo measures must not depend on the
# caller's shell (pyenv shims, PYTHONPATH, .pth files reading extra files).
run() { env -i PATH=/usr/bin:/bin HOME="$work" LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 "$@"; }

# ops LOG TREE: file-system system calls whose path (or fd's path) is in TREE.
ops() { grep -cE "(\"|<)$2(/|\"|>)" "$1" || true; }

# wall CMD...: mean wall time of a warm start, in ms.
wall() {
	run "$@" >/dev/null 2>&1 # warm caches
	t0=$(date +%s%N)
	i=0
	while [ "$i" -lt "$runs" ]; do run "$@" >/dev/null; i=$((i + 1)); done
	t1=$(date +%s%N)
	echo $(((t1 - t0) / runs / 1000))
}

# demo NAME TREE CMD...: trace, build, exec and compare.
demo() {
	name=$1 tree=$2
	shift 2
	d="$work/$name"
	mkdir -p "$d"
	echo "== $name: $*"
	(cd "$d" && run "$dlbundle" trace -- "$@" >/dev/null)
	(cd "$d" && run "$dlbundle" build -o app.dlimg >/dev/null)
	exec_cmd="$dlbundle exec --stage-dir $stage $d/app.dlimg --"
	native_out=$(run "$@")
	exec_out=$(run $exec_cmd "$@") # first exec on the node: stages
	if [ "$native_out" != "$exec_out" ]; then
		echo "output differs under exec:" >&2
		echo "native: $native_out" >&2
		echo "exec:   $exec_out" >&2
		exit 1
	fi
	trace="strace -f -qq -y -e trace=%file,getdents64"
	run $trace -o "$d/native.strace" "$@" >/dev/null
	run $trace -o "$d/exec.strace" $exec_cmd "$@" >/dev/null
	native_ops=$(ops "$d/native.strace" "$tree")
	exec_ops=$(ops "$d/exec.strace" "$tree")
	native_ms=$(wall "$@")
	exec_ms=$(wall $exec_cmd "$@")
	printf '   output: %s\n' "$(echo "$exec_out" | head -1)"
	printf '   image:  %s bytes\n' "$(stat -c %s "$d/app.dlimg")"
	printf '   %-34s %10s %10s\n' "" native exec
	printf '   %-34s %10s %10s\n' "file-system ops on $tree" "$native_ops" "$exec_ops"
	printf '   %-34s %10s %10s\n' "warm start, mean of $runs (us)" "$native_ms" "$exec_ms"
	if [ "$exec_ops" != 0 ]; then
		echo "   operations that still reached $tree under exec:"
		grep -E "(\"|<)$tree(/|\"|>)" "$d/exec.strace" | head -20 | sed 's/^/     /'
	fi
}

"$here/make-fixture.sh" "$work/app" 40
demo c-app "$work/app" "$work/app/bin/demo-app"
demo python-stdlib /usr/lib/python3.11 /usr/bin/python3 -c \
	'import json, decimal, argparse, email.parser, http.client, xml.etree.ElementTree, logging, sqlite3, asyncio; print("imported")'

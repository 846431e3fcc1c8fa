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

# ops LOG TREE: system calls that look up a path in TREE (strace -y lines:
# a path argument in TREE, or a directory listing of an fd open on one).
# fstat of an open fd is not a lookup (its open is counted).
ops_re() { echo "\"$1(/[^\"]*)?\"|getdents64\([0-9]+<$1(/[^>]*)?>"; }
# In execve lines only the program path counts (argv is not a lookup).
ops_lines() {
	grep -vE '^[0-9]+ +execve\(' "$1" | grep -E "$(ops_re "$2")"
	grep -E "^[0-9]+ +execve\(\"$2/" "$1"
}
ops() { ops_lines "$1" "$2" | wc -l; }

# wall CMD...: mean wall time of a warm start, in ms.
wall() {
	run "$@" >/dev/null 2>&1 # warm caches
	t0=$(date +%s%N)
	i=0
	while [ "$i" -lt "$runs" ]; do run "$@" >/dev/null; i=$((i + 1)); done
	t1=$(date +%s%N)
	echo "$(((t1 - t0) / runs / 1000000)).$(((t1 - t0) / runs / 100000 % 10))"
}

# demo NAME TREE CMD...: trace, build, exec and compare. TREE is where the
# app's own files are; the demo builds the C app under TMPDIR, which build
# leaves out by default, hence --include.
demo() {
	name=$1 tree=$2
	shift 2
	include=""
	case $tree in "$work"/*) include="--include $tree" ;; esac
	d="$work/$name"
	mkdir -p "$d"
	echo "== $name: $*"
	(cd "$d" && run "$dlbundle" trace -q -- "$@" >/dev/null)
	(cd "$d" && run "$dlbundle" build -o app.dlimg $include >/dev/null)
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
	printf '   tree:   %s\n' "$tree"
	printf '   %-34s %10s %10s\n' "" native exec
	printf '   %-34s %10s %10s\n' "file-system lookups in the tree" "$native_ops" "$exec_ops"
	printf '   %-34s %10s %10s\n' "warm start, mean of $runs (ms)" "$native_ms" "$exec_ms"
	if [ "$exec_ops" != 0 ]; then
		echo "   operations that still reached $tree under exec:"
		ops_lines "$d/exec.strace" "$tree" | cut -c1-160 | head -10 | sed 's/^/     /'
	fi
}

"$here/make-fixture.sh" "$work/app" 40
demo c-app "$work/app" "$work/app/bin/demo-app"
demo python-stdlib /usr/lib/python3.11 /usr/bin/python3 -c \
	'import json, decimal, argparse, email.parser, http.client, xml.etree.ElementTree, logging, sqlite3, asyncio; print("imported")'

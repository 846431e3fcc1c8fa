#!/bin/bash
# Server operations per process on a real networked file system: GlusterFS
# (a glusterd, a brick process and the FUSE client over TCP on this machine,
# attribute caching on by default), counted on the server by
# `gluster volume profile VOL info incremental`, for python with numpy from
# a venv on the volume, started N times each way:
#
#   native          the venv's python, natively
#   env             launcher-less: the variables of `dlbundle env IMG`, the
#                   original command path (the kernel's execve reads it)
#   env -- CMD      the variables and the staged copy of the command that
#                   `dlbundle env IMG -- CMD` prints (set -- <staged> args)
#   exec            `dlbundle exec IMG -- CMD` (outside a job: one stat of the image)
#   exec (step)     the same in a job step (SLURM_JOB_ID and SLURM_STEP_ID set,
#                   as srun sets them): the stage found by the job's alias, no stat
#
# The image is built from a pilot of the same command (trace, build); it lies
# on the volume, as on a cluster, and is staged once before the counts.
# Not part of `make test`: needs root, glusterfs-server and glusterfs-client
# (apt-get install glusterfs-server glusterfs-client), FUSE, ~1 minute.
#
#   bench/gluster/ops.sh [DLBUNDLE] [N]      (default bin/dlbundle, N=20)
#
# It starts glusterd only if none runs (and then stops it), creates a volume
# of its own, and removes everything it made on exit.
set -euo pipefail
DL=$(realpath "${1:-bin/dlbundle}")
N=${2:-20}
[ "$(id -u)" = 0 ] || { echo "ops.sh: needs root (glusterd, mount)" >&2; exit 2; }
command -v gluster >/dev/null || { echo "ops.sh: no gluster: apt-get install glusterfs-server glusterfs-client" >&2; exit 2; }
ADDR=${GLUSTER_ADDR:-$(hostname -I | awk '{print $1}')} # a brick refuses 127.0.0.1
VOL=dlb$$
WORK=$(mktemp -d /tmp/dlbundle-gluster.XXXXXX)
# Not under /tmp: trace leaves temporary directories out of an image.
MNT=/mnt/dlbundle-gluster-$$
BRICK=/srv/dlbundle-brick-$$
GLUSTERD_PID=""
cleanup() {
	set +e
	mountpoint -q "$MNT" && umount "$MNT"
	rmdir "$MNT" 2>/dev/null
	if gluster --mode=script volume info "$VOL" >/dev/null 2>&1; then
		gluster --mode=script volume stop "$VOL" force >/dev/null
		gluster --mode=script volume delete "$VOL" >/dev/null
	fi
	[ -n "$GLUSTERD_PID" ] && kill "$GLUSTERD_PID"
	rm -rf "$BRICK" "$WORK"
}
trap cleanup EXIT
if ! gluster --mode=script volume list >/dev/null 2>&1; then
	glusterd -p "$WORK/glusterd.pid"
	for _ in $(seq 50); do [ -s "$WORK/glusterd.pid" ] && gluster --mode=script volume list >/dev/null 2>&1 && break; sleep 0.2; done
	GLUSTERD_PID=$(cat "$WORK/glusterd.pid")
fi
mkdir -p "$BRICK" "$MNT"
gluster --mode=script volume create "$VOL" "$ADDR:$BRICK" force >/dev/null
gluster --mode=script volume start "$VOL" >/dev/null
mount -t glusterfs "$ADDR:/$VOL" "$MNT"
gluster --mode=script volume profile "$VOL" start >/dev/null

# The app: a venv on the volume, numpy copied into it (Debian's python3-numpy).
python3 -m venv --without-pip "$MNT/venv"
cp -a /usr/lib/python3/dist-packages/numpy "$MNT/venv/lib/python3.11/site-packages/"
E=(env -i PATH=/usr/bin:/bin HOME="$WORK" LC_ALL=C)
CMD=("$MNT/venv/bin/python" -c 'import numpy; print("numpy", numpy.__version__)')
"${E[@]}" "$DL" trace -q -o "$WORK/app.trace" -- "${CMD[@]}" >/dev/null
"${E[@]}" "$DL" build -o "$MNT/app.dlimg" "$WORK/app.trace" >/dev/null
IMG=$MNT/app.dlimg
STAGE=$WORK/stage
"${E[@]}" "$DL" stage -q --stage-dir "$STAGE" "$IMG"

# calls N: the file operations the brick served since the last call, per
# process of N: "TOTAL FOP=n FOP=n ..." (the lines "%-latency ... No. of
# calls Fop" of the interval).
calls() {
	gluster --mode=script volume profile "$VOL" info incremental |
		awk -v n="$1" '/Interval .* Stats:/ {on=1}
			on && $NF ~ /^[A-Z]+$/ && $(NF-1) ~ /^[0-9]+$/ {c[$NF] += $(NF-1); t += $(NF-1)}
			END {printf "%.1f", t/n; for (f in c) printf " %s=%.1f", f, c[f]/n; print ""}'
}
# ops NAME SCRIPT: SCRIPT run N times in a shell with E's environment; the
# brick's operations per process.
ops() {
	local name=$1 script=$2
	# One untimed run: the client's caches as after the run before.
	"${E[@]}" DL="$DL" IMG="$IMG" STAGE="$STAGE" N=1 bash -c "$script" >/dev/null
	calls 1 >/dev/null
	local out
	out=$("${E[@]}" DL="$DL" IMG="$IMG" STAGE="$STAGE" N="$N" bash -c "$script")
	local got; got=$(calls "$N")
	[ "$(grep -c '^numpy ' <<<"$out")" = "$N" ] || { echo "ops.sh: $name: the app did not print its line $N times:" >&2; echo "$out" >&2; exit 1; }
	printf '%-32s %7s per process   (%s)\n' "$name" "${got%% *}" "${got#* }"
}
Q=$(printf '%q ' "${CMD[@]}")
echo "GlusterFS $(gluster --version | head -1 | awk '{print $2}'), volume $VOL at $ADDR, $N processes each; load $(cut -d' ' -f1-3 /proc/loadavg)"
ops "native" "for i in \$(seq \$N); do $Q; done"
ops "launcher-less (dlbundle env)" "eval \"\$(\$DL env --stage-dir \$STAGE \$IMG)\"; for i in \$(seq \$N); do $Q; done"
ops "launcher-less, staged command" "eval \"\$(\$DL env --stage-dir \$STAGE \$IMG -- $Q)\"; for i in \$(seq \$N); do \"\$@\"; done"
ops "dlbundle exec" "for i in \$(seq \$N); do \$DL exec --stage-dir \$STAGE \$IMG -- $Q; done"
ops "dlbundle exec, in a job step" "export SLURM_JOB_ID=4242 SLURM_STEP_ID=0; for i in \$(seq \$N); do \$DL exec --stage-dir \$STAGE \$IMG -- $Q; done"
echo "(the one dlbundle env per launcher-less row, like a launcher plugin's once per node and step, counts in its row)"

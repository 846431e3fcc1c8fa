#!/bin/bash
# Open MPI's mpirun without dlbundle exec on every rank: the ranks get the
# loader shim's variables with -x, and start from the stage with no
# launcher between orted and the app.
#
#   sbatch -N 8 --ntasks-per-node=32 openmpi-env.sh   (or under PBS, LSF...)
#
# 1. Stage on every node of the allocation (one process per node; NP,
#    if set, is the app's rank count only).
# 2. `dlbundle env` on this node prints the variables; the stage's path is
#    the same on every node (stage dir + the image's digest), as long as the
#    stage dir is: no %n or %h pattern, and not a squatted default (a node
#    whose /dev/shm/dlbundle-<uid> another user took stages elsewhere: give
#    DLBUNDLE_STAGE_DIR a directory of your own).
# 3. mpirun -x NAME=VALUE for each of them. This script's own shell does not
#    take them (mpirun itself runs natively).
set -euo pipefail
DLBUNDLE=${DLBUNDLE:-/shared/$USER/bin/dlbundle}
IMAGE=${IMAGE:-/shared/$USER/myapp.dlimg}
APP=${APP:-./myapp input.nml}

args=()
if [ -n "${DLBUNDLE_STAGE_DIR:-}" ]; then args+=(-x DLBUNDLE_STAGE_DIR); fi

# Staging is one process per node whatever NP is: the map decides the count
# (an -np here would ask for more processes than ppr:1:node allows).
mpirun "${args[@]}" --map-by ppr:1:node "$DLBUNDLE" stage -q "$IMAGE"
if [ -n "${NP:-}" ]; then args+=(-np "$NP"); fi
vars=$(mktemp)
trap 'rm -f "$vars"' EXIT
"$DLBUNDLE" env --format=env0 "$IMAGE" > "$vars"
while IFS= read -r -d '' kv; do
	case $kv in *=*) args+=(-x "$kv") ;; esac
done < "$vars"
mpirun "${args[@]}" $APP

#!/bin/bash
# Open MPI's mpirun: every rank starts through dlbundle exec. mpirun gives all
# ranks of one launch the same id (PMIX_NAMESPACE), so the first rank on a
# node stages the image and the others find the stage without touching it.
#
# Inside a batch allocation (sbatch, PBS, LSF) mpirun takes the nodes and
# slots from the allocation:      sbatch -N 8 --ntasks-per-node=32 openmpi.sh
# Without one, name them:         NP=256 HOSTFILE=hosts ./openmpi.sh
set -euo pipefail
DLBUNDLE=${DLBUNDLE:-/shared/$USER/bin/dlbundle}
IMAGE=${IMAGE:-/shared/$USER/myapp.dlimg}
APP=${APP:-python3 -m mypkg.solver --steps 1000}

args=()
if [ -n "${NP:-}" ]; then args+=(-np "$NP"); fi
if [ -n "${HOSTFILE:-}" ]; then args+=(--hostfile "$HOSTFILE"); fi
# Ranks that mpirun starts over ssh (a hostfile) see only the variables that
# -x names; under a batch system they inherit the job's environment anyway.
if [ -n "${DLBUNDLE_STAGE_DIR:-}" ]; then args+=(-x DLBUNDLE_STAGE_DIR); fi

# --fallback keeps the job running (natively, slowly, with a warning) if a
# node cannot stage, e.g. /dev/shm is full. mpirun's exit status is that of
# the first rank that failed, and so is this script's.
mpirun "${args[@]}" "$DLBUNDLE" exec --fallback "$IMAGE" -- $APP

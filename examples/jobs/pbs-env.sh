#!/bin/bash
# PBS Pro / Torque (and PALS's mpiexec): no plugin, no wrapper per rank. The
# ranks inherit the job script's environment, so the script stages once per
# node and then exports the loader shim's variables for the mpiexec line
# only (in a subshell: the rest of the script runs natively).
#
# Not tested under PBS (there is none on the test machine): see pbs.sh.
#PBS -l select=16:ncpus=48:mpiprocs=48
#PBS -l walltime=00:30:00
set -euo pipefail
cd "$PBS_O_WORKDIR"
DLBUNDLE=${DLBUNDLE:-/home/$USER/bin/dlbundle}
IMAGE=${IMAGE:-/home/$USER/myapp.dlimg}
APP=${APP:-./myapp}
export DLBUNDLE_STAGE_DIR=${DLBUNDLE_STAGE_DIR:-/local/scratch/dlbundle-$UID}

# One process per node stages (PALS: --ppn 1; Open MPI: --map-by ppr:1:node).
mpiexec --ppn 1 -n "$(sort -u "$PBS_NODEFILE" | wc -l)" "$DLBUNDLE" stage -q "$IMAGE"
(
	eval "$("$DLBUNDLE" env "$IMAGE")"
	exec mpiexec $APP
)

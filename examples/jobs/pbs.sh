#!/bin/bash
# PBS Pro / Torque job script. Where /dev/shm is small, stage to node-local
# disk instead: --stage-dir (or DLBUNDLE_STAGE_DIR) must be a directory that
# only you can write.
#
# Not tested under PBS (there is none on the test machine): the tests run
# this script unchanged with Open MPI's mpiexec on one host in a PBS job's
# environment (PBS_JOBID, PBS_O_WORKDIR, PBS_NODEFILE as the hostfile).
#PBS -l select=16:ncpus=48:mpiprocs=48
#PBS -l walltime=00:30:00
set -euo pipefail
cd "$PBS_O_WORKDIR"
DLBUNDLE=${DLBUNDLE:-/home/$USER/bin/dlbundle}
IMAGE=${IMAGE:-/home/$USER/myapp.dlimg}
APP=${APP:-./myapp}
export DLBUNDLE_STAGE_DIR=${DLBUNDLE_STAGE_DIR:-/local/scratch/dlbundle-$UID}
# An MPI built with PBS support (tm) takes the nodes from the job; one
# without it needs --hostfile "$PBS_NODEFILE".
mpiexec "$DLBUNDLE" exec "$IMAGE" -- $APP

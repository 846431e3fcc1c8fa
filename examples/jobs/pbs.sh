#!/bin/bash
# PBS Pro / Torque job script. Where /dev/shm is small, stage to node-local
# disk instead: --stage-dir (or DLBUNDLE_STAGE_DIR) must be a directory that
# only you can write.
#PBS -l select=16:ncpus=48:mpiprocs=48
#PBS -l walltime=00:30:00
set -euo pipefail
cd "$PBS_O_WORKDIR"
export DLBUNDLE_STAGE_DIR=/local/scratch/dlbundle-$UID
mpiexec /home/$USER/bin/dlbundle exec /home/$USER/myapp.dlimg -- ./myapp

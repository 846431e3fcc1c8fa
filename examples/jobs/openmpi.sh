#!/bin/bash
# Open MPI (mpirun, with or without a batch system): every rank starts through
# dlbundle exec. mpirun gives every rank the same job id (PMIX_NAMESPACE /
# OMPI_MCA_ess_base_jobid), so ranks after the first on a node find the stage
# without touching the image.
set -euo pipefail
DLBUNDLE=/shared/$USER/bin/dlbundle
IMAGE=/shared/$USER/myapp.dlimg

# -x passes variables to every rank; --fallback keeps the job running (natively,
# slowly, with a warning) if a node cannot stage, e.g. /dev/shm is full.
mpirun -np 256 --hostfile hosts \
	"$DLBUNDLE" exec --fallback "$IMAGE" -- python3 -m mypkg.solver --steps 1000

#!/bin/sh
# Slurm Epilog: when a job ends on a node, remove its stage aliases and the
# stages no running process uses, keeping the most recently used up to 4 GiB
# of /dev/shm for the user's next job (slurm.conf: Epilog=/etc/slurm/dlbundle-epilog.sh).
# Stages in use (another job of the user still runs from them) are never
# removed. Runs as root with no PATH; gc runs as the job's user.
DLBUNDLE=${DLBUNDLE:-/usr/local/bin/dlbundle}
PATH=/usr/sbin:/usr/bin:/sbin:/bin
KEEP=${DLBUNDLE_EPILOG_KEEP:-4G}
runuser -u "$SLURM_JOB_USER" -- "$DLBUNDLE" gc --job "$SLURM_JOB_ID" --keep "$KEEP" >/dev/null ||
	echo "dlbundle epilog: gc failed on $SLURMD_NODENAME" >&2
exit 0

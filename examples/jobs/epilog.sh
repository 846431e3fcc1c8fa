#!/bin/sh
# Slurm Epilog: when a job ends on a node, remove its stage aliases and the
# stages no running process uses, keeping the most recently used up to 4 GiB
# of /dev/shm for the user's next job (slurm.conf: Epilog=/etc/slurm/dlbundle-epilog.sh).
# Stages in use (another job of the user still runs from them) are never
# removed. Runs as root with no PATH; gc runs as the job's user.
#
# With DLBUNDLE_RECORDS_TO set (a shared sticky directory every user may
# create a directory in, mode 1777, e.g. /scratch/dlbundle-records), it first copies the job's
# records from the node, what every process of the job passed to the file
# system (docs/exec.md, "Keeping an image complete"), to
# $DLBUNDLE_RECORDS_TO/<job id>/<node>.<run>.report, as the job's user. After
# the job, the user folds them into the image with no new pilot:
#   dlbundle build -o app.dlimg --from app.dlimg $DLBUNDLE_RECORDS_TO/<job id>/*.report
DLBUNDLE=${DLBUNDLE:-/usr/local/bin/dlbundle}
PATH=/usr/sbin:/usr/bin:/sbin:/bin
KEEP=${DLBUNDLE_EPILOG_KEEP:-4G}
# The stage dir the job's execs used: the site's DLBUNDLE_STAGE_DIR (%u
# the user's name, %U the uid; docs/exec.md), else exec's default.
STAGE_DIR=${DLBUNDLE_STAGE_DIR:-/dev/shm/dlbundle-%U}
STAGE_DIR=$(printf '%s' "$STAGE_DIR" | sed "s/%U/$SLURM_JOB_UID/g; s/%u/$SLURM_JOB_USER/g")
if [ -n "$DLBUNDLE_RECORDS_TO" ]; then
	# As the user, by dlbundle (never mkdir/cp in a shared directory: job
	# ids are public, so another user can make the job's directory first or
	# leave a link at a destination name): report --gather reads the
	# records from the checked stage dir and writes through the trust rule.
	runuser -u "$SLURM_JOB_USER" -- env DLBUNDLE_STAGE_DIR="$STAGE_DIR" "$DLBUNDLE" report \
		--gather "$DLBUNDLE_RECORDS_TO" --job "$SLURM_JOB_ID" --node "${SLURMD_NODENAME:-$(hostname)}" ||
		echo "dlbundle epilog: gathering the job's records failed on $SLURMD_NODENAME" >&2
fi
runuser -u "$SLURM_JOB_USER" -- "$DLBUNDLE" gc --job "$SLURM_JOB_ID" --keep "$KEEP" >/dev/null ||
	echo "dlbundle epilog: gc failed on $SLURMD_NODENAME" >&2
exit 0

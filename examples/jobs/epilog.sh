#!/bin/sh
# Slurm Epilog: when a job ends on a node, remove its stage aliases and the
# stages no running process uses, keeping the most recently used up to 4 GiB
# of /dev/shm for the user's next job (slurm.conf: Epilog=/etc/slurm/dlbundle-epilog.sh).
# Stages in use (another job of the user still runs from them) are never
# removed. Runs as root with no PATH; gc runs as the job's user.
#
# With DLBUNDLE_RECORDS_TO set (a shared directory every user may create
# a directory in, e.g. /scratch/dlbundle-records), it first copies the job's
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
	# As the user: the records are theirs, and so is the copy. Every run
	# of the job is named slurm-<job id> or slurm-<job id>.<...>.
	runuser -u "$SLURM_JOB_USER" -- sh -c '
		src=$1/records dst=$2/$3
		for f in "$src/slurm-$3.report" "$src/slurm-$3."*.report; do
			[ -f "$f" ] && [ ! -L "$f" ] || continue
			mkdir -p "$dst" && cp "$f" "$dst/$4.${f##*/}"
		done' sh "$STAGE_DIR" "$DLBUNDLE_RECORDS_TO" "$SLURM_JOB_ID" "${SLURMD_NODENAME:-$(hostname)}" ||
		echo "dlbundle epilog: copying the job's records failed on $SLURMD_NODENAME" >&2
fi
runuser -u "$SLURM_JOB_USER" -- "$DLBUNDLE" gc --job "$SLURM_JOB_ID" --keep "$KEEP" >/dev/null ||
	echo "dlbundle epilog: gc failed on $SLURMD_NODENAME" >&2
exit 0

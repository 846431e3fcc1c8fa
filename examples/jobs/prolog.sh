#!/bin/sh
# Slurm Prolog: stage the job's image on every node before the job starts, so
# that the ranks find it staged (slurm.conf: Prolog=/etc/slurm/dlbundle-prolog.sh).
#
# A job asks for it with   #SBATCH --comment=dlbundle:/shared/path/app.dlimg
# and then runs           srun dlbundle exec /shared/path/app.dlimg -- ./app
#
# slurmd runs the Prolog as root with no PATH and only SLURM_* variables;
# staging runs as the job's user (the stage dir is theirs) in the default
# stage dir (/dev/shm/dlbundle-<uid>), where exec looks. A failure must not
# drain the node: the ranks then stage the image themselves.
# (Root may also stage for the user itself, reading none of the image:
#  "$DLBUNDLE" stage --quiet "$image" run as root in a Prolog stages for
#  SLURM_JOB_UID:SLURM_JOB_GID; docs/security.md, "Root parses nothing".)
DLBUNDLE=${DLBUNDLE:-/usr/local/bin/dlbundle}
PATH=/usr/sbin:/usr/bin:/sbin:/bin
case ${SLURM_JOB_COMMENT:-} in
dlbundle:/*) image=${SLURM_JOB_COMMENT#dlbundle:} ;;
*) exit 0 ;;
esac
if ! runuser -u "$SLURM_JOB_USER" -- "$DLBUNDLE" stage --quiet "$image"; then
	echo "dlbundle prolog: staging $image failed on $SLURMD_NODENAME; the job's ranks will stage it" >&2
fi
exit 0

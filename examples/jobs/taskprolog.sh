#!/bin/sh
# Slurm TaskProlog: runs as the job's user before every task, in the task's
# environment (slurm.conf: TaskProlog=/etc/slurm/dlbundle-taskprolog.sh).
# Lines it prints as "export NAME=VALUE" are set in the task's environment.
#
# Here: every task gets the site's stage dir, so that no module file or job
# script has to set DLBUNDLE_STAGE_DIR, and the Prolog (which stages into the
# default) and the ranks agree. A site with a per-job tmpfs would print
# %t/dlbundle here (and give the Prolog the same --stage-dir). Patterns:
# %u user, %U uid, %j job, %n node, %h host, %t $TMPDIR. A job that sets its
# own DLBUNDLE_STAGE_DIR keeps it.
if [ -z "${DLBUNDLE_STAGE_DIR:-}" ]; then
	echo "export DLBUNDLE_STAGE_DIR=/dev/shm/dlbundle-%U"
fi

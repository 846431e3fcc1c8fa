#!/bin/sh
# Flux: the job shell plugin launchers/flux/dlbundle.lua, installed for
# every job in the job shell's lua.d, <flux prefix>/etc/flux/shell/lua.d
# (beside `flux config builtin shell_initrc`; make install puts it there,
# docs/install.md), or for one job with -o userrc=/path/to/dlbundle.lua. Once per node and
# job it runs `dlbundle env IMAGE` (dlbundle from the job's PATH, or
# $DLBUNDLE) and gives the tasks the loader shim's variables.
#
#   flux batch -N 16 flux.sh      or, in an allocation:  sh flux.sh
set -eu
IMAGE=${IMAGE:-/lustre/$USER/myapp.dlimg}
APP=${APP:-./myapp input.nml}
NTASKS=${NTASKS:-6}

flux run -o dlbundle="$IMAGE" -n "$NTASKS" $APP
# Run natively (with a warning) when the image cannot be staged:
#   flux run -o dlbundle="$IMAGE" -o dlbundle-fallback -n "$NTASKS" $APP

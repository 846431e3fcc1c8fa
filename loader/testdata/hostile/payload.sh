#!/bin/sh
# The payload of the hostile image of TestStageRunsNothingFromImage: every
# file of that image that a stager could run (its ld.so, libc, python3) is
# this script. If it ever runs, it leaves its mark (@MARKER@ is replaced by
# the test) and exits 0, as an attacker's ld.so would, so that nothing else
# fails.
echo "ran as uid $(id -u): $0 $*" >> @MARKER@
exit 0

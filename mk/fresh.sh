#!/bin/sh
# make fresh: the README's set-up on a machine that has never seen dlbundle.
#
#   sh mk/fresh.sh            (root; make fresh)
#
# Builds a clean Debian 12 (bookworm, minbase) chroot with debootstrap from
# the host's Debian mirror, clones this repository's HEAD into it (committed
# work only: a fresh clone has nothing else), and runs there, as a newcomer
# would, in an empty environment:
#
#   1. Go as the README says: golang-go from bookworm-backports (Debian 12's
#      own is 1.19, too old to fetch a newer toolchain), which then fetches
#      the go line of go.mod through the Go module proxy (GOTOOLCHAIN=auto)
#   2. make deps      the Debian packages, then the platform tests' chroots
#   3. make           the static binaries
#   4. make test      only with FRESH_TEST=1: it also needs the users, Slurm
#                     and Flux that make deps installs, and ~10 min more
#
# /proc, /sys, /dev and /dev/pts are bind-mounted, and an empty tmpfs
# mounted on /dev/shm, in a private mount namespace (unshare -m), so they
# go away with it whatever happens.
# Everything lands in $FRESH_DIR (default /var/tmp/dlbundle-fresh), replaced
# on each run, the chroot removed after a pass unless FRESH_KEEP=1; the log of each step is $FRESH_DIR/STEP.log, and the last line
# says how long each step took. Not part of make test: it took 43 min here
# on a busy 2-core machine (debootstrap 138 s, Go 190 s, make deps 1763 s:
# ~1 GB of packages and three chroots, make 488 s), network-bound, and
# ~7 GB of disk.
set -eu
cd "$(dirname "$0")/.."
src=$(pwd)
dir=${FRESH_DIR:-/var/tmp/dlbundle-fresh}
root=$dir/root

if [ "$(id -u)" != 0 ]; then
	echo "make fresh: debootstrap, chroot and mount need root: run sudo make fresh" >&2
	exit 1
fi
for t in debootstrap unshare git; do
	command -v $t >/dev/null || {
		echo "make fresh: $t is missing: run make deps (it installs debootstrap and util-linux)" >&2
		exit 1
	}
done
head=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
	echo "make fresh: note: uncommitted changes are not in the fresh clone; it tests commit $head"
fi

# The host's Debian mirror, as mk/chroot.sh finds it, so that a site's proxy
# or mirror is used.
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/* *$/\1/p; s/^deb  *\(http[^ ]*debian\)\/*  *.*/\1/p' \
	/etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
	grep -v security | head -n 1)
mirror=${FRESH_MIRROR:-$mirror}
if [ -z "$mirror" ]; then
	echo "make fresh: no Debian mirror found in /etc/apt/sources.list*; set FRESH_MIRROR=http://HOST/debian" >&2
	exit 1
fi

times=""
step() { # step NAME COMMAND...: runs it with its output in NAME.log, timed
	name=$1
	shift
	echo "make fresh: $name ..."
	t0=$(date +%s)
	if ! "$@" >"$dir/$name.log" 2>&1; then
		echo "make fresh: $name failed after $(($(date +%s) - t0)) s; the last lines of $dir/$name.log:" >&2
		tail -n 25 "$dir/$name.log" >&2
		exit 1
	fi
	times="$times $name $(($(date +%s) - t0))s"
}

rm -rf "$dir"
mkdir -p "$dir"
# git, make and certificates are what a newcomer installs to clone and run
# make; everything else must come from make deps.
step debootstrap debootstrap --variant=minbase --include=ca-certificates,git,make \
	bookworm "$root" "$mirror"
echo "deb $mirror bookworm-backports main" >"$root/etc/apt/sources.list.d/backports.list"
# No daemon that a package installs (munge, slurmctld...) starts inside the
# chroot and outlives it: the usual policy-rc.d of chroots.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
# The host's own certificate authorities (a site's TLS proxy, as on this
# workplace): without them the toolchain download below fails on
# "certificate signed by unknown authority", as it would for a newcomer
# behind that proxy who had not installed them.
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
	cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
step clone git clone -q --no-checkout "$src" "$root/root/dlbundle"
git -C "$root/root/dlbundle" checkout -q "$head"
# CI checks out the clone with ../shared beside it (the flux-core build
# make deps installs from ../shared/flux): the same here when this clone
# has it, else the Flux test skips in the chroot as it would on CI without.
if [ -d "$src/../shared/flux" ]; then
	mkdir -p "$root/root/shared"
	cp -a "$src/../shared/flux" "$root/root/shared/flux"
fi

# In the chroot: an empty environment (a login's), the README's commands.
cat >"$dir/inside.sh" <<'EOF'
set -eu
cd /root/dlbundle
case $1 in
go)
	update-ca-certificates
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm-backports golang-go
	# Debian's go.env says GOTOOLCHAIN=auto: in the clone, go fetches the
	# toolchain go.mod's go line names, through the Go module proxy.
	go version
	;;
*) make "$@" ;;
esac
EOF
cp "$dir/inside.sh" "$root/root/inside.sh"

# One private mount namespace for every step in the chroot: its mounts
# vanish when it exits, also on failure.
inchroot() {
	unshare -m --propagation private sh -c '
		r=$1; shift
		# Make the chroot root a mount point, as on a machine: unshare
		# --propagation private (the tests use it) refuses a root that is not.
		mount --bind "$r" "$r"
		mount --rbind /proc "$r/proc"
		mount --rbind /sys "$r/sys"
		mount --rbind /dev "$r/dev"
		# An empty /dev/shm, as a machine that never saw dlbundle has
		# (the host one holds what runs there left: stage dirs, other
		# users files), with the options systemd gives it on Debian.
		mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$r/dev/shm"
		exec chroot "$r" /usr/bin/env -i HOME=/root TERM=dumb \
			PATH=/root/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			sh /root/inside.sh "$@"' sh "$root" "$@"
}
step go inchroot go
step deps inchroot deps
step build inchroot build
if [ "${FRESH_TEST:-0}" = 1 ]; then
	step test inchroot test
	tail -n 1 "$dir/test.log"
fi
echo "make fresh: commit ${head%"${head#????????????}"} passed in a clean Debian 12 chroot; seconds per step:$times"
# The chroot (~7 GB) goes once it has passed, unless FRESH_KEEP=1; the logs
# stay. A failed run keeps it, to look into. Nothing is mounted in it any
# more (the namespaces have exited): checked, so rm cannot reach the host.
if [ "${FRESH_KEEP:-0}" != 1 ] && ! grep -q " $root[/ ]" /proc/mounts; then
	rm -rf "$root"
	echo "make fresh: removed the chroot (FRESH_KEEP=1 keeps it); logs in $dir"
else
	echo "make fresh: the chroot is in $root"
fi

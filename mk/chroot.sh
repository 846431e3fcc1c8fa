#!/bin/sh
# Prepares one cached Debian chroot for the platform tests (make deps).
#
#   sh mk/chroot.sh NAME
#
# NAME is one of:
#   bookworm-arm64    Debian 12 arm64 (glibc 2.36), run through qemu-user + binfmt_misc
#   bullseye-amd64    Debian 11 x86-64 (glibc 2.31: ld.so has no --help)
#   trixie-amd64      Debian 13 x86-64 (glibc 2.41)
#
# Each chroot is minbase + python3 and python3-numpy; the x86-64 ones also
# gcc, which compiles the tests' C app there against that glibc (the arm64
# one gets its C app from the host's cross compiler, gcc-aarch64-linux-gnu,
# whose libc is Debian 12's, as in the chroot; compiling under emulation
# would cost minutes). It lands in
# $DLBUNDLE_CHROOTS (default /var/cache/dlbundle/chroots) under NAME, built in
# NAME.partial and renamed when complete: a present NAME is always whole, and
# a rerun of a present one does nothing. The tests find them there and skip,
# saying to run `make deps`, only when the directory is absent.
#
# Cost here: ~4-10 min each (network-bound; the arm64 second stage runs dpkg
# under emulation), ~350-450 MB each.
set -eu
name=${1:?usage: mk/chroot.sh bookworm-arm64|bullseye-amd64|trixie-amd64}
root=${DLBUNDLE_CHROOTS:-/var/cache/dlbundle/chroots}
case $name in
bookworm-arm64) suite=bookworm arch=arm64 include=python3,python3-numpy need=usr/bin/python3 ;;
bullseye-amd64) suite=bullseye arch=amd64 include=python3,python3-numpy,gcc,libc6-dev need=usr/bin/gcc ;;
trixie-amd64)   suite=trixie   arch=amd64 include=python3,python3-numpy,gcc,libc6-dev need=usr/bin/gcc ;;
*) echo "mk/chroot.sh: unknown chroot $name" >&2; exit 2 ;;
esac
dir=$root/$name
# binfmt_misc: the emulator runs the guest's programs (debootstrap's second
# stage, the tests); its F flag keeps it usable inside the chroot. Registered
# again after a reboot, also for a chroot restored from a cache.
binfmt() {
	[ "$arch" != "$(dpkg --print-architecture)" ] || return 0
	[ -e /proc/sys/fs/binfmt_misc/register ] ||
		mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
	[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64
}
if [ -x "$dir/usr/bin/python3" ] && [ -e "$dir/$need" ]; then
	if [ "$(id -u)" = 0 ] && [ -x /usr/sbin/update-binfmts ]; then
		binfmt
	fi
	echo "chroot $name: present in $dir"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "chroot $name: absent; debootstrap needs root: run sudo make deps" >&2
	exit 1
fi
# The tools, if make deps has not installed them yet (APT_PACKAGES lists them).
missing=""
for p in debootstrap qemu-user-static binfmt-support; do
	dpkg-query -W -f='${Status}' $p 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
	# make deps runs three of these at once: one apt-get at a time (apt
	# refuses a second on its lock instead of waiting).
	flock /var/lib/dpkg/dlbundle-apt.lock sh -c \
		"apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing"
fi
# The host's Debian mirror (first deb.debian.org-style URI of the host's
# sources), so that a site's proxy or mirror is used.
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/* *$/\1/p; s/^deb  *\(http[^ ]*debian\)\/*  *.*/\1/p' \
	/etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
	grep -v security | head -n 1)
mirror=${mirror:-http://deb.debian.org/debian}
binfmt
mkdir -p "$root"
rm -rf "$dir.partial"
echo "chroot $name: debootstrap $suite ($arch) from $mirror into $dir (several minutes)"
nice -n 10 debootstrap --arch="$arch" --variant=minbase \
	--include="$include" "$suite" "$dir.partial" "$mirror" \
	> "$root/$name.log" 2>&1 || {
	echo "chroot $name: debootstrap failed; the last lines of $root/$name.log:" >&2
	tail -n 15 "$root/$name.log" >&2
	exit 1
}
# apt's caches are not needed by the tests.
rm -rf "$dir.partial"/var/cache/apt/archives/*.deb "$dir.partial"/var/lib/apt/lists/*_Packages
rm -rf "$dir" # an older, incomplete one
mv "$dir.partial" "$dir"
echo "chroot $name: ready in $dir"

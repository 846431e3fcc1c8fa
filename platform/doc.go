// Package platform holds the tests that run dlbundle where this machine's
// Debian 12 x86-64 is not: on aarch64 (the arm64 dlbundle and shim, under
// qemu-user in a Debian 12 arm64 chroot) and on older and newer glibc (Debian
// 11, glibc 2.31, and Debian 13, glibc 2.41, x86-64 chroots). `make deps`
// prepares the chroots (mk/chroot.sh) in /var/cache/dlbundle/chroots; a test
// skips, saying so, only when its chroot is absent. docs/platforms.md says
// what they show and what cannot be tested here.
//
// The package has no code of its own: the tests drive the dlbundle binaries
// (built for both architectures) inside the chroots, as a site would on its
// nodes.
package platform

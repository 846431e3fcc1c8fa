// Package clitest holds the helpers that the tests of loader (the process
// side) and node (the node side, run as root) share: the dlbundle CLI built
// once per test binary, the fixed environment its programs run in, a probe
// program bundled in a real image at a path absent from this machine, and
// the image an attacker plants (PwnedImage; the cluster tests use it too).
// Only tests import it.
package clitest

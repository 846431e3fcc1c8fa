// Package clitest holds the helpers that the tests of loader (the process
// side) and node (the node side, run as root) share: the dlbundle CLI built
// once per test binary, the fixed environment its programs run in, and a
// probe program bundled in a real image at a path absent from this machine.
// Only tests import it.
package clitest

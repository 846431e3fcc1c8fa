// Package clitest holds the helpers that the tests of several packages
// share: the dlbundle CLI built once per test binary and architecture (CLI,
// CLIFor, Build: loader, node, trace, cmd/dlbundle, platform, the cluster
// and start-up tests), a line-by-line diff of two outputs (LineDiff), the
// fixed environment the CLI's programs run in, a probe program bundled in a
// real image at a path absent from this machine, and the image an attacker
// plants (PwnedImage; the cluster tests use it too), and the fold tests' MPI
// hello and reader of a rank's strace log (MPIHello, OriginalCalls). Only tests import it.
package clitest

// Command conformance is `make conformance`: whole test corpora run
// natively and under `dlbundle exec` (a cold stage, then the warm one), the
// outcome of every test compared, the shim's own report read to prove it
// answered (a run in which it silently turned itself off must not count as
// agreement), and the results written to docs/conformance.md.
//
// A corpus is a command whose output says, test by test, what happened:
// CPython's regression suite and numpy's and scipy's pytest suites (JUnit
// XML), Tcl's own test suite (tcltest's verbose lines), and a C probe of
// libc's path functions over bundled and unbundled trees (one line per call:
// result and errno). For each corpus the image is built from a pilot run of
// the corpus's own start-up (a listing or collection-only run, traced by
// `dlbundle trace`), then the full corpus runs three ways. A divergence is a
// test whose outcome under exec differs from native, or a probe line that
// differs.
//
// Not part of `make test`: a full run takes more than an hour on two cores.
// Usage: go run ./conformance -dlbundle bin/dlbundle -corpus c,cpython
// (-subset for a quick run while developing; see -help).
package main

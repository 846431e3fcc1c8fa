# Conformance: whole test corpora natively and under `dlbundle
# exec` (cold, then warm), outcome per test compared; results in
# docs/conformance.md, one summary line per corpus on stdout. NOT part of
# `make test`: the full run takes more than an hour on 2 cores.
#
#   make conformance                          every corpus (c, cpython, numpy, scipy, tcl)
#   make conformance CONFORMANCE_FLAGS='-corpus c,tcl'
#   make conformance CONFORMANCE_FLAGS=-subset   a quick subset (harness work; not results)
#
# The Tcl test suite comes from Debian's tcl8.6 source package (apt-get
# source, through a private sources list; kept in /var/tmp/dlbundle-conformance-src).
# make test: internal/cluster's mpirun tests import mpi4py.
APT_PACKAGES += python3-mpi4py libpython3.11-testsuite python3-numpy python3-scipy python3-pytest python3-hypothesis tcl8.6 gcc

CONFORMANCE_FLAGS ?=

.PHONY: conformance
conformance: build
	nice -n 10 $(GO) run ./conformance -dlbundle $(BIN) -out docs/conformance.md $(CONFORMANCE_FLAGS)

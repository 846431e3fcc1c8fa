# loader: the C shim (loader/shim) and its benchmarks.
#
#   make shim          rebuild the shim objects after editing loader/shim/*.c
#                      (= go generate ./loader/; commit the objects)
#   make bench-loader  warm-start overhead under the shim vs native -> docs/bench/loader.md

APT_PACKAGES  += gcc python3 python3-numpy dash strace hyperfine
# loader/stack_e2e_test.go: torch, a venv, the Spack-style tree's Python extension
APT_PACKAGES  += python3-torch python3-venv python3-dev bash
BENCH_TARGETS += bench-loader

.PHONY: shim bench-loader
shim:
	$(GO) generate ./loader/

bench-loader: build
	sh loader/testdata/bench.sh

# Short fuzz runs of the loader's readers after `go test` (make test).
TEST_AFTER += fuzz-loader
.PHONY: fuzz-loader
fuzz-loader:
	$(GO) test -run '^$$' -fuzz '^FuzzReadReports$$' -fuzztime 10s ./loader/
	$(GO) test -run '^$$' -fuzz '^FuzzTable$$' -fuzztime 10s ./loader/

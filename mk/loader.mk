# loader: the C shim (loader/shim) and its benchmarks.
#
#   make shim          rebuild the shim objects after editing loader/shim/*.c
#                      (= go generate ./loader/; commit the objects)
#   make bench-loader  warm-start overhead under the shim vs native -> docs/bench/loader.md
#   make bench-stage-disk  a cold stage vs zstd|cpio on a loop-mounted ext4 and on
#                      tmpfs, and the objects each creates -> docs/bench/stage-disk.md
#                      (root; OLD_DLBUNDLE=PATH adds an older dlbundle's stage)

APT_PACKAGES  += gcc python3 python3-numpy dash strace hyperfine libasan8 libubsan1
# loader/stack_e2e_test.go: torch, a venv, the Spack-style tree's Python extension
APT_PACKAGES  += python3-torch python3-venv python3-dev bash
APT_PACKAGES  += zstd cpio e2fsprogs
# msgfmt compiles the gettext test's catalogs; tclsh (Debian's tcl, not only
# tcl8.6) runs the walker's Tcl differential test.
APT_PACKAGES  += gettext tcl
BENCH_TARGETS += bench-loader bench-stage-disk

.PHONY: shim bench-loader bench-stage-disk
shim:
	$(GO) generate ./loader/

bench-loader: build
	sh loader/testdata/bench.sh

bench-stage-disk: build
	sh loader/testdata/stagedisk.sh

# Short fuzz runs of the loader's readers after `go test` (make test).
TEST_AFTER += fuzz-loader
.PHONY: fuzz-loader
fuzz-loader:
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzReadReports$$' -fuzztime 10s ./report/
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzTable$$' -fuzztime 10s ./loader/stagefmt/

# The shim's C readers (table.h, reportfmt.h, ldcache.h) through cgo, under
# AddressSanitizer (-asan; the Makefile's CGO_ENABLED=0 is overridden here):
# the unit tests and seeds, then a short fuzz run of each target. Go's
# coverage guidance does not see into C: the mutations are blind there.
TEST_AFTER += fuzz-shim
.PHONY: fuzz-shim
fuzz-shim:
	CGO_ENABLED=1 $(GO) test -count=1 -asan ./loader/shim/fuzz/
	CGO_ENABLED=1 $(GO_FUZZ) -asan -run '^$$' -fuzz '^FuzzTableResolve$$' -fuzztime 10s ./loader/shim/fuzz/
	CGO_ENABLED=1 $(GO_FUZZ) -asan -run '^$$' -fuzz '^FuzzTableCheck$$' -fuzztime 10s ./loader/shim/fuzz/
	CGO_ENABLED=1 $(GO_FUZZ) -asan -run '^$$' -fuzz '^FuzzReportLine$$' -fuzztime 10s ./loader/shim/fuzz/
	CGO_ENABLED=1 $(GO_FUZZ) -asan -run '^$$' -fuzz '^FuzzLdCache$$' -fuzztime 10s ./loader/shim/fuzz/

# The differential walker fuzzer (loader/walker_test.go): realpath & co.
# natively and under the shim on random paths, compared (as root: it runs
# its walkers as root and as nobody).
TEST_AFTER += fuzz-walker
.PHONY: fuzz-walker
fuzz-walker:
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzWalker$$' -fuzztime 10s -parallel 1 ./loader/

# Load plans (package squash) and `dlbundle build`.
#   make fuzz-squash   short fuzz run of the planner on arbitrary traces (part of make test)
#   make bench-build   build throughput on a real `import numpy` pilot vs raw zstd
#                      EncodeAll of the same files -> figures for docs/bench/build.md
.PHONY: fuzz-squash bench-build
APT_PACKAGES  += gcc python3 python3-numpy
TEST_AFTER    += fuzz-squash
BENCH_TARGETS += bench-build

fuzz-squash:
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzBuild$$' -fuzztime 10s ./squash/

# Each iteration times build and raw zstd back to back, so that their ratio is
# measured under the same load.
bench-build:
	$(GO) test -run '^$$' -bench BuildNumpy -benchtime 10x -count 3 ./cmd/dlbundle/ | tee /tmp/bench-build.txt

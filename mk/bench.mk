# Start-up at width: slowfs, a contended shared file system in FUSE,
# and the harness that starts 1..64 ranks natively, from tmpfs and through
# dlbundle exec. Writes docs/bench/{results.csv,startup.svg,startup.md}.
# Needs root (or fusermount3) for the FUSE mount; about 5-8 minutes on 2 cores.

APT_PACKAGES  += fuse3 python3-numpy
BENCH_TARGETS += bench-startup

# Extra flags, e.g. STARTUP_FLAGS='--ranks 1,4 --scenarios loadtest'.
STARTUP_FLAGS ?=

.PHONY: bench-startup
bench-startup: build
	# Static launcher: the ranks' LD_LIBRARY_PATH must not make its own ld.so search the tree.
	CGO_ENABLED=0 $(GO) run ./bench/cmd/startup --out docs/bench --dlbundle $(BIN) $(STARTUP_FLAGS)

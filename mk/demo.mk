# make demo-exec: trace -> build -> exec on the bundled examples (examples/demo),
# printing native vs exec file-system operations on the app's tree and wall time.
.PHONY: demo-exec bench-stage
DEMO_TARGETS += demo-exec
APT_PACKAGES += gcc strace python3 python3-numpy

demo-exec: $(BIN)
	examples/demo/run-demo.sh $(BIN)

# make bench-stage: cold staging throughput vs raw zstd DecodeAll of the same
# frames, and RSS/PSS per rank of a stage shared by 1 and 8 ranks
# (results: docs/bench/stage.md).
BENCH_TARGETS += bench-stage
bench-stage:
	$(GO) test -run '^$$' -bench 'StageCold|ExtractOnly|ZstdDecodeAll|StageVsDecodeAll|StageMemory' -benchtime 3x -count 1 ./loader

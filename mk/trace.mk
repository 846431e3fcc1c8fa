# Pilot trace (package trace, `dlbundle trace`).
#   make bench-trace   traced / untraced wall time -> docs/bench/trace.md
#   make fuzz-trace    short fuzz runs of the trace readers (part of make test)
.PHONY: bench-trace fuzz-trace
APT_PACKAGES  += gcc strace python3 python3-numpy
BENCH_TARGETS += bench-trace
TEST_AFTER    += fuzz-trace

TRACE_BENCH_RUNS ?= 15

bench-trace: $(BIN)
	GO=$(GO) /usr/bin/python3 trace/bench_trace.py $(BIN) docs/bench/trace.md $(TRACE_BENCH_RUNS)

fuzz-trace:
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzParseDirents$$' -fuzztime 10s ./trace/
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzRead$$' -fuzztime 10s ./trace/
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzEncodeString$$' -fuzztime 10s ./trace/

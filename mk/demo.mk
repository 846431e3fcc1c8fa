# make demo: what dlbundle is for, in about a minute. bench/cmd/demo runs the
# start-up benchmark (bench/startup) quickly: a C app and Python served from
# slowfs (a contended shared file system, FUSE), 1 and 16 ranks started
# together, natively and through dlbundle exec; it ends with one screen and
# writes $(DEMO_OUT)/{summary.txt,demo.svg,results.csv}. Needs root (FUSE).
.PHONY: demo-intro demo-startup bench-stage
DEMO_TARGETS += demo-intro demo-startup
APT_PACKAGES += gcc python3 fuse3
DEMO_OUT ?= bin/demo

# First (demo.mk is read before the other areas' mk files, and demo-startup's
# prerequisites start with it): what the demo's parts are, so that the short
# ones that run before the main screen (the registry's push and pull) are
# introduced, not taken for it. An area describes its demo target T with
# DEMO_ABOUT_T.
DEMO_SHORT = $(filter-out demo-intro demo-startup,$(DEMO_TARGETS))
DEMO_ABOUT_demo-registry ?= an image pushed to a throw-away OCI registry on 127.0.0.1 and pulled back (seconds)
demo-intro:
	@n=0; echo "== make demo runs, in this order:"; \
	$(foreach d,$(DEMO_SHORT),n=$$((n+1)); echo "   $$n. $(d): $(or $(DEMO_ABOUT_$(d)),see its mk/*.mk)";) \
	echo "   $$((n+1)). the main demo: start-up at width on a contended shared file system (about a"; \
	echo "      minute); its one-screen summary comes last."

# After every other demo target (expanded once all mk/*.mk are read), so that
# the summary is the last screen. Static launcher (CGO_ENABLED=0): the ranks'
# LD_LIBRARY_PATH must not make its own ld.so search the tree.
.SECONDEXPANSION:
demo-startup: $(BIN) $$(filter-out demo-startup,$$(DEMO_TARGETS))
	@CGO_ENABLED=0 $(GO) run ./bench/cmd/demo --out $(DEMO_OUT) --dlbundle $(BIN)

# make bench-stage: cold staging throughput vs raw zstd DecodeAll of the same
# frames, and RSS/PSS per rank of a stage shared by 1 and 8 ranks
# (results: docs/bench/stage.md).
BENCH_TARGETS += bench-stage
bench-stage:
	$(GO) test -run '^$$' -bench 'StageCold|ExtractOnly|ZstdDecodeAll|StageVsDecodeAll|StageMemory' -benchtime 3x -count 1 ./node

# The first rank on a node: `dlbundle exec` of numpy and torch on a cold
# stage (stage dir empty, image in the page cache) against its floor (the
# warm run + cp -a of the staged tree + reading the image), in the same
# interleaved rounds, with where the first rank's time goes
# (DLBUNDLE_STAGE_TIMING=1: the stage's own phases) -> docs/bench/firstrank.md.
# About 2 minutes. FIRSTRANK_COMPARE_REF=COMMIT also runs that commit's
# build (git archive into bin/compare/, as bench-cli) in the same rounds;
# FIRSTRANK_FLAGS='-rounds 15 -apps numpy' for more rounds or fewer apps.
APT_PACKAGES  += python3-numpy python3-torch
BENCH_TARGETS += bench-firstrank
FIRSTRANK_COMPARE_REF ?=
FIRSTRANK_FLAGS ?=
.PHONY: bench-firstrank
bench-firstrank: build $(if $(FIRSTRANK_COMPARE_REF),bin/compare/$(FIRSTRANK_COMPARE_REF)/dlbundle)
	$(GO) run ./internal/firstrank -dlbundle $(BIN) -out docs/bench/firstrank.md \
	  $(if $(FIRSTRANK_COMPARE_REF),-compare bin/compare/$(FIRSTRANK_COMPARE_REF)/dlbundle) $(FIRSTRANK_FLAGS)

# dlbundle's own cost: exec's fixed cost on a warm
# stage against /bin/true and an empty Go program (split into dlbundle's own
# process and the shim's share in the app), and what 100,000 arguments add to
# exec and trace -> docs/bench/cli.md (the notes below its marker are kept).
# About a minute. An older build runs in the same rounds (--version, exec,
# launcher-less): COMPARE_REF, a commit built from this repository with
# git archive into bin/compare/REF/ (default fd3426b, round 3's landed build,
# the figure "no verb starts slower" is held to), or COMPARE=OTHER_BINARY;
# COMPARE_REF= (empty) runs none.
COMPARE_REF ?= fd3426b
COMPARE_BIN := $(if $(COMPARE),$(COMPARE),$(if $(COMPARE_REF),bin/compare/$(COMPARE_REF)/dlbundle))
BENCH_TARGETS += bench-cli
.PHONY: bench-cli
bench-cli: build $(if $(COMPARE),,$(if $(COMPARE_REF),bin/compare/$(COMPARE_REF)/dlbundle))
	$(GO) run ./internal/clibench -dlbundle $(BIN) -out docs/bench/cli.md $(if $(COMPARE_BIN),-compare $(COMPARE_BIN))

# The older commit's binary, built as `make` builds this one (static,
# stripped), from its own tree: git archive needs no second work tree.
bin/compare/%/dlbundle:
	@rm -rf bin/compare/$*/src && mkdir -p bin/compare/$*/src
	git archive $* | tar -x -C bin/compare/$*/src
	cd bin/compare/$*/src && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w -X github.com/dlbundle/dlbundle/internal/version.Version=$*' -o ../dlbundle ./cmd/dlbundle
	rm -rf bin/compare/$*/src

# Short fuzz runs of the command line after `go test`: main's linear split
# parse, and exec and trace read without kong (quickParse), must agree with kong's
# own on every line they accept.
TEST_AFTER += fuzz-cli
.PHONY: fuzz-cli
fuzz-cli:
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzSplitCommandLine$$' -fuzztime 10s ./cmd/dlbundle/
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzQuickParseMatchesKong$$' -fuzztime 10s ./cmd/dlbundle/

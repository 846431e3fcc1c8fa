# dlbundle's own cost: exec's fixed cost on a warm
# stage against /bin/true and an empty Go program (split into dlbundle's own
# process and the shim's share in the app), and what 100,000 arguments add to
# exec and trace -> docs/bench/cli.md (the notes below its marker are kept).
# About a minute; COMPARE=OTHER_BINARY runs an older build in the same rounds.
BENCH_TARGETS += bench-cli
.PHONY: bench-cli
bench-cli: build
	$(GO) run ./internal/clibench -dlbundle $(BIN) -out docs/bench/cli.md $(if $(COMPARE),-compare $(COMPARE))

# Short fuzz runs of the command line after `go test`: main's linear split
# parse, and exec and trace read without kong (quickParse), must agree with kong's
# own on every line they accept.
TEST_AFTER += fuzz-cli
.PHONY: fuzz-cli
fuzz-cli:
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzSplitCommandLine$$' -fuzztime 10s ./cmd/dlbundle/
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzQuickParseMatchesKong$$' -fuzztime 10s ./cmd/dlbundle/

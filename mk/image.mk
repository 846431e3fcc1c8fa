# The .dlimg format (package image, docs/SPEC.md): a short fuzz run of the
# reader after `go test` (crashers land in image/testdata/fuzz and are kept as
# regression seeds), and the write/extract throughput benchmark.
.PHONY: fuzz-image bench-image
APT_PACKAGES  += zstd cpio python3-numpy
TEST_AFTER    += fuzz-image
BENCH_TARGETS += bench-image

# Three targets, ~18 s in all; -fuzzminimizetime bounds the time spent
# shrinking new inputs (images and TOCs are kilobytes; minimising them would
# eat the budget). FuzzTOC: the binary TOC decoder alone, seeded with real
# images' TOCs.
fuzz-image:
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime 5s -fuzzminimizetime 50x ./image/
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzExtract$$' -fuzztime 6s -fuzzminimizetime 50x ./image/
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzTOC$$' -fuzztime 6s -fuzzminimizetime 50x ./image/

# Write and Extract throughput vs raw zstd EncodeAll/DecodeAll on the Python
# stdlib + numpy file set; results: docs/bench/image.md.
bench-image:
	$(GO) test -run '^$$' -bench '^BenchmarkImage$$' -benchtime 5x -count 3 -timeout 30m ./image/

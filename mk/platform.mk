# Platforms (docs/platforms.md): the node's ld.so rules, what the stager reads
# of a staged tree, architectures and glibc versions.
#
#   make fuzz-platform   short fuzz runs of the readers of image bytes the
#                        stager parses as root (part of make test)
.PHONY: fuzz-platform
TEST_AFTER += fuzz-platform

fuzz-platform:
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzLibcDefines$$' -fuzztime 10s ./loader/

# The shim is cross-compiled for aarch64 (loader/shim/build.sh).
APT_PACKAGES += gcc-aarch64-linux-gnu libc6-dev-arm64-cross

# The arm64 build stays clean (the tests' own vet is this machine's).
TEST_PREREQS += vet-arm64
.PHONY: vet-arm64
vet-arm64:
	GOARCH=arm64 $(GO) vet ./...

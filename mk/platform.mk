# Platforms (docs/platforms.md): the node's ld.so rules, what the stager reads
# of a staged tree, architectures and glibc versions.
#
#   make chroots          the Debian chroots of the platform tests, prepared
#                         and cached in /var/cache/dlbundle/chroots (part of
#                         make deps; mk/chroot.sh): arm64 Debian 12 (qemu-user),
#                         x86-64 Debian 11 (glibc 2.31) and 13 (glibc 2.41)
#   make platforms        only the platform tests, verbose (./platform: part
#                         of make test; ~1.5 min here)
#   make test-arm64-unit  the arm64 build's unit tests of the tracer's
#                         decoding, run under qemu-user (part of make test)
#   make fuzz-platform    short fuzz runs of the readers of image bytes the
#                         stager parses as root (part of make test)

# The shim is cross-compiled for aarch64 (loader/shim/build.sh); the chroots
# need debootstrap, qemu-user and binfmt_misc; the tests unshare and strace.
APT_PACKAGES += gcc-aarch64-linux-gnu libc6-dev-arm64-cross debootstrap qemu-user-static binfmt-support \
	util-linux strace

CHROOTS := bookworm-arm64 bullseye-amd64 trixie-amd64
.PHONY: chroots platforms test-arm64-unit fuzz-platform vet-arm64
deps: chroots
# In parallel: the arm64 one (~10 min: dpkg runs emulated) takes longest.
chroots: deps-packages
	@st=0; pids=""; \
	for c in $(CHROOTS); do sh mk/chroot.sh $$c & pids="$$pids $$!"; done; \
	for p in $$pids; do wait $$p || st=1; done; exit $$st

platforms:
	$(GO) test -count=1 -v -run 'TestPlatforms' ./platform/

TEST_AFTER += test-arm64-unit fuzz-platform
test-arm64-unit:
	@if [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || [ "$$(uname -m)" = aarch64 ]; then \
	  GOARCH=arm64 $(GO) test -count=1 -run '^(TestDecodeArm64Stops|TestAarch64Table|TestAarch64NumbersMatchXSys|TestFilterArm64|TestFilterMatchesGoSeccompBPF)$$' ./trace/; \
	else \
	  echo "test-arm64-unit: qemu-aarch64 is not registered with binfmt_misc; run make deps" >&2; exit 1; \
	fi

fuzz-platform:
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzLibcDefines$$' -fuzztime 10s ./loader/stagefmt/
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzFormatReals$$' -fuzztime 10s ./loader/stagefmt/

# The arm64 build stays clean (the tests' own vet is this machine's).
TEST_PREREQS += vet-arm64
vet-arm64:
	GOARCH=arm64 $(GO) vet ./...

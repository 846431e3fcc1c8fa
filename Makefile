# dlbundle — build, test, demo, bench.
#
#   make          build bin/dlbundle-linux-amd64, bin/dlbundle-linux-arm64 (static,
#                 CGO_ENABLED=0) and bin/dlbundle, this machine's
#   make deps     install the Debian packages the tests and demo use (asks for root if missing)
#   make test     every test (unit, integration with real programs, a short fuzz run)
#   make check    fast checks run before make test: gofmt, vet (amd64, arm64), staticcheck,
#                 go mod tidy, go test -race -short of the packages that need no root (mk/check.mk)
#   make fresh    the README's set-up commands in a clean Debian 12 chroot from a clone of HEAD (mk/fresh.sh)
#   make demo     ~1 min: native vs dlbundle exec and launcher-less (dlbundle env) at 1 and 16 ranks
#                 on a contended FUSE file system
#   make bench    benchmarks; results go to docs/benchmarks.md
#   make install  bin/dlbundle, the Slurm and Flux plugins where the installed Slurm and Flux
#                 find them (PREFIX, DESTDIR; docs/install.md); make uninstall removes them
#
# Each area of the tree adds its own targets in mk/<area>.mk and appends to the
# variables below, so that no two areas edit the same lines.

GO       ?= go
BIN      := bin/dlbundle
# The same string a plain `go install` of a clone reports (internal/version
# reads vcs.revision then): 12 hex digits of the commit, -dirty for local changes.
VERSION  ?= $(shell v=$$(git rev-parse --short=12 HEAD 2>/dev/null) || v=dev; [ -z "$$(git status --porcelain 2>/dev/null)" ] || v=$$v-dirty; echo $$v)
LDFLAGS  := -s -w -X github.com/dlbundle/dlbundle/internal/version.Version=$(VERSION)
export CGO_ENABLED ?= 0

# One `go test -fuzz` run (mk/gotest-fuzz.sh: retries once when Go 1.26's fuzz
# coordinator fails a run on its own deadline, go.dev/issue/75804).
GO_FUZZ   = mk/gotest-fuzz.sh $(GO) test

# Debian packages needed by tests, demo and bench (mk/*.mk append).
APT_PACKAGES := gcc make cpio zstd strace python3 file
# Targets that must exist before `go test` runs (mk/*.mk append).
TEST_PREREQS :=
# Targets run after `go test` (mk/*.mk append), e.g. short fuzz runs.
TEST_AFTER   :=
# Targets run by `make bench` and `make demo` (mk/*.mk append).
BENCH_TARGETS :=
DEMO_TARGETS  :=

.PHONY: all build deps deps-packages test vet demo bench clean FORCE
all: build

include $(sort $(wildcard mk/*.mk))

# One static binary per architecture dlbundle supports; bin/dlbundle is a copy
# of this machine's.
BINS := bin/dlbundle-linux-amd64 bin/dlbundle-linux-arm64
# Without Go, say so (rather than build bin/dlbundle-linux-.o from nothing).
GOHOSTARCH := $(shell $(GO) env GOHOSTARCH 2>/dev/null)
build: $(if $(GOHOSTARCH),,go-missing) $(BIN) $(BINS)
.PHONY: go-missing
go-missing:
	@echo "make: '$(GO)' is not on PATH: install Go $$(sed -n 's/^go //p' go.mod) or newer (https://go.dev/dl/), or run make GO=/path/to/bin/go" >&2; exit 2
bin/dlbundle-linux-%: FORCE
	@mkdir -p $(dir $@)
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ ./cmd/dlbundle
$(BIN): bin/dlbundle-linux-$(GOHOSTARCH)
	cp -f $< $@

# Packages first, then whatever needs them (mk/*.mk add `deps: X` with X
# depending on deps-packages): make runs a target's prerequisites before its
# recipe, and two apt-get runs at once fail on apt's lock instead of waiting.
deps: deps-packages
deps-packages:
	@missing=""; for p in $(sort $(APT_PACKAGES)); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then \
	  echo "make deps: all $(words $(sort $(APT_PACKAGES))) Debian packages are installed: $(sort $(APT_PACKAGES))"; \
	else \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else \
	    echo "missing Debian packages:$$missing — run: sudo apt-get install$$missing" >&2; exit 1; \
	  fi; \
	fi

vet:
	$(GO) vet ./...

# go test's output goes through internal/testsum: package lines and failing
# tests' output, a line per fuzz run saying whether it fuzzed beyond the seed
# corpus, and last one line of totals "N passed, N failed, N skipped" (tests
# and subtests of go test, plus one per fuzz run). The fuzz runs go on after
# failing tests (-k), so that the totals cover everything; the exit status is
# 1 if anything failed.
TESTSUM := bin/testsum
test: build $(TEST_PREREQS)
	$(GO) vet ./...
	@$(GO) build -o $(TESTSUM) ./internal/testsum
	@st=bin/.testsum.json; rm -f $$st; \
	{ $(GO) test -count=1 -timeout 14m -json ./... 2>&1; echo "testsum-exit $$?"; } | $(TESTSUM) go $$st; \
	{ $(MAKE) --no-print-directory -k $(TEST_AFTER) test-after-done 2>&1; echo "testsum-exit $$?"; } | $(TESTSUM) fuzz $$st; \
	$(TESTSUM) total $$st

.PHONY: test-after-done
test-after-done: ; @:

demo: build $(DEMO_TARGETS)

# bench-cli first: its sub-millisecond figures need a quiet machine, and the
# start-up benchmark's ranks leave the load average at 7-10 for minutes.
bench: build bench-cli $(filter-out bench-cli,$(BENCH_TARGETS))

clean:
	rm -rf bin

# dlbundle — build, test, demo, bench.
#
#   make          build bin/dlbundle (static, CGO_ENABLED=0)
#   make deps     install the Debian packages the tests and demo use (asks for root if missing)
#   make test     every test (unit, integration with real programs, a short fuzz run)
#   make demo     the whole cycle on a bundled example
#   make bench    benchmarks; results go to docs/benchmarks.md
#
# Each area of the tree adds its own targets in mk/<area>.mk and appends to the
# variables below, so that no two areas edit the same lines.

GO       ?= go
BIN      := bin/dlbundle
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/dlbundle/dlbundle/internal/version.Version=$(VERSION)
export CGO_ENABLED ?= 0

# Debian packages needed by tests, demo and bench (mk/*.mk append).
APT_PACKAGES := gcc make cpio zstd strace python3 file
# Targets that must exist before `go test` runs (mk/*.mk append).
TEST_PREREQS :=
# Targets run after `go test` (mk/*.mk append), e.g. short fuzz runs.
TEST_AFTER   :=
# Targets run by `make bench` and `make demo` (mk/*.mk append).
BENCH_TARGETS :=
DEMO_TARGETS  :=

.PHONY: all build deps test vet demo bench clean FORCE
all: build

include $(sort $(wildcard mk/*.mk))

build: $(BIN)
$(BIN): FORCE
	@mkdir -p $(dir $@)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ ./cmd/dlbundle

deps:
	@missing=""; for p in $(sort $(APT_PACKAGES)); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else \
	    echo "missing Debian packages:$$missing — run: sudo apt-get install$$missing" >&2; exit 1; \
	  fi; \
	fi

vet:
	$(GO) vet ./...

test: build $(TEST_PREREQS)
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 14m ./...
	@$(MAKE) --no-print-directory $(TEST_AFTER) test-after-done

.PHONY: test-after-done
test-after-done: ; @:

demo: build $(DEMO_TARGETS)

bench: build $(BENCH_TARGETS)

clean:
	rm -rf bin

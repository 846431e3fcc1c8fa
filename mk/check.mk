# make check: the fast habits a change must pass before the long `make test`
# (.ci/run runs it first). Each step fails on its own finding and says the fix:
#
#   make check            all of the steps below, in this order
#   make check-fmt        gofmt -l lists no file            (fix: gofmt -w FILE)
#   make check-vet        go vet for amd64 (with cgo: the shim's C readers'
#                         test harness) and for arm64 (static, as released)
#   make check-staticcheck  staticcheck, pinned in STATICCHECK_VERSION and
#                         installed into bin/ from the Go module proxy once
#   make check-tidy       go.mod and go.sum are what `go mod tidy` writes
#                         (fix: go mod tidy)
#   make check-door       doorcheck (internal/doorcheck): no direct os/syscall/
#                         unix open, create, mkdir, rename, remove, link or
#                         readdir of a non-constant path in cmd/, node/,
#                         report/, loader/ outside the trust door
#                         (internal/trustpath, internal/outfile) but the
#                         functions internal/doorcheck/allow.go lists, each
#                         with its reason (fix: go through the door the
#                         message names, or add an entry with a reason)
#   make check-race       go test -race -short of RACE_PACKAGES: the packages
#                         whose tests need no root, no chroot and no Slurm,
#                         so that a data race shows up in seconds
#
# Cost on this 2-core machine when idle: ~2-3 min; the race build is cached
# by go's build cache afterwards.

STATICCHECK_VERSION ?= v0.8.2
STATICCHECK := bin/staticcheck-$(STATICCHECK_VERSION)

# -race needs cgo, so a C compiler (gcc, from make deps). Packages whose tests
# run real ptrace, setuid children, chroots or Slurm (loader, node, trace,
# squash, platform, cmd/dlbundle, internal/cluster) stay with make test.
RACE_PACKAGES := ./image/ ./image/registry/ ./view/ ./report/ ./internal/units/ ./internal/untrusted/ \
	./internal/testsum/ ./internal/version/ ./internal/oneproc/ ./internal/slowfs/ ./internal/dirent/ ./internal/clitest/ ./internal/abspath/ ./internal/doorcheck/

.PHONY: check check-fmt check-vet check-staticcheck check-tidy check-door check-race
check: check-fmt check-vet check-staticcheck check-tidy check-door check-race
	@echo "make check: gofmt, vet (amd64, arm64), staticcheck $(STATICCHECK_VERSION), go mod tidy, doorcheck and -race tests are clean"

check-fmt:
	@files=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$files" ]; then \
	  echo "check-fmt: these files are not gofmt'ed; run: gofmt -w $$(echo $$files)" >&2; \
	  gofmt -d $$files >&2; exit 1; \
	fi

check-vet:
	CGO_ENABLED=1 GOARCH=amd64 $(GO) vet ./...
	CGO_ENABLED=0 GOARCH=arm64 $(GO) vet ./...

# Pinned: a newer staticcheck may add checks, and a check's verdict must not
# change under a change that did not touch the code. The versioned file name
# makes a bump of STATICCHECK_VERSION install the new one.
$(STATICCHECK):
	@mkdir -p bin
	GOBIN=$(CURDIR)/bin/.staticcheck $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv -f bin/.staticcheck/staticcheck $@ && rmdir bin/.staticcheck

check-staticcheck: $(STATICCHECK)
	CGO_ENABLED=1 $(STATICCHECK) ./...

check-tidy:
	@mkdir -p bin
	@$(GO) mod tidy -diff >bin/.tidy.diff 2>&1 || { \
	  echo "check-tidy: go.mod/go.sum differ from what go mod tidy writes; run: go mod tidy" >&2; \
	  grep -v '^go: ' bin/.tidy.diff >&2; exit 1; }

# Built from this tree each time (go's build cache makes that cheap), so the
# allowlist and the analyzer are always the ones being reviewed.
check-door:
	@mkdir -p bin
	$(GO) build -o bin/doorcheck ./internal/doorcheck/cmd/doorcheck
	CGO_ENABLED=1 bin/doorcheck ./...

check-race:
	@command -v gcc >/dev/null || { echo "check-race: -race needs cgo and gcc; run: make deps" >&2; exit 1; }
	CGO_ENABLED=1 $(GO) test -race -short -count=1 $(RACE_PACKAGES)

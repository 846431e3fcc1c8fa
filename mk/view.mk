# The load-sequence page (package view; `dlbundle inspect --html`, `dlbundle
# trace --html`): its test renders the page in Debian's headless Chromium
# (view/chromium_test.go, a few seconds in `go test`), so `make deps`
# installs it.
APT_PACKAGES += chromium

# A short fuzz run of the page writer on traces (markup from a trace must
# never reach the page) after `go test` (make test).
TEST_AFTER += fuzz-view
.PHONY: fuzz-view
fuzz-view:
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzWritePage$$' -fuzztime 10s ./view/

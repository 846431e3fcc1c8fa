# The load-sequence page (package view; `dlbundle inspect --html`, `dlbundle
# trace --html`): its test renders the page in Debian's headless Chromium
# (view/chromium_test.go, a few seconds in `go test`), so `make deps`
# installs it.
APT_PACKAGES += chromium

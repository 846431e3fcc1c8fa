# OCI registry transport (image/registry): the integration test runs Debian's
# CNCF distribution registry (docker-registry) on 127.0.0.1; a short fuzz run
# of the manifest checker follows `go test`.
.PHONY: fuzz-registry
APT_PACKAGES += docker-registry
TEST_AFTER   += fuzz-registry

fuzz-registry:
	$(GO) test -run '^$$' -fuzz '^FuzzCheckManifest$$' -fuzztime 10s ./image/registry/

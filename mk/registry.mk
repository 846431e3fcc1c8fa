# OCI registry transport (image/registry): the integration test runs Debian's
# CNCF distribution registry (docker-registry) on 127.0.0.1; a short fuzz run
# of the manifest checker follows `go test`; `make demo` pushes and pulls an
# image through a throw-away registry.
.PHONY: fuzz-registry demo-registry
APT_PACKAGES  += docker-registry
TEST_AFTER    += fuzz-registry
DEMO_TARGETS  += demo-registry

fuzz-registry:
	$(GO_FUZZ) -run '^$$' -fuzz '^FuzzCheckManifest$$' -fuzztime 10s -fuzzminimizetime 50x ./image/registry/

# A registry on a free 127.0.0.1 port with storage in a temp dir, stopped and
# removed at the end; the image is a pilot run of `python3 -c 'import json'`.
demo-registry: $(BIN)
	@set -e; d=$$(mktemp -d); trap 'set +e; kill $$pid 2>/dev/null; wait $$pid 2>/dev/null; rm -rf $$d' EXIT; \
	port=$$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'); \
	printf 'version: 0.1\nlog: {level: error, accesslog: {disabled: true}}\nstorage: {filesystem: {rootdirectory: %s/storage}}\nhttp: {addr: "127.0.0.1:%s"}\n' $$d $$port > $$d/config.yml; \
	/usr/bin/docker-registry serve $$d/config.yml >$$d/registry.log 2>&1 & pid=$$!; \
	for i in $$(seq 100); do /usr/bin/python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$$port/v2/')" 2>/dev/null && break; sleep 0.1; done; \
	echo "== registry demo: docker-registry on 127.0.0.1:$$port"; \
	$(BIN) trace -o $$d/py.trace -- /usr/bin/python3 -c 'import json' >$$d/build.log 2>&1 || { cat $$d/build.log; exit 1; }; \
	$(BIN) build -o $$d/py.dlimg $$d/py.trace >$$d/build.log 2>&1 || { cat $$d/build.log; exit 1; }; \
	echo "\$$ dlbundle push py.dlimg 127.0.0.1:$$port/demo/py:v1"; \
	$(BIN) push $$d/py.dlimg 127.0.0.1:$$port/demo/py:v1; \
	echo "\$$ dlbundle pull -o pulled.dlimg 127.0.0.1:$$port/demo/py:v1"; \
	$(BIN) pull -o $$d/pulled.dlimg 127.0.0.1:$$port/demo/py:v1; \
	cmp $$d/py.dlimg $$d/pulled.dlimg && echo "pulled image is byte-identical to the pushed one"

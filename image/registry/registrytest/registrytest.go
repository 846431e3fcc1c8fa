// Package registrytest runs a real OCI registry for tests: Debian's CNCF
// distribution registry (package docker-registry) on a free 127.0.0.1 port
// with filesystem storage in the test's temp dir, stopped at cleanup.
// 127.0.0.1 is plain http to go-containerregistry, so no --insecure needed.
package registrytest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Binary is where Debian's docker-registry package installs the server.
const Binary = "/usr/bin/docker-registry"

// StartDistribution starts docker-registry (deletion enabled) and returns
// its address (127.0.0.1:PORT) and storage root. It skips the test if the
// binary is absent, naming the package to install.
func StartDistribution(t testing.TB) (addr, storage string) {
	t.Helper()
	if _, err := os.Stat(Binary); err != nil {
		t.Skipf("%s not found: install the Debian package docker-registry (make deps)", Binary)
	}
	dir := t.TempDir()
	storage = filepath.Join(dir, "storage")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = l.Addr().String()
	l.Close()
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, storage, addr)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(Binary, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("docker-registry log:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr, storage
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry did not answer on %s within 15 s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BlobFile is where the registry's filesystem driver keeps the bytes of
// blob digest ("sha256:HEX"): tamper with it to test digest verification.
func BlobFile(storage, digest string) string {
	hex := digest[len("sha256:"):]
	return filepath.Join(storage, "docker/registry/v2/blobs/sha256", hex[:2], hex, "data")
}

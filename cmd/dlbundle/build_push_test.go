package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/image/registry/registrytest"
)

// build --push writes the image and then pushes it to a real registry
// (Debian's docker-registry): pulling the tag back gives the same bytes.
func TestBuildPushToRealRegistry(t *testing.T) {
	addr, _ := registrytest.StartDistribution(t)
	dir := t.TempDir()
	t.Chdir(dir)
	data := filepath.Join(dir, "app", "data.bin")
	if err := os.MkdirAll(filepath.Dir(data), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(data, bytes.Repeat([]byte("dlbundle "), 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	writeTestTrace(t, "dlbundle.trace", data)
	ref := "oci://" + addr + "/apps/pushed:v1"
	c := &BuildCmd{Output: "app.dlimg", Level: 3, Include: []string{filepath.Join(dir, "app")}, Push: ref}
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.Fetch(context.Background(), ref, "pulled.dlimg", registry.Options{}); err != nil {
		t.Fatalf("pull of what build --push pushed: %v", err)
	}
	built, _ := os.ReadFile("app.dlimg")
	pulled, _ := os.ReadFile("pulled.dlimg")
	if len(built) == 0 || !bytes.Equal(built, pulled) {
		t.Fatalf("pulled image (%d bytes) differs from the built one (%d bytes)", len(pulled), len(built))
	}
}

// A push that fails still leaves the built image and says how to retry.
func TestBuildPushFailureKeepsImage(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	data := filepath.Join(dir, "app", "data.bin")
	os.MkdirAll(filepath.Dir(data), 0o755)
	os.WriteFile(data, []byte("payload"), 0o644)
	writeTestTrace(t, "dlbundle.trace", data)
	// Port 1 on loopback: nothing listens, the connect is refused at once.
	c := &BuildCmd{Output: "app.dlimg", Level: 3, Include: []string{filepath.Join(dir, "app")}, Push: "127.0.0.1:1/apps/x:v1"}
	err := c.Run()
	if err == nil {
		t.Fatal("push to a closed port succeeded")
	}
	if !bytes.Contains([]byte(err.Error()), []byte("dlbundle push app.dlimg")) {
		t.Errorf("error does not say how to retry: %v", err)
	}
	if _, serr := os.Stat("app.dlimg"); serr != nil {
		t.Errorf("the built image is gone after a failed push: %v", serr)
	}
}

// inspect oci://REF reads the table of contents from the registry by range
// requests and shows the same summary as for the local file.
func TestInspectRegistryRef(t *testing.T) {
	addr, _ := registrytest.StartDistribution(t)
	dir := t.TempDir()
	t.Chdir(dir)
	data := filepath.Join(dir, "app", "data.bin")
	os.MkdirAll(filepath.Dir(data), 0o755)
	os.WriteFile(data, bytes.Repeat([]byte("x"), 5000), 0o644)
	writeTestTrace(t, "dlbundle.trace", data)
	ref := "oci://" + addr + "/apps/inspected:v1"
	if err := (&BuildCmd{Output: "app.dlimg", Level: 3, Include: []string{filepath.Join(dir, "app")}, Push: ref}).Run(); err != nil {
		t.Fatal(err)
	}
	local, remote := &InspectCmd{Image: "app.dlimg"}, &InspectCmd{Image: ref}
	lim, err := local.open()
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	rim, err := remote.open()
	if err != nil {
		t.Fatalf("inspect %s: %v", ref, err)
	}
	defer rim.Close()
	if lim.TOCDigest() != rim.TOCDigest() || len(lim.Entries()) != len(rim.Entries()) {
		t.Fatalf("registry TOC %s (%d entries) differs from the file's %s (%d entries)",
			rim.TOCDigest(), len(rim.Entries()), lim.TOCDigest(), len(lim.Entries()))
	}
	if _, ok := rim.Lookup(data); !ok {
		t.Errorf("%s not found in the TOC read from the registry", data)
	}
}

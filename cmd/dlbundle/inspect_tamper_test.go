package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/image/registry/registrytest"
)

// inspect oci:// of an image whose table of contents was tampered with in the
// registry says so; it used to say that the registry does not serve byte
// ranges. The registry is Debian's docker-registry.
func TestInspectRegistryTamperedTOC(t *testing.T) {
	addr, storage := registrytest.StartDistribution(t)
	dir := t.TempDir()
	t.Chdir(dir)
	data := filepath.Join(dir, "app", "data.bin")
	os.MkdirAll(filepath.Dir(data), 0o755)
	os.WriteFile(data, bytes.Repeat([]byte("x"), 5000), 0o644)
	writeTestTrace(t, "dlbundle.trace", data)
	ref := "oci://" + addr + "/apps/tampered:v1"
	if err := (&BuildCmd{Output: "app.dlimg", Level: 3, Include: []string{filepath.Join(dir, "app")}, Push: ref}).Run(); err != nil {
		t.Fatal(err)
	}
	info, err := registry.Inspect(context.Background(), ref, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := registrytest.BlobFile(storage, info.ImageDigest)
	blob, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	blob[len(blob)-72-10] ^= 0x40 // a byte of the compressed TOC: its digest no longer matches
	if err := os.WriteFile(p, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = (&InspectCmd{Image: ref}).open()
	if err == nil {
		t.Fatal("inspect of a tampered image succeeded")
	}
	if strings.Contains(err.Error(), "byte ranges") || !strings.Contains(err.Error(), "tampered") {
		t.Fatalf("inspect error %q: want it to say the image is corrupt or tampered with, not blame byte ranges", err)
	}
}

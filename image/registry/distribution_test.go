package registry

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/dlbundle/dlbundle/image/registry/registrytest"
)

// blobFile is where distribution keeps a blob's bytes; it fails the test,
// listing the storage, if the layout is not the expected one.
func blobFile(t *testing.T, storage, digest string) string {
	t.Helper()
	p := registrytest.BlobFile(storage, digest)
	if _, err := os.Stat(p); err != nil {
		var found []string
		filepath.WalkDir(storage, func(q string, d fs.DirEntry, err error) error {
			found = append(found, q)
			return nil
		})
		t.Fatalf("blob %s not at %s: %v; storage holds %v", digest, p, err, found)
	}
	return p
}

func TestDistributionRegistry(t *testing.T) {
	ctx := context.Background()
	addr, storage := registrytest.StartDistribution(t)
	file, want := writeImageFile(t, 2<<20+3)
	ref := "oci://" + addr + "/hpc/app:v1"

	d, err := Push(ctx, file, ref, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	// A second push of the same file is accepted and gives the same digest.
	if d2, err := Push(ctx, file, ref, testOptions()); err != nil || d2 != d {
		t.Fatalf("second push: %s, %v; want %s", d2, err, d)
	}

	t.Run("pull", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "app.dlimg")
		got, err := Fetch(ctx, ref, dst, testOptions())
		if err != nil {
			t.Fatal(err)
		}
		if got != d {
			t.Errorf("Fetch = %s, Push = %s", got, d)
		}
		b, _ := os.ReadFile(dst)
		if !bytes.Equal(b, want) {
			t.Error("pulled bytes differ from the pushed file")
		}
		if r, err := Resolve(ctx, ref, testOptions()); err != nil || r != d {
			t.Errorf("Resolve = %s, %v; want %s", r, err, d)
		}
	})

	t.Run("inspect and range reads", func(t *testing.T) {
		info, err := Inspect(ctx, ref, testOptions())
		if err != nil {
			t.Fatal(err)
		}
		if info.ManifestDigest != d || info.ImageSize != int64(len(want)) {
			t.Errorf("Inspect = %+v", info)
		}
		// distribution serves byte ranges: the TOC is read without the data.
		if info.Image == nil || len(info.Image.Entries()) == 0 {
			t.Errorf("Inspect did not read the TOC: %v", info.TOCError)
		}
		b, err := OpenBlob(ctx, ref, testOptions())
		if err != nil {
			t.Fatal(err)
		}
		tail := make([]byte, 72)
		if _, err := b.ReadAt(tail, b.Size()-72); err != nil || !bytes.Equal(tail, want[len(want)-72:]) {
			t.Errorf("range read of the tail: %v", err)
		}
	})

	t.Run("tampered blob", func(t *testing.T) {
		info, err := Inspect(ctx, ref, testOptions())
		if err != nil {
			t.Fatal(err)
		}
		p := blobFile(t, storage, info.ImageDigest)
		orig, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		bad := bytes.Clone(orig)
		bad[len(bad)/3] ^= 0x01
		if err := os.WriteFile(p, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(p, orig, 0o644)

		dir := t.TempDir()
		_, err = Fetch(ctx, ref, filepath.Join(dir, "app.dlimg"), testOptions())
		if !errors.Is(err, ErrDigestMismatch) {
			t.Fatalf("Fetch of a tampered blob = %v, want ErrDigestMismatch", err)
		}
		if names := dirNames(t, dir); len(names) != 0 {
			t.Errorf("failed Fetch left %v", names)
		}
	})

	t.Run("deleted tag", func(t *testing.T) {
		file2, _ := writeImageFile(t, 4096)
		ref2 := addr + "/hpc/app:old"
		d2, err := Push(ctx, file2, ref2, testOptions())
		if err != nil {
			t.Fatal(err)
		}
		dr, err := name.NewDigest(addr + "/hpc/app@" + d2)
		if err != nil {
			t.Fatal(err)
		}
		// distribution deletes a manifest by digest, and with it its tags.
		if err := remote.Delete(dr, remote.WithAuthFromKeychain(anonymous)); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if _, err := Fetch(ctx, ref2, filepath.Join(dir, "app.dlimg"), testOptions()); !errors.Is(err, ErrNotFound) {
			t.Errorf("Fetch of a deleted tag = %v, want ErrNotFound", err)
		}
		if _, err := Resolve(ctx, ref2, testOptions()); !errors.Is(err, ErrNotFound) {
			t.Errorf("Resolve of a deleted tag = %v, want ErrNotFound", err)
		}
		if names := dirNames(t, dir); len(names) != 0 {
			t.Errorf("failed Fetch left %v", names)
		}
		// The other tag is untouched.
		if r, err := Resolve(ctx, ref, testOptions()); err != nil || r != d {
			t.Errorf("Resolve(%s) after deleting another tag = %s, %v", ref, r, err)
		}
	})
}

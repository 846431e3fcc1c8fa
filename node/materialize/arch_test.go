package materialize

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/treeimage"
)

type archImage struct {
	Source
	arch string
}

func (a archImage) Arch() string { return a.arch }

// TestMaterializeRefusesForeignArch: an image whose objects are for another
// architecture is refused before anything is written, with a message that
// names both architectures and what to do; one for this architecture (as
// uname -m spells it, which is what image.Arch gives), or with no ELF objects
// ("any"), is staged.
func TestMaterializeRefusesForeignArch(t *testing.T) {
	other := map[string]string{"amd64": "aarch64", "arm64": "x86_64"}[runtime.GOARCH]
	same := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	if other == "" {
		t.Skip("no shim for this architecture")
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	imgPath := filepath.Join(dir, "app.dlimg")
	treeimage.Write(t, imgPath, treeimage.Entries(t, f))
	im, err := image.OpenFile(imgPath)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	for arch, ok := range map[string]bool{other: false, same: true, "any": true, "": true} {
		stage := filepath.Join(dir, "stage-"+arch)
		if err := os.Mkdir(stage, 0o700); err != nil {
			t.Fatal(err)
		}
		err := Materialize(context.Background(), archImage{im, arch}, stage, Options{})
		if ok != (err == nil) {
			t.Errorf("image for %q on %s: %v", arch, runtime.GOARCH, err)
		}
		if !ok {
			if err == nil || !strings.Contains(err.Error(), "image is for "+other+", this node is "+same) {
				t.Errorf("error %q does not name both architectures", err)
			}
			if names, _ := os.ReadDir(stage); len(names) != 0 {
				t.Errorf("refused, but wrote %d names into the stage", len(names))
			}
		}
	}
}

package loader

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/treeimage"
	"github.com/dlbundle/dlbundle/node/materialize"
)

// stageEntries writes an image of entries with the real writer, opens it with
// the real reader and materializes a stage, published under dir/stage.
func stageEntries(t testing.TB, dir string, entries []image.Entry) string {
	t.Helper()
	imgPath := filepath.Join(dir, "app.dlimg")
	treeimage.Write(t, imgPath, entries)
	im, err := image.OpenFile(imgPath)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	tmp, err := os.MkdirTemp(dir, "tmp.")
	if err != nil {
		t.Fatal(err)
	}
	if err := materialize.Materialize(context.Background(), im, tmp, materialize.Options{}); err != nil {
		t.Fatal(err)
	}
	final := filepath.Join(dir, "stage")
	if err := os.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
	return final
}

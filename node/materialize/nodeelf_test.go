package materialize

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/treeimage"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// TestMaterializeMarksNodeELFFromDecodedBytes: staging flags FlagELFNode
// from the bytes it decodes as it writes each file, not by opening the
// staged files again; the table it writes must be exactly the one that
// reading the staged files back (stagefmt.MarkNodeELF) gives: a real
// library flagged; a file the image calls ELF that is not, and an empty
// one, not flagged.
func TestMaterializeMarksNodeELFFromDecodedBytes(t *testing.T) {
	tree := filepath.Join(t.TempDir(), "app")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	libz, err := os.ReadFile("/usr/lib/x86_64-linux-gnu/libz.so.1")
	if err != nil {
		t.Skip("no libz to stage:", err)
	}
	for name, b := range map[string][]byte{"libz.so.1": libz, "fake.so": []byte("not ELF, whatever the image says\n"), "empty.so": nil} {
		if err := os.WriteFile(filepath.Join(tree, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	entries := treeimage.Entries(t, tree)
	for i := range entries {
		if filepath.Ext(entries[i].Path) == ".so" || filepath.Ext(entries[i].Path) == ".1" {
			entries[i].Kind = image.KindELFShared
		}
	}
	imgPath := filepath.Join(t.TempDir(), "app.dlimg")
	treeimage.Write(t, imgPath, entries)
	im, err := image.OpenFile(imgPath)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	stage := filepath.Join(t.TempDir(), "stage")
	if err := os.Mkdir(stage, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Materialize(context.Background(), im, stage, Options{}); err != nil {
		t.Fatal(err)
	}
	staged, err := os.ReadFile(filepath.Join(stage, stagefmt.TableFile))
	if err != nil {
		t.Fatal(err)
	}
	want, err := stagefmt.EncodeTable(im.Entries())
	if err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(tree, "libz.so.1")
	marks, err := stagefmt.MarkNodeELFIn(want, func(p string) bool { return p == lib })
	if err != nil || len(marks) != 1 {
		t.Fatalf("expected table: %d marks, %v", len(marks), err)
	}
	// Staging also writes the node's search rules into the room the table
	// keeps for them: write the same rules into the expected table.
	if rules := stagefmt.TableSearch(staged); rules != nil {
		wdir := t.TempDir()
		if err := os.WriteFile(filepath.Join(wdir, stagefmt.TableFile), want, 0o444); err != nil {
			t.Fatal(err)
		}
		if err := stagefmt.WriteSearch(wdir, rules); err != nil {
			t.Fatal(err)
		}
		if want, err = os.ReadFile(filepath.Join(wdir, stagefmt.TableFile)); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(staged, want) {
		t.Errorf("the staged table is not the encoded one with only %s flagged as this node's ELF", lib)
	}
	// Reading the staged files back flags nothing more.
	if err := stagefmt.MarkNodeELF(stage); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(filepath.Join(stage, stagefmt.TableFile))
	if !bytes.Equal(again, staged) {
		t.Errorf("stagefmt.MarkNodeELF found node ELF objects that staging did not flag")
	}
	if st, err := os.Stat(filepath.Join(stage, stagefmt.TableFile)); err != nil || st.Mode().Perm() != 0o444 {
		t.Errorf("table mode: %v %v, want 0444", st.Mode(), err)
	}
}

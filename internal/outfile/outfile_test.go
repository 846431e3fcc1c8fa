package outfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The temporary file build makes itself (Lustre striping) must be in the
// walked directory: one made elsewhere (a directory swapped meanwhile) is
// refused, and nothing is renamed.
func TestCreateWithRefusesTempOutsideWalkedDir(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	out := filepath.Join(dir, "app.dlimg")
	_, err := CreateWith(out, "image", "-o", func(_, pattern string) (*os.File, error) {
		return os.CreateTemp(elsewhere, pattern)
	})
	if err == nil || !strings.Contains(err.Error(), "changed while the file was created") {
		t.Fatalf("a temporary file outside the walked directory: %v; want a refusal", err)
	}
	if _, err := os.Lstat(out); err == nil {
		t.Error("the output was created")
	}
	// Made where it should be: written and renamed into place.
	f, err := CreateWith(out, "image", "-o", os.CreateTemp)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("image")
	if err := f.Commit(0o640); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "image" {
		t.Fatalf("after commit: %q, %v", b, err)
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want the one Commit was given", fi.Mode())
	}
}

// Umask reads the process's umask without changing it.
func TestUmask(t *testing.T) {
	old := unix.Umask(0o027)
	defer unix.Umask(old)
	if got := Umask(); got != 0o027 {
		t.Errorf("Umask() = %#o, want 027", got)
	}
	if got := Private(); got != 0o600&^0o027 {
		t.Errorf("Private() = %#o", got)
	}
	if got := Public(); got != 0o640 {
		t.Errorf("Public() = %#o, want 0640", got)
	}
}

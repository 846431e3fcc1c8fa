package trustpath

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenFileRefusesFIFO: a FIFO (or any non-regular file) is never opened,
// so a reader cannot be made to hang on one; a regular file is read.
func TestOpenFileRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "note")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := For(Shared).OpenFile(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("OpenFile(FIFO) = %v, want a refusal naming it not a regular file", err)
	}
	reg := filepath.Join(dir, "reg")
	if err := os.WriteFile(reg, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, n, err := For(Shared).OpenFile(reg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	if string(b) != "hello" || n.Uid != uint32(os.Geteuid()) {
		t.Fatalf("read %q uid %d", b, n.Uid)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(fifo, link)
	if _, _, err := For(Shared).OpenFile(link); err == nil {
		t.Fatalf("OpenFile(link to FIFO) succeeded")
	}
}

// TestEnterMakesAndHoldsDirectory: Enter makes a missing directory with the
// mode asked (less the umask) and holds it; an existing one is entered; a
// symbolic link or a file at the name is refused, not followed.
func TestEnterMakesAndHoldsDirectory(t *testing.T) {
	top := t.TempDir()
	d, err := For(Private).WalkDir(top)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	r, err := d.Enter(top+"/records", "records", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	if r.Path != filepath.Join(top, "records") || r.Node.Type() != unix.S_IFDIR || r.Node.Mode&0o777 != 0o700 {
		t.Fatalf("Enter made %s mode %#o", r.Path, r.Node.Mode)
	}
	if err := unix.Mkdirat(r.FD, "x", 0o700); err != nil {
		t.Fatalf("mkdirat in the held directory: %v", err)
	}
	r.Close()
	if r, err = d.Enter(top+"/records", "records", 0); err != nil {
		t.Fatalf("Enter of the existing directory: %v", err)
	}
	r.Close()
	os.Symlink(top+"/records", top+"/link")
	os.WriteFile(top+"/file", nil, 0o600)
	for _, c := range []string{"link", "file", "..", "a/b"} {
		if r, err := d.Enter(top+"/"+c, c, 0o700); err == nil {
			r.Close()
			t.Errorf("Enter(%q) succeeded", c)
		}
	}
	if _, err := os.Lstat(top + "/a"); err == nil {
		t.Errorf("Enter(a/b) made a")
	}
}

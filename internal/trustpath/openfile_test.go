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

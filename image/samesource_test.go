package image

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWriteRefusesSwappedSource: the writer copies what the build examined.
// A file swapped at its name after the scan (same size, same mtime: a size
// check alone passes) makes the write fail naming it; the file examined is
// written; a file changed in place (mtime) fails too. Sizes below and above
// the one-frame bound take both read paths.
func TestWriteRefusesSwappedSource(t *testing.T) {
	for _, size := range []int{100, maxFrameContent + 100} {
		dir := t.TempDir()
		src := filepath.Join(dir, "lib.so")
		content := strings.Repeat("a", size)
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		entryOf := func() Entry {
			var st unix.Stat_t
			if err := unix.Stat(src, &st); err != nil {
				t.Fatal(err)
			}
			return Entry{Path: "/opt/lib.so", Type: TypeRegular, Mode: 0o100644, Size: st.Size,
				MtimeNS: unix.TimespecToNsec(st.Mtim), Dev: st.Dev, Ino: st.Ino, SourcePath: src}
		}
		e := entryOf()
		if _, err := Write(io.Discard, []Entry{e}, WriteOptions{}); err != nil {
			t.Fatalf("size %d: the file examined: %v", size, err)
		}
		// The swap: a private file of the same size and mtime put at the name.
		secret := filepath.Join(dir, "secret")
		if err := os.WriteFile(secret, []byte(strings.Repeat("s", size)), 0o600); err != nil {
			t.Fatal(err)
		}
		mt := time.Unix(0, e.MtimeNS)
		os.Chtimes(secret, mt, mt)
		if err := os.Rename(secret, src); err != nil {
			t.Fatal(err)
		}
		_, err := Write(io.Discard, []Entry{e}, WriteOptions{})
		if err == nil || !strings.Contains(err.Error(), "replaced during the build") {
			t.Errorf("size %d: write after a same-size swap: %v, want a refusal naming the swap", size, err)
		}
		// Changed in place: same inode, new mtime.
		later := mt.Add(time.Second)
		os.Chtimes(src, later, later)
		e = entryOf()
		if _, err := Write(io.Discard, []Entry{e}, WriteOptions{}); err != nil {
			t.Fatalf("size %d: re-examined: %v", size, err)
		}
		e.MtimeNS = mt.UnixNano()
		if _, err := Write(io.Discard, []Entry{e}, WriteOptions{}); err == nil || !strings.Contains(err.Error(), "changed while the image was written") {
			t.Errorf("size %d: write of a file changed since the scan: %v", size, err)
		}
	}
}

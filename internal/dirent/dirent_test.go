package dirent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// A real getdents64 of a directory decodes to its names, "." and ".."
// included, with the types and inode numbers lstat gives.
func TestNextDecodesRealGetdents(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("f", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 4096)
	n, err := unix.Getdents(fd, buf)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for recs := buf[:n]; len(recs) > 0; {
		var rec Record
		if rec, recs, err = Next(recs); err != nil {
			t.Fatal(err)
		}
		name := string(rec.Name)
		names = append(names, name)
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, name), &st); err != nil {
			t.Fatal(err)
		}
		if rec.Ino != st.Ino {
			t.Errorf("%s: d_ino %d, lstat %d", name, rec.Ino, st.Ino)
		}
		want := map[string]uint8{"f": unix.DT_REG, "d": unix.DT_DIR, "l": unix.DT_LNK, ".": unix.DT_DIR, "..": unix.DT_DIR}[name]
		if rec.Type != want && rec.Type != unix.DT_UNKNOWN {
			t.Errorf("%s: d_type %d, want %d", name, rec.Type, want)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{".", "..", "d", "f", "l"}) {
		t.Errorf("names %q", names)
	}
	// Cut short, the last record is refused, not read past the buffer.
	last := buf[:n-1]
	for len(last) > 0 {
		if _, last, err = Next(last); err != nil {
			break
		}
	}
	if err == nil {
		t.Error("a buffer cut inside its last record decoded without an error")
	}
}

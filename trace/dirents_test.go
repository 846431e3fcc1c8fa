package trace

import (
	"encoding/binary"
	"reflect"
	"testing"
)

// dirent encodes one struct linux_dirent64 as the kernel does (8-byte aligned).
func dirent(name string, typ byte) []byte {
	n := 19 + len(name) + 1
	n = (n + 7) &^ 7
	b := make([]byte, n)
	binary.LittleEndian.PutUint64(b[0:], 1234)
	binary.LittleEndian.PutUint64(b[8:], 1)
	binary.LittleEndian.PutUint16(b[16:], uint16(n))
	b[18] = typ
	copy(b[19:], name)
	return b
}

func TestParseDirents(t *testing.T) {
	var buf []byte
	for _, d := range []struct {
		n string
		t byte
	}{{".", dtDir}, {"..", dtDir}, {"a.py", dtReg}, {"pkg", dtDir}, {"lnk", dtLnk}, {"fifo", 1}, {"x", 0}} {
		buf = append(buf, dirent(d.n, d.t)...)
	}
	got, err := parseDirents(buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []DirEntry{{"a.py", "reg"}, {"pkg", "dir"}, {"lnk", "symlink"}, {"fifo", "other"}, {"x", ""}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := parseDirents(buf[:len(buf)-3], nil); err == nil {
		t.Error("truncated buffer accepted")
	}
	bad := dirent("a", dtReg)
	binary.LittleEndian.PutUint16(bad[16:], 0)
	if _, err := parseDirents(bad, nil); err == nil {
		t.Error("zero record length accepted")
	}
}

// FuzzParseDirents: the buffer comes from another process; a bad one is an
// error, never a panic or a loop.
func FuzzParseDirents(f *testing.F) {
	f.Add(append(dirent("a", dtReg), dirent("bb", dtDir)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ents, err := parseDirents(b, nil)
		if err == nil && len(ents) > len(b)/20 {
			t.Fatalf("%d entries from %d bytes", len(ents), len(b))
		}
	})
}

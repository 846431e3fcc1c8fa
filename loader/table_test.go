package loader

import (
	"encoding/binary"
	"path"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
)

// FuzzTable: whatever clean paths go in, the encoded table finds each of
// them with its type (the same probe sequence as the C reader) and no other.
func FuzzTable(f *testing.F) {
	f.Add("/usr/lib/libc.so.6\n/usr/lib\n/lib", "/usr/lib/nope")
	f.Add("/a\n/a/b\n/a/b/c", "/a/c")
	f.Fuzz(func(t *testing.T, list, other string) {
		var es []image.Entry
		seen := map[string]bool{}
		for i, p := range strings.Split(list, "\n") {
			if p == "" || p[0] != '/' || path.Clean(p) != p || strings.IndexByte(p, 0) >= 0 || seen[p] {
				continue
			}
			seen[p] = true
			typ := []image.Type{image.TypeRegular, image.TypeMissing, image.TypeExternal}[i%3]
			es = append(es, image.Entry{Path: p, Type: typ})
		}
		tab, err := encodeTable(es)
		if err != nil {
			t.Fatal(err)
		}
		if n := tableSize(es); n != uint64(len(tab)) { // the bound Materialize checks first
			t.Fatalf("tableSize %d, encodeTable wrote %d bytes", n, len(tab))
		}
		want := map[image.Type]uint8{image.TypeRegular: tabReg, image.TypeMissing: tabMissing, image.TypeExternal: tabExternal}
		for _, e := range es {
			if typ, _, ok := tableLookup(tab, e.Path); !ok || typ != want[e.Type] {
				t.Fatalf("lookup %q = %d, %v; want %d", e.Path, typ, ok, want[e.Type])
			}
		}
		if _, _, ok := tableLookup(tab, other); ok && !seen[other] {
			t.Fatalf("lookup %q found an entry that was not written", other)
		}
	})
}

// TestTableRecordedAttributes: a directory's recorded size and every
// entry's recorded st_blocks go into the table (flag bit 1); an entry from an
// image that predates them gets the documented defaults (4096 bytes, no
// blocks flag: the shim derives them); a name known only from a listing
// carries the listing's d_ino.
func TestTableRecordedAttributes(t *testing.T) {
	es := []image.Entry{
		{Path: "/new", Type: image.TypeDir, DirSize: 36864, Blocks: 80, AtimeNS: 7,
			Listing: []image.DirEntry{{Name: "listed", Type: image.TypeRegular, Ino: 4242}}},
		{Path: "/old", Type: image.TypeDir},
		{Path: "/f", Type: image.TypeRegular, Size: 5, Blocks: 8},
	}
	tab, err := encodeTable(es)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	for _, c := range []struct {
		path        string
		size, atime int64
		flags       uint8
		blocks      uint32
		ino         uint64
	}{
		{"/new", 36864, 7, flagBlocks, 80, 0},
		{"/old", 4096, 0, 0, 0, 0},
		{"/f", 5, 0, flagBlocks, 8, 0},
		{"/new/listed", 0, 0, 0, 0, 4242},
	} {
		ent, ok := tableFind(tab, c.path)
		if !ok {
			t.Fatalf("%s not in the table", c.path)
		}
		if got := int64(le.Uint64(ent[48:])); got != c.size {
			t.Errorf("%s: size %d, want %d", c.path, got, c.size)
		}
		if got := int64(le.Uint64(ent[64:])); got != c.atime {
			t.Errorf("%s: atime_ns %d, want %d", c.path, got, c.atime)
		}
		if ent[25]&flagBlocks != c.flags || le.Uint32(ent[44:]) != c.blocks {
			t.Errorf("%s: flags %#x blocks %d, want %#x %d", c.path, ent[25], le.Uint32(ent[44:]), c.flags, c.blocks)
		}
		if got := le.Uint64(ent[88:]); got != c.ino {
			t.Errorf("%s: ino %d, want %d", c.path, got, c.ino)
		}
	}
}

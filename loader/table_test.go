package loader

import (
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

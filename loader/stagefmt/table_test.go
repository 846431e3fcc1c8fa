package stagefmt

import (
	"bytes"
	"encoding/binary"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
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
			typ := []image.Type{image.TypeRegular, image.TypeMissing, image.TypeExternal, image.TypeDir}[i%4]
			es = append(es, image.Entry{Path: p, Type: typ, Ino: uint64(i)})
		}
		// A directory lists the entries right below it in the order given
		// (not sorted), and a name of its own that is no entry.
		for i := range es {
			if es[i].Type != image.TypeDir {
				continue
			}
			for _, c := range es {
				if c.Path != es[i].Path && path.Dir(c.Path) == es[i].Path && len(path.Base(c.Path)) <= 255 {
					es[i].Listing = append(es[i].Listing, image.DirEntry{Name: path.Base(c.Path), Type: c.Type, Ino: c.Ino + 1000})
				}
			}
			if !seen[path.Join(es[i].Path, "zz-listed")] {
				es[i].Listing = append(es[i].Listing, image.DirEntry{Name: "zz-listed", Type: "other", Ino: 7})
			}
		}
		tab, err := EncodeTable(es)
		if err != nil {
			t.Fatal(err)
		}
		if n := TableSize(es); n != uint64(len(tab)) { // the bound the stager checks first
			t.Fatalf("tableSize %d, EncodeTable wrote %d bytes", n, len(tab))
		}
		want := map[image.Type]uint8{image.TypeRegular: TabReg, image.TypeMissing: TabMissing, image.TypeExternal: TabExternal, image.TypeDir: TabDir}
		for _, e := range es {
			if typ, _, ok := Lookup(tab, e.Path); !ok || typ != want[e.Type] {
				t.Fatalf("lookup %q = %d, %v; want %d", e.Path, typ, ok, want[e.Type])
			}
			if e.Type != image.TypeDir {
				continue
			}
			got, ok := Listing(tab, e.Path)
			wantList := []ListedName{{".", e.Ino, DTDir}, {"..", 0, DTDir}}
			if pe, ok := seen[path.Dir(e.Path)]; ok && pe {
				for _, x := range es {
					if x.Path == path.Dir(e.Path) {
						wantList[1].Ino = x.Ino
					}
				}
			}
			for _, d := range e.Listing {
				wantList = append(wantList, ListedName{d.Name, d.Ino, direntType(d.Type)})
			}
			if !ok || !slices.Equal(got, wantList) {
				t.Fatalf("listing of %q = %v, want %v", e.Path, got, wantList)
			}
		}
		if _, _, ok := Lookup(tab, other); ok && !seen[other] && path.Base(other) != "zz-listed" {
			t.Fatalf("lookup %q found an entry that was not written", other)
		}
	})
}

// TestTableListing: a directory's listing is served in the image's order
// (not sorted), "." and ".." first with the directory's and the recorded
// ".." inode, bundled and listed-only names with the listing's d_ino and
// type ("other" as DT_UNKNOWN); without a recorded ".." the parent's row
// gives it; the root's ".." is the root; "." and ".." where the build's read
// returned them when it says (ext4 returns them in hash order).
func TestTableListing(t *testing.T) {
	es := []image.Entry{
		{Path: "/", Type: image.TypeDir, Ino: 2, Listing: []image.DirEntry{{Name: "usr", Type: image.TypeDir, Ino: 11}, {Name: "etc", Type: image.TypeDir, Ino: 12}}},
		{Path: "/usr", Type: image.TypeDir, Ino: 11, DotDotIno: 99, Listing: []image.DirEntry{
			{Name: "zlib.so", Type: image.TypeRegular, Ino: 21}, {Name: "sock", Type: "other", Ino: 22},
			{Name: "bin", Type: image.TypeSymlink, Ino: 23}, {Name: "a", Type: image.TypeDir, Ino: 24}}},
		{Path: "/usr/zlib.so", Type: image.TypeRegular, Ino: 21},
		{Path: "/usr/a", Type: image.TypeDir, Ino: 24, Dots: []int{2, 0}, Listing: []image.DirEntry{
			{Name: "x", Type: image.TypeRegular, Ino: 31}, {Name: "y", Type: image.TypeRegular, Ino: 32}}},
	}
	tab, err := EncodeTable(es)
	if err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string][]ListedName{
		"/":      {{".", 2, DTDir}, {"..", 2, DTDir}, {"usr", 11, DTDir}, {"etc", 12, DTDir}},
		"/usr":   {{".", 11, DTDir}, {"..", 99, DTDir}, {"zlib.so", 21, DTReg}, {"sock", 22, DTUnknown}, {"bin", 23, DTLnk}, {"a", 24, DTDir}},
		"/usr/a": {{"..", 11, DTDir}, {"x", 31, DTReg}, {".", 24, DTDir}, {"y", 32, DTReg}},
	} {
		if got, ok := Listing(tab, dir); !ok || !slices.Equal(got, want) {
			t.Errorf("listing of %s = %v, want %v", dir, got, want)
		}
	}
	if _, ok := Listing(tab, "/usr/zlib.so"); ok {
		t.Error("a regular file has a listing")
	}
	for _, bad := range []string{"", ".", "..", "a/b", "nul\x00"} {
		es := []image.Entry{{Path: "/d", Type: image.TypeDir, Listing: []image.DirEntry{{Name: bad, Type: image.TypeRegular}}}}
		if _, err := EncodeTable(es); err == nil || !strings.Contains(err.Error(), "invalid name") {
			t.Errorf("listed name %q: %v, want an error naming the invalid name", bad, err)
		}
	}
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
	tab, err := EncodeTable(es)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path        string
		size, atime int64
		flags       uint8
		blocks      uint32
		ino         uint64
	}{
		{"/new", 36864, 7, FlagBlocks, 80, 0},
		{"/old", 4096, 0, 0, 0, 0},
		{"/f", 5, 0, FlagBlocks, 8, 0},
		{"/new/listed", 0, 0, 0, 0, 4242},
	} {
		ent, ok := Find(tab, c.path)
		if !ok {
			t.Fatalf("%s not in the table", c.path)
		}
		if got := ent.Size; got != c.size {
			t.Errorf("%s: size %d, want %d", c.path, got, c.size)
		}
		if got := ent.AtimeNS; got != c.atime {
			t.Errorf("%s: atime_ns %d, want %d", c.path, got, c.atime)
		}
		if ent.Flags&FlagBlocks != c.flags || ent.Blocks != c.blocks {
			t.Errorf("%s: flags %#x blocks %d, want %#x %d", c.path, ent.Flags, ent.Blocks, c.flags, c.blocks)
		}
		if got := ent.Ino; got != c.ino {
			t.Errorf("%s: ino %d, want %d", c.path, got, c.ino)
		}
	}
}

// TestMarkNodeELF: after extraction, staging flags (FlagELFNode) exactly the
// entries the image calls ELF whose staged copy is ELF of this node's class,
// byte order and machine (what audit.c's elf_ours would accept), and leaves
// the table read-only again. A real library of this machine is the 64-bit
// case; the others are made from it by changing the identification bytes.
func TestMarkNodeELF(t *testing.T) {
	if _, _, _, ok := nodeELF(); !ok {
		t.Skipf("no ELF identification for %s", runtime.GOARCH)
	}
	real, err := os.ReadFile("/proc/self/exe") // this test binary: ELF of this machine
	if err != nil {
		t.Fatal(err)
	}
	head := real[:64]
	class32 := bytes.Clone(head)
	class32[4] = 1 // ELFCLASS32
	machine := bytes.Clone(head)
	binary.LittleEndian.PutUint16(machine[18:], 3) // EM_386
	files := map[string]struct {
		kind    image.Kind
		content []byte
		want    bool
	}{
		"/l/libok.so":     {image.KindELFShared, head, true},
		"/l/app":          {image.KindELFExec, head, true},
		"/l/ext.so":       {image.KindPyExtension, head, true},
		"/l/lib32.so":     {image.KindELFShared, class32, false},
		"/l/libi386.so":   {image.KindELFShared, machine, false},
		"/l/short.so":     {image.KindELFShared, head[:19], false},
		"/l/script.so":    {image.KindELFShared, []byte("INPUT(libc.so.6)\n"), false},
		"/l/data-elf.bin": {image.KindData, head, false}, // not ELF by the image: the shim checks it
	}
	dir := t.TempDir()
	es := []image.Entry{{Path: "/l", Type: image.TypeDir}}
	for p, f := range files {
		es = append(es, image.Entry{Path: p, Type: image.TypeRegular, Kind: f.kind, Mode: 0o100644})
		if err := os.MkdirAll(filepath.Join(dir, RootDir, "l"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, RootDir, p), f.content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	es = append(es, image.Entry{Path: "/l/gone.so", Type: image.TypeRegular, Kind: image.KindELFShared}) // not extracted
	tab, err := EncodeTable(es)
	if err != nil {
		t.Fatal(err)
	}
	tpath := filepath.Join(dir, TableFile)
	if err := os.WriteFile(tpath, tab, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := MarkNodeELF(dir); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(tpath)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(tpath); err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("table mode after marking: %v %v, want 0444", fi.Mode(), err)
	}
	if len(got) != len(tab) {
		t.Fatalf("table changed size: %d -> %d", len(tab), len(got))
	}
	for p, f := range files {
		_, flags, ok := Lookup(got, p)
		if !ok {
			t.Fatalf("%s: not in the table", p)
		}
		if (flags&FlagELFNode != 0) != f.want {
			t.Errorf("%s: flags %#x, want the node-ELF flag %v", p, flags, f.want)
		}
		if isELF := f.kind != image.KindData; (flags&FlagELF != 0) != isELF {
			t.Errorf("%s: flags %#x, want the ELF-kind flag %v", p, flags, isELF)
		}
	}
	if _, flags, _ := Lookup(got, "/l/gone.so"); flags&FlagELFNode != 0 {
		t.Errorf("a file that was not extracted was marked")
	}
	// Nothing but flag bytes changed.
	diff := 0
	for i := range tab {
		if tab[i] != got[i] {
			diff++
			if tab[i]|FlagELFNode != got[i] {
				t.Fatalf("byte %d changed from %#x to %#x", i, tab[i], got[i])
			}
		}
	}
	if diff != 3 {
		t.Errorf("%d bytes changed, want 3 flag bytes", diff)
	}
}

// version2Find is version 2's reader as b8a1fe2 and the releases before it
// have it (stagefmt.Find then): uint32 buckets at hdr.Buckets, no check of
// the version. An older dlbundle on the node reads a newer stage's table
// with it.
func version2Find(tab []byte, p string) (EntryRec, bool) {
	var hdr tableHeaderRec
	var ent EntryRec
	hdr.get(tab)
	nb := hdr.NBuckets
	h := fnv1a64(p)
	for b := uint32(h) & (nb - 1); ; b = (b + 1) & (nb - 1) {
		idx := binary.LittleEndian.Uint32(tab[hdr.Buckets+4*uint64(b):])
		if idx == 0 {
			return ent, false
		}
		ent.get(tab[hdr.Entries+tableEntryLen*uint64(idx-1):][:tableEntryLen])
		if ent.Hash != h {
			continue
		}
		if string(tab[ent.Path:ent.Path+ent.PathLen]) == p {
			return ent, true
		}
	}
}

// TestTableReadByVersion2Readers: every row of a table this build writes
// (the image's entries and the names only a listing knows) is found, with
// its type, by version 2's reader, and a path the table lacks is not. A
// first draft of version 3 with 8-byte buckets made b8a1fe2's and fd3426b's
// exec stop with a panic (a slice out of range) on such a stage.
func TestTableReadByVersion2Readers(t *testing.T) {
	es := []image.Entry{
		{Path: "/", Type: image.TypeDir, Listing: []image.DirEntry{{Name: "usr", Type: image.TypeDir}, {Name: "tmp", Type: image.TypeDir}}},
		{Path: "/usr", Type: image.TypeDir, Listing: []image.DirEntry{{Name: "lib", Type: image.TypeDir}, {Name: "bin", Type: image.TypeDir}}},
		{Path: "/usr/lib", Type: image.TypeDir, Listing: []image.DirEntry{{Name: "libc.so.6", Type: image.TypeRegular}, {Name: "libz.so.1", Type: image.TypeSymlink}, {Name: "libm.so.6", Type: image.TypeRegular}}},
		{Path: "/usr/lib/libc.so.6", Type: image.TypeRegular, Kind: image.KindELFShared},
		{Path: "/usr/lib/libz.so.1", Type: image.TypeSymlink, Target: "libz.so.1.2.13"},
		{Path: "/usr/lib/libnone.so", Type: image.TypeMissing},
	}
	tab, err := EncodeTable(es)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint8{
		"/": TabDir, "/usr": TabDir, "/usr/lib": TabDir, "/usr/lib/libc.so.6": TabReg, "/usr/lib/libz.so.1": TabSymlink,
		"/usr/lib/libnone.so": TabMissing, "/tmp": TabExternal, "/usr/bin": TabExternal, "/usr/lib/libm.so.6": TabExternal,
	}
	for p, typ := range want {
		ent, ok := version2Find(tab, p)
		if !ok || ent.Type != typ {
			t.Errorf("version 2's reader: %s found %v, type %d; want type %d", p, ok, ent.Type, typ)
		}
		if now, ok := Find(tab, p); !ok || now != ent {
			t.Errorf("%s: Find and version 2's reader disagree", p)
		}
	}
	if _, ok := version2Find(tab, "/usr/lib/libq.so.1"); ok {
		t.Error("version 2's reader found a path the table lacks")
	}
}

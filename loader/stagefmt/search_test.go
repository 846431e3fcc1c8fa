package stagefmt

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dlbundle/dlbundle/image"
)

// The node's rules written into a table's room are found through its
// header, the table's own lookups and listings still answer, and a second
// write (or rules the shim would not read, or a table without the room) is
// refused and leaves the table as it was.
func TestWriteSearch(t *testing.T) {
	es := []image.Entry{
		{Path: "/", Type: image.TypeDir, Ino: 2, Listing: []image.DirEntry{{Name: "lib", Type: image.TypeDir, Ino: 11}}},
		{Path: "/lib", Type: image.TypeDir, Ino: 11, Listing: []image.DirEntry{{Name: "libc.so.6", Type: image.TypeRegular, Ino: 21}}},
		{Path: "/lib/libc.so.6", Type: image.TypeRegular, Ino: 21},
	}
	tab, err := EncodeTable(es)
	if err != nil {
		t.Fatal(err)
	}
	if TableSearch(tab) != nil {
		t.Fatal("a table fresh from EncodeTable holds search rules")
	}
	dir := t.TempDir()
	tpath := filepath.Join(dir, TableFile)
	if err := os.WriteFile(tpath, tab, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := WriteSearch(dir, []byte("not rules\n")); err == nil {
		t.Error("WriteSearch took rules the shim would not read")
	}
	rules, err := FormatSearchRules([]string{"glibc-hwcaps/x86-64-v3/", ""}, []string{"/lib", "/usr/lib"})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteSearch(dir, rules); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(tpath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(TableSearch(got), rules) {
		t.Errorf("the table's rules = %q, want %q", TableSearch(got), rules)
	}
	room := tableHeaderLen + len(rules) + 1
	if len(got) != len(tab) || !bytes.Equal(got[tableHeaderLen:room], append(slices.Clone(rules), 0)) || !bytes.Equal(got[room:], tab[room:]) {
		t.Error("the rules are not in the room after the header, with a NUL, the rest unchanged")
	}
	if st, err := os.Stat(tpath); err != nil || st.Mode().Perm() != 0o444 {
		t.Errorf("the table's mode after the append: %v %v, want 0444", st.Mode(), err)
	}
	if names, ok := Listing(got, "/lib"); !ok || len(names) != 3 {
		t.Errorf("the table's listing of /lib after the append: %v %v", names, ok)
	}
	if err := WriteSearch(dir, rules); err == nil {
		t.Error("a second WriteSearch was taken")
	}
	if again, _ := os.ReadFile(tpath); !bytes.Equal(again, got) {
		t.Error("a refused WriteSearch changed the table")
	}
	// A table without the room (its header names none): refused.
	var hdr tableHeaderRec
	hdr.get(tab)
	hdr.Search = 0
	hdr.put(tab)
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, TableFile), tab, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := WriteSearch(other, rules); err == nil {
		t.Error("WriteSearch wrote into a table without room for the rules")
	}
}

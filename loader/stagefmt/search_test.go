package stagefmt

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dlbundle/dlbundle/image"
)

// The node's rules appended to a table are found through its header, the
// table's own lookups and listings still answer, and a second append (or
// rules the shim would not read) is refused and leaves the table as it was.
func TestAppendSearch(t *testing.T) {
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
	if err := AppendSearch(dir, []byte("not rules\n")); err == nil {
		t.Error("AppendSearch took rules the shim would not read")
	}
	rules, err := FormatSearchRules([]string{"glibc-hwcaps/x86-64-v3/", ""}, []string{"/lib", "/usr/lib"})
	if err != nil {
		t.Fatal(err)
	}
	if err := AppendSearch(dir, rules); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(tpath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(TableSearch(got), rules) {
		t.Errorf("the table's rules = %q, want %q", TableSearch(got), rules)
	}
	if !bytes.Equal(got[len(tab):], append(slices.Clone(rules), 0)) || !bytes.Equal(got[tableHeaderLen:len(tab)], tab[tableHeaderLen:]) {
		t.Error("the rules are not appended after the table, with a NUL, the rest unchanged")
	}
	if st, err := os.Stat(tpath); err != nil || st.Mode().Perm() != 0o444 {
		t.Errorf("the table's mode after the append: %v %v, want 0444", st.Mode(), err)
	}
	if names, ok := Listing(got, "/lib"); !ok || len(names) != 3 {
		t.Errorf("the table's listing of /lib after the append: %v %v", names, ok)
	}
	if err := AppendSearch(dir, rules); err == nil {
		t.Error("a second AppendSearch was taken")
	}
	if again, _ := os.ReadFile(tpath); !bytes.Equal(again, got) {
		t.Error("a refused AppendSearch changed the table")
	}
}

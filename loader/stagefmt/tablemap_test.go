package stagefmt

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mappingsOf lists the lines of /proc/self/maps that map path.
func mappingsOf(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, " "+path) {
			out = append(out, l)
		}
	}
	return out
}

// The table is mapped once per file version: later calls share the mapping,
// a table replaced at the same path gets a new one, and the old one is
// unmapped when its last user releases it (not before: it is still read).
func TestMapStageTableReusesMapping(t *testing.T) {
	stage := t.TempDir()
	table := filepath.Join(stage, TableFile)
	v1 := bytes.Repeat([]byte("one "), 3000)
	if err := os.WriteFile(table, v1, 0o444); err != nil {
		t.Fatal(err)
	}
	a, releaseA, err := MapTable(stage)
	if err != nil {
		t.Fatal(err)
	}
	b, releaseB, err := MapTable(stage)
	if err != nil {
		t.Fatal(err)
	}
	if &a[0] != &b[0] || !bytes.Equal(b, v1) {
		t.Fatalf("second mapping of the same table is another one (or wrong): %p %p", &a[0], &b[0])
	}
	if n := len(mappingsOf(t, table)); n != 1 {
		t.Fatalf("%d mappings of %s, want 1", n, table)
	}
	releaseB()
	releaseB() // twice: harmless

	// Replaced like a restaged stage (a new file renamed over the path).
	v2 := bytes.Repeat([]byte("two "), 2000)
	tmp := table + ".new"
	if err := os.WriteFile(tmp, v2, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, table); err != nil {
		t.Fatal(err)
	}
	c, releaseC, err := MapTable(stage)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c, v2) {
		t.Fatalf("after the table was replaced, the mapping shows %q..., want the new table", c[:8])
	}
	if !bytes.Equal(a, v1) { // A still holds the old one: it must stay mapped
		t.Fatal("the old table changed under a user that had not released it")
	}
	if got := mappingsOf(t, table); len(got) != 2 {
		t.Fatalf("mappings of %s while the old one is in use: %q, want the old (deleted) and the new", table, got)
	}
	releaseA()
	if got := mappingsOf(t, table); len(got) != 1 || strings.Contains(got[0], "(deleted)") {
		t.Fatalf("mappings of %s after the old one's last release: %q, want only the new", table, got)
	}
	releaseC()
	if got := mappingsOf(t, table); len(got) != 1 {
		t.Fatalf("the current table is unmapped after its release: %q; it is kept for the next lookup", got)
	}

	// Another stage's table replaces it as the current one.
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, TableFile), v1, 0o444); err != nil {
		t.Fatal(err)
	}
	_, releaseD, err := MapTable(other)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseD()
	if got := mappingsOf(t, table); len(got) != 0 {
		t.Fatalf("%s still mapped after another table became the current one: %q", table, got)
	}

	// An empty table maps nothing and finds nothing.
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, TableFile), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	tab, release, err := MapTable(empty)
	if err != nil || tab != nil {
		t.Fatalf("empty table: %v, %d bytes", err, len(tab))
	}
	release()
}

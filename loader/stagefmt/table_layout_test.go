package stagefmt

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/binrec"
)

// The Go records of the table are the C structs the shim reads: gcc
// compiles loader/shim/table.h into a program that prints offsetof and the
// size of every field the Go struct's tags name (a field the C struct lacks
// is a compile error), and each must be where the Go struct has it. With
// equal struct sizes and no padding on the Go side (binrec.CheckLayout),
// the Go fields cover every byte of the C struct.
func TestTableRecordsMatchTableH(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatal("gcc is needed to compile loader/shim/table.h: run make deps")
	}
	recs := []struct {
		c   string
		gov any
	}{
		{"dlb_header", tableHeaderRec{}},
		{"dlb_entry", EntryRec{}},
		{"dlb_record", tableListRec{}},
	}
	var prog strings.Builder
	prog.WriteString("#include <stddef.h>\n#include <stdio.h>\n#include \"table.h\"\nint main(void)\n{\n")
	var want []string
	for _, r := range recs {
		ty := reflect.TypeOf(r.gov)
		fmt.Fprintf(&prog, "\tprintf(\"%s %%zu\\n\", sizeof(struct %s));\n", r.c, r.c)
		want = append(want, fmt.Sprintf("%s %d", r.c, ty.Size()))
		for i := 0; i < ty.NumField(); i++ {
			f := ty.Field(i)
			cf := f.Tag.Get("c")
			if cf == "" {
				t.Fatalf("%s.%s has no c tag naming its field of struct %s", ty.Name(), f.Name, r.c)
			}
			fmt.Fprintf(&prog, "\tprintf(\"%s.%s %%zu %%zu\\n\", offsetof(struct %s, %s), sizeof(((struct %s *)0)->%s));\n",
				r.c, cf, r.c, cf, r.c, cf)
			want = append(want, fmt.Sprintf("%s.%s %d %d", r.c, cf, f.Offset, f.Type.Size()))
		}
	}
	prog.WriteString("\treturn 0;\n}\n")
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "layout.c"), filepath.Join(dir, "layout")
	if err := os.WriteFile(src, []byte(prog.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-std=gnu11", "-Wall", "-I../shim", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc could not compile the layout probe against loader/shim/table.h (a field named in a Go tag is missing?): %v\n%s\n%s", err, out, prog.String())
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != len(want) {
		t.Fatalf("layout probe printed %d lines, want %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("C says %q (name offset size), Go says %q", got[i], want[i])
		}
	}

	// put and get move each field where the struct has it.
	for seed := uint64(1); seed <= 3; seed++ {
		var h tableHeaderRec
		binrec.Fill(&h, seed)
		if err := binrec.CheckLayout(h, tableHeaderLen, (*tableHeaderRec).put, (*tableHeaderRec).get); err != nil {
			t.Error(err)
		}
		var e EntryRec
		binrec.Fill(&e, seed)
		if err := binrec.CheckLayout(e, tableEntryLen, (*EntryRec).put, (*EntryRec).get); err != nil {
			t.Error(err)
		}
		var l tableListRec
		binrec.Fill(&l, seed)
		if err := binrec.CheckLayout(l, tableRecordLen, (*tableListRec).put, (*tableListRec).get); err != nil {
			t.Error(err)
		}
	}
}

package loader

import (
	"debug/elf"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
)

// TestShimExportsAreTheTable: the preload objects export exactly the entry
// points listed in the one table of intercepted functions (shim/intercept.h,
// SHIM_FUNCS and SHIM_OWN), and nothing else. An entry point defined in a
// .c file but missing from the table, or a helper that lost its hidden
// visibility (shim_state.h; report.h's functions are helpers too), would be
// interposed on every app without anyone having decided it: an exported
// report_init would replace an app library's own.
func TestShimExportsAreTheTable(t *testing.T) {
	want := map[string]bool{}
	table, err := os.ReadFile(filepath.Join("shim", "intercept.h"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*X\((\w+),`).FindAllSubmatch(table, -1) {
		want[string(m[1])] = true
	}
	if len(want) < 100 {
		t.Fatalf("read %d entries from shim/intercept.h, want its whole table (is the X(name, ret, args) form changed?)", len(want))
	}
	// The one exported variable: audit.so writes the address of the table it
	// mapped there (shim/table.h, DLB_SHARE_SLOT).
	want["dlb_share_slot"] = true
	report, err := os.ReadFile(filepath.Join("shim", "report.h"))
	if err != nil {
		t.Fatal(err)
	}
	helpers := map[string]bool{} // report.h's: must not be exported
	for _, m := range regexp.MustCompile(`(?m)^[a-z][\w ]*?\**(\w+)\(`).FindAllSubmatch(report, -1) {
		helpers[string(m[1])] = true
	}
	if len(helpers) == 0 {
		t.Fatal("read no function from shim/report.h")
	}
	for _, arch := range []string{"amd64", "arm64"} {
		for _, obj := range []string{"preload.so", "preload-2.34.so"} {
			f, err := elf.Open(filepath.Join("shim", arch, obj))
			if err != nil {
				t.Fatal(err)
			}
			syms, err := f.DynamicSymbols()
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, s := range syms {
				if s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) != elf.STB_LOCAL {
					got[s.Name] = true
				}
			}
			var extra, missing []string
			for n := range got {
				if !want[n] {
					extra = append(extra, n)
				}
				if helpers[n] {
					t.Errorf("shim/%s/%s exports report.h's %s: an app library's function of that name would be replaced", arch, obj, n)
				}
			}
			for n := range want {
				if !got[n] {
					missing = append(missing, n)
				}
			}
			sort.Strings(extra)
			sort.Strings(missing)
			if len(extra) > 0 {
				t.Errorf("shim/%s/%s exports %v, which shim/intercept.h's table does not list: add the entry point to the table, or declare a helper in shim_state.h (hidden)", arch, obj, extra)
			}
			if len(missing) > 0 {
				t.Errorf("shim/%s/%s does not export %v, which shim/intercept.h lists: define it, or drop the line (and rebuild: make shim)", arch, obj, missing)
			}
		}
	}
}

package squash

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/trace"
)

// TestReportedOnlyLargeStaysExternal: a file larger than
// ReportedOnlyMaxSize that only reports name (records another user may have
// planted named a 3.9 GiB sparse file) is left external with a warning
// naming it and --include; an --include that covers it bundles it. Sizes of
// ordinary libraries the reports name are bundled as before.
func TestReportedOnlyLargeStaysExternal(t *testing.T) {
	// Not under /tmp: build leaves temporary directories out by its own rule.
	dir, err := os.MkdirTemp(".", ".reportedlarge-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if dir, err = filepath.Abs(dir); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.dat")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(ReportedOnlyMaxSize + 1) // sparse: no space used
	f.Close()
	small := filepath.Join(dir, "lib.so")
	os.WriteFile(small, []byte("lib"), 0o644)
	lacks := []Lack{{Path: big}, {Path: small, Library: true}}

	var warnings []string
	plan, err := Build([]*trace.Trace{FromLacks(lacks, "run.report", 1)}, Options{Warn: func(s string) { warnings = append(warnings, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if e := entry(plan, big); e == nil || e.Type != image.TypeExternal {
		t.Errorf("%s named only by reports: %+v, want external", big, e)
	}
	if e := entry(plan, small); e == nil || e.Type != image.TypeRegular {
		t.Errorf("%s named by reports: %+v, want bundled", small, e)
	}
	if !strings.Contains(strings.Join(warnings, "\n"), big+" ("+"268435457 bytes) is named only by reports") {
		t.Errorf("no warning naming %s: %q", big, warnings)
	}
	plan, err = Build([]*trace.Trace{FromLacks(lacks, "run.report", 1)}, Options{Include: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	if e := entry(plan, big); e == nil || e.Type != image.TypeRegular {
		t.Errorf("%s with --include %s: %+v, want bundled", big, dir, e)
	}
}

package squash

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/trace"
)

// An image's entries plus what a run's reports name: the files the reports
// name are bundled (also a large one the pilot only stat'd), a directory is
// listed, a missing name is kept missing, an output the run wrote after the
// image is left out, and per-run temporary names are counted apart, never
// advised as --include.
func TestFoldImageAndLacks(t *testing.T) {
	root := t.TempDir()
	big := string(make([]byte, StatOnlyMaxSize+1))
	tree(t, root, map[string]string{
		"app/lib/a.so": "a", "app/lib/b.so": "b", "app/data/big.dat": big, "app/share/x/y.txt": "y", "app/out/old.txt": "o",
	})
	p := newPilot(t)
	p.read(filepath.Join(root, "app/lib/a.so"))
	st := filepath.Join(root, "app/data/big.dat")
	p.ev(trace.Event{Op: trace.OpStat, Syscall: "newfstatat", Path: st})
	first := build(t, root, Options{}, p.done())
	if e := entry(first, st); e == nil || e.Type != image.TypeExternal {
		t.Fatalf("big.dat only stat'd by the pilot: %+v, want external", e)
	}
	since := time.Now().UnixNano()
	time.Sleep(10 * time.Millisecond)
	out := filepath.Join(root, "app/out/new.txt") // written by the run, after the image
	if err := os.WriteFile(out, []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	perRun := "/tmp/ompi.node1.0/jf.0/1/shared_mem"
	lacks := []Lack{
		{Path: filepath.Join(root, "app/lib/b.so"), Library: true},
		{Path: st},
		{Path: filepath.Join(root, "app/share/x")},
		{Path: filepath.Join(root, "app/share/x/nope.txt")},
		{Path: out},
		{Path: perRun},
		{Path: "relative/name"},
	}
	folded, err := Build(
		[]*trace.Trace{FromImage(first.Entries, "first.dlimg"), FromLacks(lacks, "run.report", int64(len(first.Entries)))},
		Options{Include: []string{root}, Since: since})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		want image.Type
	}{
		{filepath.Join(root, "app/lib/a.so"), image.TypeRegular},
		{filepath.Join(root, "app/lib/b.so"), image.TypeRegular},
		{st, image.TypeRegular},
		{filepath.Join(root, "app/share/x"), image.TypeDir},
		{filepath.Join(root, "app/share/x/nope.txt"), image.TypeMissing},
	} {
		if e := entry(folded, c.path); e == nil || e.Type != c.want {
			t.Errorf("%s: %+v, want %s", c.path, e, c.want)
		}
	}
	if e := entry(folded, out); e != nil {
		t.Errorf("the run's output %s is in the image: %+v", out, e)
	}
	if folded.Report.Skipped[ReasonNewer] != 1 || len(folded.Report.Newer) != 1 {
		t.Errorf("newer %v %v, want the output counted", folded.Report.Skipped, folded.Report.Newer)
	}
	if folded.Report.Skipped[ReasonPerRun] != 1 || len(folded.Report.SkippedPrefixes(ReasonTempDir)) != 0 {
		t.Errorf("per-run name: skipped %v, prefixes %v", folded.Report.Skipped, folded.Report.SkippedPrefixes(ReasonTempDir))
	}
	if len(folded.Pilots) != 0 {
		t.Errorf("made-up traces recorded as pilots: %s", folded.Pilots)
	}
	// the image's load order first, what the reports add after
	if a, b := entry(folded, filepath.Join(root, "app/lib/a.so")), entry(folded, filepath.Join(root, "app/lib/b.so")); a.Order > b.Order {
		t.Errorf("a.so (image) at %d after b.so (report) at %d", a.Order, b.Order)
	}
}

func entry(p *Plan, path string) *image.Entry {
	for i := range p.Entries {
		if p.Entries[i].Path == path {
			return &p.Entries[i]
		}
	}
	return nil
}

package loader

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/treeimage"
	"github.com/dlbundle/dlbundle/report"
	"github.com/dlbundle/dlbundle/squash"
)

// TestReportFromShim: real processes under the shim append their lines to
// one report file; the summary lists the path the image lacked.
func TestReportFromShim(t *testing.T) {
	root := t.TempDir()
	tree := filepath.Join(root, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "etc", "conf"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A directory next to the tree: listed in its parent (which the image
	// holds as an ancestor), not bundled itself, so lookups below it pass
	// through. The file in it is created after the build: the image lacks it.
	if err := os.Mkdir(filepath.Join(root, "outside"), 0o755); err != nil {
		t.Fatal(err)
	}
	stage := stageEntries(t, root, treeimage.Entries(t, tree))
	outside := filepath.Join(root, "outside", "later.txt")
	if err := os.WriteFile(outside, []byte("y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reportFile := filepath.Join(root, "report.jsonl")
	env := ShimEnv(stage, []string{"PATH=/usr/bin:/bin"}, EnvOptions{Report: reportFile})
	for i := 0; i < 3; i++ {
		cmd := exec.Command("/bin/cat", filepath.Join(tree, "etc", "conf"), outside)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil || string(out) != "x\ny\n" {
			t.Fatalf("cat under the shim: %v %q", err, out)
		}
	}
	// dash ends with _exit (no destructors): it must report all the same.
	dash := exec.Command("/bin/dash", "-c", "test -e "+filepath.Join(tree, "etc", "conf"))
	dash.Env = env
	if out, err := dash.CombinedOutput(); err != nil {
		t.Fatalf("dash under the shim: %v %q", err, out)
	}
	f, err := os.Open(reportFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rs, bad, err := report.ReadReports(f)
	if err != nil || bad != 0 || len(rs) != 4 {
		t.Fatalf("ReadReports: %d reports, %d bad, %v; want 4 (3 cat, 1 dash), 0", len(rs), bad, err)
	}
	if last := rs[3]; !strings.HasSuffix(last.Exe, "dash") || last.Answered == 0 {
		t.Errorf("dash's report = %+v; want its own line with the answered stat", last)
	}
	rs = rs[:3]
	// The tree is under the test's temporary directory: summarise as for an
	// image built with --include of it (by default, /tmp is build's policy).
	rules, err := squash.NewRules([]string{root}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := report.SummarizeWithRules(rs, rules)
	if s.Answered < 3 {
		t.Errorf("answered %d, want >= 3 (one open of etc/conf per process)", s.Answered)
	}
	found := false
	for _, p := range s.Lacked {
		if p.Path == outside {
			found = p.Processes == 3
		}
		if strings.HasPrefix(p.Path, tree) {
			t.Errorf("bundled path %s reported as lacked", p.Path)
		}
	}
	if !found {
		t.Errorf("summary lacks %s taken by 3 processes: %+v", outside, s.Lacked)
	}
	var buf bytes.Buffer
	if err := s.WriteText(&buf, 0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), outside) || !strings.Contains(buf.String(), "dlbundle build -o app.dlimg --from app.dlimg RUN.report") {
		t.Errorf("summary text does not name the path and the build --from that folds it in:\n%s", buf.String())
	}
}

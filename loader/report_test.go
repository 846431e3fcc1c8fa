package loader

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
	stage := stageEntries(t, root, treeEntries(t, tree))
	outside := filepath.Join(root, "outside", "later.txt")
	if err := os.WriteFile(outside, []byte("y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(root, "report.jsonl")
	env := ShimEnv(stage, []string{"PATH=/usr/bin:/bin"}, EnvOptions{Report: report})
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
	f, err := os.Open(report)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rs, bad, err := ReadReports(f)
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
	s := SummarizeWithRules(rs, rules)
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

// Node-local paths by policy are listed apart, without advice to re-trace.
func TestSummaryNodeLocalApart(t *testing.T) {
	s := Summarize([]ProcessReport{
		{PID: 1, Passed: 3, PassedPaths: []string{"/etc/hosts", "/usr/lib/locale/C.utf8/LC_CTYPE", "/opt/app/lib/x.so"}},
		{PID: 2, Passed: 1, PassedPaths: []string{"/etc/hosts"}},
	})
	if len(s.Lacked) != 1 || s.Lacked[0].Path != "/opt/app/lib/x.so" {
		t.Errorf("lacked %+v, want only /opt/app/lib/x.so", s.Lacked)
	}
	if len(s.NodeLocal) != 2 || s.NodeLocal[0] != (PathCount{"/etc/hosts", 2}) {
		t.Errorf("node-local %+v, want /etc/hosts (2 processes) first, then the locale file", s.NodeLocal)
	}
	var buf bytes.Buffer
	if err := s.WriteText(&buf, 0); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	nl := strings.Index(text, "node-local paths passed through by policy")
	lacks := strings.Index(text, "paths the image lacks")
	if nl < 0 || lacks < 0 || !strings.Contains(text[nl:lacks], "/etc/hosts") || strings.Contains(text[lacks:], "/etc/hosts") {
		t.Errorf("node-local paths not listed apart from the lacked ones:\n%s", text)
	}
	only := Summarize([]ProcessReport{{PID: 1, Passed: 1, PassedPaths: []string{"/etc/hosts"}}})
	buf.Reset()
	if err := only.WriteText(&buf, 0); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "dlbundle trace") {
		t.Errorf("node-local paths alone got advice to re-trace:\n%s", buf.String())
	}
}

func FuzzReadReports(f *testing.F) {
	f.Add([]byte(`{"pid":1,"exe":"/bin/x","answered":3,"missing":1,"passed":2,"passed_paths":["/a","/proc/self/fd"],"dropped":0}` + "\n"))
	f.Add([]byte("not json\n{\"pid\":0}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, _, _ := ReadReports(bytes.NewReader(b))
		s := Summarize(rs)
		if s.Processes != len(rs) {
			t.Fatalf("processes %d != reports %d", s.Processes, len(rs))
		}
		var buf bytes.Buffer
		if err := s.WriteText(&buf, 3); err != nil {
			t.Fatal(err)
		}
	})
}

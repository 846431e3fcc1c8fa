package loader

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/report"
)

// TestReportNamesBundledDirectoryOpens: an open of a bundled directory as a
// descriptor (fontconfig opens each font directory O_RDONLY to ask fstatfs
// whether it is on NFS; others open with O_DIRECTORY) goes to the original
// tree: the shim serves listings through opendir, not directory
// descriptors. Each such open is in the process's record, by directory
// (reason dir-open), as many as strace sees on the original tree; the
// listing opendir served is not; and the report explains it without
// listing them as lacked (the image holds the directories already). Before, these
// opens passed through counted as answered from the stage, named nowhere.
func TestReportNamesBundledDirectoryOpens(t *testing.T) {
	root, tree, stage := writesTree(t, map[string]string{"d/a.txt": "a\n", "d/sub/x": "x\n"})
	base := []string{"PATH=/usr/bin:/bin", "HOME=/", "LANG=C.UTF-8"}
	reportFile := filepath.Join(root, "report.jsonl")
	code := `import os, sys
t = sys.argv[1]
for d in ('d', 'd/sub', 'd'):
    fd = os.open(t + '/' + d, os.O_RDONLY)
    os.fstatvfs(fd)
    os.close(fd)
fd = os.open(t + '/d/sub', os.O_RDONLY | os.O_DIRECTORY)
os.close(fd)
print(sorted(os.listdir(t + '/d')))
`
	argv := []string{"/usr/bin/python3", "-I", "-B", "-c", code, tree}
	out, calls := straceTree(t, ShimEnv(stage, base, EnvOptions{Report: reportFile}), nil, tree, nil, argv...)
	if !strings.Contains(out, "['a.txt', 'sub']") {
		t.Fatalf("the probe printed %q", out)
	}
	opens := map[string]int{}
	for _, c := range calls {
		if strings.Contains(c, "open") && !strings.Contains(c, "= -1") {
			for _, d := range []string{tree + "/d/sub", tree + "/d"} {
				if strings.Contains(c, `"`+d+`"`) {
					opens[d]++
					break
				}
			}
		} else {
			t.Errorf("a call on the original tree other than the directory opens: %s", c)
		}
	}
	if opens[tree+"/d"] != 2 || opens[tree+"/d/sub"] != 2 {
		t.Fatalf("strace saw opens %v of the original directories; want 2 of each (the check cannot work otherwise)\n%s", opens, strings.Join(calls, "\n"))
	}
	f, err := os.Open(reportFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	all, bad, err := report.ReadReports(f)
	// strace runs with the shim's environment too: its own line is not
	// the probe's.
	var rs []report.ProcessReport
	for _, r := range all {
		if strings.Contains(r.Exe, "python3") {
			rs = append(rs, r)
		}
	}
	if err != nil || bad != 0 || len(rs) != 1 {
		t.Fatalf("report: %d lines of python3 (%d in all), %d bad, %v", len(rs), len(all), bad, err)
	}
	got := map[string]int64{}
	for _, fb := range rs[0].Fallbacks {
		if fb.Reason == "dir-open" {
			got[fb.Dir] += fb.Lookups
		}
	}
	for d, n := range opens {
		if got[d] != int64(n) {
			t.Errorf("the record names %d opens of %s (dir-open); strace saw %d on the original tree (record: %+v)", got[d], d, n, rs[0].Fallbacks)
		}
	}
	for _, p := range rs[0].PassedPaths {
		if strings.HasPrefix(p, tree) {
			t.Errorf("%s listed as a path the image lacks; the image holds it", p)
		}
	}
	s := report.Summarize(rs)
	var text strings.Builder
	if err := s.WriteText(&text, 30); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "opened the bundled directory "+tree+"/d as a descriptor") {
		t.Errorf("the report does not explain the directory opens:\n%s", text.String())
	}
	for _, l := range s.Lacked {
		if strings.HasPrefix(l.Path, tree) {
			t.Errorf("the report advises folding %s in; the image holds it", l.Path)
		}
	}
	t.Logf("dlbundle report:\n%s", text.String())
}

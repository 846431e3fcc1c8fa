package trace

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// TestPredictionMatchesExitStops: stats and failing opens answered at entry
// (predict.go) give the same trace as following every call to its exit, for
// the edge cases of predict.c (dangling and looping symlinks, trailing
// slashes, invalid flags, a dirfd, a removed working directory, O_CREAT,
// O_TMPFILE, O_NOFOLLOW), for a Python import and for the library search of
// a dynamically linked program; and prediction stops when the app drops root.
func TestPredictionMatchesExitStops(t *testing.T) {
	exe := fixture(t, "predict")
	plug, _ := pluginFixture(t)
	home := t.TempDir()
	cases := []struct {
		name    string
		command func(dir string) []string
	}{
		{"predict.c", func(dir string) []string { return []string{exe, dir} }},
		{"python", func(string) []string { return pythonCommand(home, "import json, decimal, sqlite3") }},
		{"dlopen", func(string) []string { return []string{plug} }},
	}
	if os.Getuid() == 0 {
		cases = append(cases, struct {
			name    string
			command func(dir string) []string
		}{"drop root", func(dir string) []string { return []string{exe, dir, "drop"} }})
	} else {
		t.Log("not root: the case where the app drops root is not run")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got [2][]string
			for i, noPredict := range []bool{true, false} {
				dir := predictTree(t)
				tr, res := traceRunOpts(t, Options{Command: c.command(dir), NoPredict: noPredict})
				if res.Exit != 0 {
					t.Fatalf("exit %d:\n%s", res.Exit, dump(tr))
				}
				if noPredict && res.Predicted != 0 {
					t.Fatalf("NoPredict: %d calls predicted", res.Predicted)
				}
				if !noPredict && res.Predicted < 5 {
					t.Fatalf("only %d calls predicted: the fast path was not taken", res.Predicted)
				}
				got[i] = normalize(tr, dir)
			}
			if d := clitest.LineDiff(strings.Join(got[0], "\n"), strings.Join(got[1], "\n"), "exit stops", "predicted", 0); d != "" {
				t.Errorf("traces differ:\n%s", d)
			}
			if c.name == "drop root" {
				want := `"path":"DIR/private/f","err":"EACCES"`
				if !strings.Contains(strings.Join(got[1], "\n"), want) {
					t.Errorf("no %s after dropping root:\n%s", want, strings.Join(got[1], "\n"))
				}
			}
		})
	}
}

// predictTree makes the directory predict.c works in.
func predictTree(t *testing.T) string {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644)
	os.Symlink("nowhere", filepath.Join(dir, "dangling"))
	os.Symlink("loop", filepath.Join(dir, "loop"))
	os.Symlink(".", filepath.Join(dir, "dirlink"))
	os.Mkdir(filepath.Join(dir, "private"), 0o700)
	os.WriteFile(filepath.Join(dir, "private", "f"), nil, 0o644)
	os.Mkdir(filepath.Join(dir, "gone"), 0o755)
	mtime := time.Unix(1700000000, 0)
	os.Chtimes(filepath.Join(dir, "file"), mtime, mtime) // the same in both runs
	return dir
}

// normalize drops what differs between two runs of the same program: event
// times, process ids (numbered by first appearance), the run's directory.
func normalize(tr *Trace, dir string) []string {
	ids := map[int]int{}
	id := func(pid int) int {
		if _, ok := ids[pid]; !ok {
			ids[pid] = len(ids) + 1
		}
		return ids[pid]
	}
	var out []string
	for _, e := range tr.Events {
		e.T = 0
		e.PID = id(e.PID)
		if e.Op == OpSpawn && e.FD != nil {
			child := id(*e.FD)
			e.FD = &child
		}
		b, _ := json.Marshal(e)
		out = append(out, strings.ReplaceAll(string(b), dir, "DIR"))
	}
	return out
}

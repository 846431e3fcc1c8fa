package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// module writes a throw-away module with passing, failing and skipped tests
// and subtests, and a fuzz target, and returns its directory.
func module(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/m\n\ngo 1.26\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "m_test.go"), []byte(`package m

import "testing"

func TestPass(t *testing.T) {}
func TestFail(t *testing.T) { t.Log("the reason it failed") ; t.Fail() }
func TestSkip(t *testing.T) { t.Skip("not here") }
func TestSub(t *testing.T) {
	t.Run("a", func(t *testing.T) {})
	t.Run("b", func(t *testing.T) { t.Fatal("sub b broke") })
}
func FuzzLen(f *testing.F) {
	f.Add("x")
	f.Fuzz(func(t *testing.T, s string) { _ = len(s) })
}
`), 0o644)
	return dir
}

// goOut runs go in dir and returns its output followed by the status line
// the Makefile appends.
func goOut(t *testing.T, dir string, args ...string) string {
	return cmdOut(t, dir, "go", args...)
}

// cmdOut runs name in dir, as goOut.
func cmdOut(t *testing.T, dir, name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out) + "testsum-exit " + map[bool]string{true: "0", false: "1"}[code == 0] + "\n"
}

func TestCountsARealGoTestRun(t *testing.T) {
	dir := module(t)
	in := goOut(t, dir, "test", "-count=1", "-json", "-run", "Test", ".")
	var out bytes.Buffer
	var c counts
	goTest(strings.NewReader(in), &out, &c)
	// TestPass, TestSub/a pass; TestFail, TestSub/b and TestSub fail; TestSkip skips.
	if c.line() != "2 passed, 3 failed, 1 skipped" {
		t.Errorf("counts %q\n%s", c.line(), out.String())
	}
	for _, want := range []string{"the reason it failed", "sub b broke", "FAIL\texample.com/m"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "=== RUN") || strings.Contains(out.String(), "--- PASS") {
		t.Errorf("passing tests' lines printed:\n%s", out.String())
	}
}

func TestGoTestThatDoesNotBuildIsAFailure(t *testing.T) {
	dir := module(t)
	os.WriteFile(filepath.Join(dir, "broken_test.go"), []byte("package m\n\nfunc broken() { undefined() }\n"), 0o644)
	var out bytes.Buffer
	var c counts
	goTest(strings.NewReader(goOut(t, dir, "test", "-count=1", "-json", ".")), &out, &c)
	if c.Failed == 0 || !strings.Contains(out.String(), "undefined") {
		t.Errorf("counts %q\n%s", c.line(), out.String())
	}
}

func TestSaysWhetherFuzzRunsFuzzed(t *testing.T) {
	dir := module(t)
	// As make echoes the recipe line, then go's own output.
	// Through mk/gotest-fuzz.sh, as make test runs every fuzz target: Go
	// 1.26's coordinator can fail a run on its own -fuzztime deadline
	// (go.dev/issue/75804), and the script runs such a run once more.
	script, err := filepath.Abs("../../mk/gotest-fuzz.sh")
	if err != nil {
		t.Fatal(err)
	}
	in := "go test -run '^$' -fuzz '^FuzzLen$' -fuzztime 2s ./\n" +
		cmdOut(t, dir, "bash", script, "go", "test", "-run", "^$", "-fuzz", "^FuzzLen$", "-fuzztime", "2s", "./")
	// A run that never got past the seed corpus (go's lines when -fuzztime
	// ends during the baseline).
	in += "go test -run '^$' -fuzz '^FuzzSlow$' -fuzztime 1s ./slow/\n" +
		"fuzz: elapsed: 0s, gathering baseline coverage: 0/900 completed\n" +
		"fuzz: elapsed: 1s, gathering baseline coverage: 412/900 completed\n" +
		"PASS\nok  \texample.com/m/slow\t1.2s\ntestsum-exit 0\n"
	var out bytes.Buffer
	var c counts
	fuzz(strings.NewReader(in), &out, &c)
	o := out.String()
	if !strings.Contains(o, "fuzz FuzzLen ./: fuzzed ") || !strings.Contains(o, " execs, ") {
		t.Errorf("no fuzzed line for FuzzLen:\n%s", o)
	}
	if !strings.Contains(o, "fuzz FuzzSlow ./slow/: did NOT fuzz") {
		t.Errorf("no did-not-fuzz line for FuzzSlow:\n%s", o)
	}
	if c.line() != "1 passed, 0 failed, 1 skipped" {
		t.Errorf("counts %q\n%s", c.line(), o)
	}
}

// mk/gotest-fuzz.sh runs a fuzz target once more only when Go's fuzz
// coordinator failed it on its own deadline (go.dev/issue/75804) and wrote no
// input; every other failure is passed on. The "go" here is a script that
// plays each case, counting its runs.
func TestFuzzWrapperRetriesOnlyTheCoordinatorRace(t *testing.T) {
	wrapper, err := filepath.Abs("../../mk/gotest-fuzz.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, firstRun string
		wantStatus     int
		wantRuns       string
	}{
		{"race then pass", `echo '--- FAIL: FuzzX (10.2s)'; echo '    context deadline exceeded'; echo FAIL; exit 1`, 0, "2"},
		{"real crasher", `mkdir -p pkg/testdata/fuzz/FuzzX; echo x > pkg/testdata/fuzz/FuzzX/abc; echo '    context deadline exceeded'; echo 'Failing input written to testdata/fuzz/FuzzX/abc'; exit 1`, 1, "1"},
		{"other failure", `echo '--- FAIL: FuzzX'; echo '    fuzz_test.go:9: wrong'; exit 1`, 1, "1"},
		{"pass", `echo ok; exit 0`, 0, "1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			fakeGo := filepath.Join(dir, "go")
			script := "#!/bin/sh\nn=$(cat runs 2>/dev/null || echo 0); n=$((n+1)); echo $n > runs\n" +
				"if [ $n -eq 1 ]; then " + c.firstRun + "; fi\necho 'ok  example 10s'; exit 0\n"
			if err := os.WriteFile(fakeGo, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(wrapper, fakeGo, "test", "-run", "^$", "-fuzz", "^FuzzX$", "-fuzztime", "10s", "./pkg/")
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			status := 0
			if ee, ok := err.(*exec.ExitError); ok {
				status = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			runs, _ := os.ReadFile(filepath.Join(dir, "runs"))
			if status != c.wantStatus || strings.TrimSpace(string(runs)) != c.wantRuns {
				t.Fatalf("status %d after %s runs, want %d after %s; output:\n%s", status, runs, c.wantStatus, c.wantRuns, out)
			}
			if c.wantRuns == "2" && !strings.Contains(string(out), "go.dev/issue/75804") {
				t.Errorf("the retry is not said:\n%s", out)
			}
		})
	}
}

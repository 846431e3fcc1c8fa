package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/clitest"
)

// rankApp: every rank imports json; the ranks other than 0 also import
// decimal, which a 1-process pilot (rank 0's path) never takes.
const rankApp = `import os, json
if os.environ.get("OMPI_COMM_WORLD_RANK", "0") != "0":
    import decimal
    print("rank", os.environ["OMPI_COMM_WORLD_RANK"], decimal.Decimal("1.5") * 2)
else:
    print("rank 0", json.dumps([1]))
`

// decimalCalls matches the file calls on the decimal module's files, in an
// strace log: what the 1-rank pilot missed.
var decimalCalls = regexp.MustCompile(`(?m)^.*"/usr/lib/python3[.0-9]*/(__pycache__/)?(decimal|_pydecimal|numbers)[.c].*$`)

// A job at 2 ranks under Open MPI's mpirun whose rank 1 takes paths its
// 1-process pilot did not: the reports of one run are folded in with one
// `build --from`, and the next run of the same job makes no call on those
// paths (strace, the kernel's record, on every rank).
func TestBuildFromReportsFoldsWhatRanksLacked(t *testing.T) {
	for _, p := range []string{"/usr/bin/mpirun", "/usr/bin/strace", "/usr/bin/python3"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is needed (make deps)", p)
		}
	}
	cli := clitest.CLI(t)
	dir := t.TempDir()
	env := append(clitest.CleanEnv(dir), "OMPI_MCA_plm_rsh_agent=false")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	app := []string{"/usr/bin/python3", "-c", rankApp}
	mpirun := []string{"--allow-run-as-root", "--oversubscribe", "-np", "2"}
	run(cli, append([]string{"trace", "-q", "--"}, app...)...)
	run(cli, "build", "-o", "app.dlimg")

	// The job at 2 ranks, each under strace, with a report.
	job := func(tag string) []string {
		t.Helper()
		wrapper := filepath.Join(dir, "rank-"+tag+".sh")
		script := "#!/bin/sh\nexec strace -f -qq -e signal=none -e trace=%file -o \"" + dir + "/" + tag + ".$OMPI_COMM_WORLD_RANK\" \"$@\"\n"
		if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		args := append(append([]string{}, mpirun...), wrapper, cli, "exec", "--stage-dir", filepath.Join(dir, "stage"),
			"--report", filepath.Join(dir, tag+".report"), "app.dlimg", "--")
		out := run("mpirun", append(args, app...)...)
		if !strings.Contains(out, "rank 1 3.0") || !strings.Contains(out, "rank 0 [1]") {
			t.Fatalf("job %s printed:\n%s", tag, out)
		}
		var logs []string
		for _, r := range []string{"0", "1"} {
			b, err := os.ReadFile(filepath.Join(dir, tag+"."+r))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), "execve(") {
				t.Fatalf("strace log of rank %s holds no execve: not a log of the rank", r)
			}
			logs = append(logs, string(b))
		}
		return logs
	}
	before := job("before")
	if calls := decimalCalls.FindAllString(before[1], -1); len(calls) == 0 {
		t.Fatalf("rank 1 made no call on the decimal module before the fold: the test cannot tell anything\n%s", before[1])
	}
	out := run(cli, "build", "-o", "app.dlimg", "--from", "app.dlimg", "before.report")
	if !strings.Contains(out, "from image "+filepath.Join(dir, "app.dlimg")+" and 1 report file(s)") {
		t.Errorf("build --from summary does not name its inputs:\n%s", out)
	}
	after := job("after")
	for r, log := range after {
		if calls := decimalCalls.FindAllString(log, -1); len(calls) > 0 {
			t.Errorf("rank %d still made %d calls on paths the report named, e.g.\n%s", r, len(calls), strings.Join(calls[:min(len(calls), 5)], "\n"))
		}
	}
}

// Two pilots in one directory (other inputs): the second writes
// dlbundle.2.trace beside the first, and `build` with no trace named holds
// what either loaded.
func TestSecondPilotKeepsTheFirst(t *testing.T) {
	cli := clitest.CLI(t)
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Dir, cmd.Env = dir, clitest.CleanEnv(dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("dlbundle %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("trace", "-q", "--", "/usr/bin/python3", "-c", "import json")
	first, err := os.ReadFile(filepath.Join(dir, "dlbundle.trace"))
	if err != nil {
		t.Fatal(err)
	}
	run("trace", "-q", "--", "/usr/bin/python3", "-c", "import decimal")
	if again, err := os.ReadFile(filepath.Join(dir, "dlbundle.trace")); err != nil || string(again) != string(first) {
		t.Fatalf("the second pilot changed ./dlbundle.trace (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "dlbundle.2.trace")); err != nil {
		t.Fatalf("the second pilot wrote no ./dlbundle.2.trace: %v", err)
	}
	out := run("build", "-o", "app.dlimg")
	if !strings.Contains(out, "from 2 trace(s)") {
		t.Errorf("build did not use both pilots:\n%s", out)
	}
	im, err := image.OpenFile(filepath.Join(dir, "app.dlimg"))
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	for _, p := range []string{"/usr/lib/python3.11/json/__init__.py", "/usr/lib/python3.11/decimal.py"} {
		if e, ok := im.Lookup(p); !ok || e.Type != image.TypeRegular {
			t.Errorf("the image does not bundle %s (one pilot's file)", p)
		}
	}
}

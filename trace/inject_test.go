package trace

import (
	"strconv"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// TestInjectedFilterMatchesStub: the filter installed into the app at its
// first instruction (no stub, what dlbundle does) gives the same trace as
// the stub that installs it and execs the app, for the edge cases of
// predict.c, a Python import and a program that forks, execs and
// posix_spawns.
func TestInjectedFilterMatchesStub(t *testing.T) {
	exe := fixture(t, "predict")
	spawn := fixture(t, "spawn")
	home := t.TempDir()
	for name, command := range map[string]func(dir string) []string{
		"predict.c": func(dir string) []string { return []string{exe, dir} },
		"python":    func(string) []string { return pythonCommand(home, "import json, sqlite3") },
		"spawn":     func(dir string) []string { return []string{spawn, "fork", dir + "/file"} },
	} {
		t.Run(name, func(t *testing.T) {
			var got [2][]string
			for i, stub := range [][]string{testStub(), nil} {
				dir := predictTree(t)
				tr, res := traceRunOpts(t, Options{Command: command(dir), Stub: stub})
				if res.Exit != 0 {
					t.Fatalf("stub %v: exit %d:\n%s", stub, res.Exit, dump(tr))
				}
				got[i] = normalize(tr, dir)
			}
			if d := clitest.LineDiff(strings.Join(got[0], "\n"), strings.Join(got[1], "\n"), "stub", "injected", 0); d != "" {
				t.Errorf("traces differ:\n%s", d)
			}
			if len(got[1]) < 3 || !strings.Contains(got[1][0], `"op":"exec"`) {
				t.Errorf("the injected run's first record is not the app's exec:\n%s", strings.Join(got[1], "\n"))
			}
		})
	}
}

// TestInjectWithManyArguments: 100,000 arguments fill the
// stack the kernel maps at execve; the filter is written below it all the
// same, and the header keeps every argument.
func TestInjectWithManyArguments(t *testing.T) {
	command := []string{"/bin/true"}
	for i := range 100_000 {
		command = append(command, strconv.Itoa(i))
	}
	tr, res := traceRunOpts(t, Options{Command: command})
	if res.Exit != 0 {
		t.Fatalf("exit %d", res.Exit)
	}
	if len(tr.Header.Command) != len(command) || tr.Header.Command[len(command)-1] != "99999" {
		t.Errorf("header holds %d arguments, want %d", len(tr.Header.Command), len(command))
	}
	if e := mustFind(t, tr, OpExec, "/bin/true", ""); e.Syscall != "execve" {
		t.Errorf("exec record %+v", e)
	}
}

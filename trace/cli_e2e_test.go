package trace

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// TestDlbundleBinary runs the real `dlbundle trace` (built from cmd/dlbundle
// as the Makefile does): the verb, the hidden stub verb with arguments that
// look like flags, exit statuses through kong, and --help.
func TestDlbundleBinary(t *testing.T) {
	dir := t.TempDir()
	bin := clitest.CLI(t)
	run := func(args ...string) (int, string, string) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		var so, se strings.Builder
		cmd.Stdout, cmd.Stderr = &so, &se
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), so.String(), se.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, so.String(), se.String()
	}

	code, out, errOut := run("trace", "--", "/bin/echo", "-n", "--help", "-o")
	if code != 0 || out != "--help -o" {
		t.Fatalf("echo under trace: exit %d, stdout %q, stderr %s", code, out, errOut)
	}
	if !strings.Contains(errOut, "wrote dlbundle.trace") || !strings.Contains(errOut, "top directories") {
		t.Errorf("summary missing: %s", errOut)
	}
	f, err := os.Open(filepath.Join(dir, DefaultOutput))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Read(f, DefaultOutput)
	f.Close()
	if err != nil || tr.End == nil || len(find(tr, OpExec, "/bin/echo")) != 1 {
		t.Fatalf("default trace: %v %+v", err, tr)
	}

	if code, _, errOut := run("trace", "-q", "-o", "x.trace", "--", "/bin/sh", "-c", "exit 3"); code != 3 || errOut != "" {
		t.Errorf("exit 3 with -q: got %d, stderr %q", code, errOut)
	}
	if code, _, errOut := run("trace", "--", "no-such-command-dlbundle"); code != 127 || !strings.Contains(errOut, "command not found") {
		t.Errorf("not found: %d %q", code, errOut)
	}
	code, out, _ = run("trace", "--help")
	for _, want := range []string{"dlbundle trace -- ./myapp", "./dlbundle.trace", "SLURM_PROCID", "CAP_SYS_PTRACE", "exit status"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	if code, out, _ := run("--help"); code != 0 || strings.Contains(out, StubVerb) {
		t.Errorf("the stub verb shows in dlbundle --help")
	}
}

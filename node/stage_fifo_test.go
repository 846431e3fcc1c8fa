package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// hangLimit is how long a run may take before it counts as hung (blocked on
// a FIFO). A hang is forever; a cold exec on a loaded 2-core machine (make
// test runs packages side by side) can take several seconds: a short limit
// called slowness a hang (TestDebugLogFIFOOrOthersFileNeverWritten, load 17).
const hangLimit = 60 * time.Second

// startCLI starts the CLI with env and args in a process group of its own;
// wait returns its combined output and state, or, if it is still running
// after d, SIGTERMs it, gives it d more, then SIGKILLs its whole group and
// reports that it hung (and whether SIGTERM ended it).
func startCLI(t *testing.T, env []string, args ...string) func(d time.Duration) (out string, state *os.ProcessState, hung, termEnded bool) {
	t.Helper()
	cmd := exec.Command(clitest.CLI(t), args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second // a child left blocked must not hold Wait on the pipe
	var b strings.Builder
	cmd.Stdout, cmd.Stderr = &b, &b
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) }) // what the group left behind
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	return func(d time.Duration) (string, *os.ProcessState, bool, bool) {
		select {
		case <-done:
			return b.String(), cmd.ProcessState, false, false
		case <-time.After(d):
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
			return b.String(), cmd.ProcessState, true, true
		case <-time.After(d):
		}
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
		return b.String(), cmd.ProcessState, true, false
	}
}

// Regression: a FIFO at the image path (a path a Prolog or a job script
// names, in a directory others can write) hung the staging rank in open(2)
// under the node's stage lock, every other rank behind it, and SIGTERM ended
// none of them. The image is opened non-blocking and refused as not a
// regular file: both ranks fail at once, with the reason.
func TestExecFIFOImageNeverHangs(t *testing.T) {
	p := clitest.NewProbeImage(t)
	fifo := filepath.Join(p.Work, "app.dlimg")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(clitest.CleanEnv(p.Work), "SLURM_JOB_ID=9")
	stage := filepath.Join(p.Work, "stage")
	var waits []func(time.Duration) (string, *os.ProcessState, bool, bool)
	for range 2 {
		waits = append(waits, startCLI(t, env, "exec", "--stage-dir", stage, fifo, "--", p.Original))
	}
	for i, wait := range waits {
		out, state, hung, termEnded := wait(hangLimit)
		switch {
		case hung && !termEnded:
			t.Errorf("rank %d hung on the FIFO image and SIGTERM did not end it:\n%s", i, out)
		case hung:
			t.Errorf("rank %d hung on the FIFO image (SIGTERM ended it):\n%s", i, out)
		case state.ExitCode() != 1 || !strings.Contains(out, "is a FIFO, not a regular file"):
			t.Errorf("rank %d: exit %d; want 1 and the image refused as a FIFO:\n%s", i, state.ExitCode(), out)
		}
	}
}

// Regression: a FIFO at a shared --report path hung exec; another
// user's file there would get this user's reports. exec refuses both at once,
// and so does the shim if the file changes after exec looked (here the app
// itself replaces it before its processes exit): no process blocks at exit,
// no line lands in another user's file.
func TestReportPathFIFOOrOthersFileRefused(t *testing.T) {
	needRoot(t)
	p := clitest.NewProbeImage(t)
	stage := filepath.Join(p.Work, "stage")
	env := clitest.CleanEnv(p.Work)
	fifo := filepath.Join(p.Work, "fifo.jsonl")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(p.Work, "theirs.jsonl")
	if err := os.WriteFile(theirs, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, attackerUID, attackerUID); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{{fifo, "is a FIFO"}, {theirs, "belongs to uid 1001"}} {
		out, state, hung, _ := startCLI(t, env, "exec", "--stage-dir", stage, "--report", c.path, p.Image, "--", p.Original)(hangLimit)
		if hung || state.ExitCode() != 1 || !strings.Contains(out, c.want) {
			t.Errorf("--report %s: hung %v, exit %d; want a refusal saying %q:\n%s", c.path, hung, state.ExitCode(), c.want, out)
		}
	}
	// Past exec's check: the app (a shell, under the shim) has the report
	// file swapped for a FIFO, then for uid 1001's file (by commands run
	// without the report, which would otherwise write it first), and runs a
	// program that exits; then the shell itself exits.
	report := filepath.Join(p.Work, "report.jsonl")
	for _, c := range []struct{ name, swap string }{
		{"FIFO", `rm -f "$R" && mkfifo "$R"`},
		{"uid 1001's file", `rm -f "$R" && : > "$R" && chown 1001 "$R"`},
	} {
		os.Remove(report)
		out, state, hung, _ := startCLI(t, append(env, "R="+report), "exec", "--stage-dir", stage, "--report", report, p.Image, "--",
			"/bin/sh", "-c", `env -u DLBUNDLE_REPORT /bin/sh -c '`+c.swap+`' && /bin/true && echo swapped`)(hangLimit)
		if hung || !state.Success() || !strings.Contains(out, "swapped") {
			t.Errorf("%s at the report path after exec's check: hung %v, %v:\n%s", c.name, hung, state, out)
		}
		if st, err := os.Stat(report); err == nil && st.Mode().IsRegular() && st.Size() != 0 {
			b, _ := os.ReadFile(report)
			t.Errorf("the shim appended its report to %s:\n%s", c.name, b)
		}
	}
}

// The debug log: with DLBUNDLE_DEBUG_DIR the shim appends
// its decisions to DIR/<pid>.log. A FIFO there (here the app's shell puts
// one at its own pid's name, then execs a program that logs under the same
// pid) must not hang the app; another user's file there gets nothing.
func TestDebugLogFIFOOrOthersFileNeverWritten(t *testing.T) {
	needRoot(t)
	p := clitest.NewProbeImage(t)
	stage := filepath.Join(p.Work, "stage")
	logs := filepath.Join(p.Work, "debug")
	if err := os.Mkdir(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, swap string }{
		{"FIFO", `rm -f "$L/$0.log" && mkfifo "$L/$0.log"`},
		{"uid 1001's file", `rm -f "$L/$0.log" && : > "$L/$0.log" && chown 1001 "$L/$0.log"`},
	} {
		env := append(clitest.CleanEnv(p.Work), "DLBUNDLE_DEBUG_DIR="+logs, "L="+logs)
		out, state, hung, _ := startCLI(t, env, "exec", "--debug", "--stage-dir", stage, p.Image, "--",
			"/bin/sh", "-c", `env -u DLBUNDLE_DEBUG /bin/sh -c '`+c.swap+`' "$$" && echo swapped && exec /bin/true`)(hangLimit)
		if hung || !state.Success() || !strings.Contains(out, "swapped") {
			t.Errorf("%s at the debug log's path: hung %v, %v:\n%s", c.name, hung, state, out)
		}
		ents, _ := os.ReadDir(logs)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && fi.Sys().(*syscall.Stat_t).Uid == attackerUID && fi.Size() != 0 {
				b, _ := os.ReadFile(filepath.Join(logs, e.Name()))
				t.Errorf("the shim wrote its debug log into uid 1001's %s:\n%s", e.Name(), b)
			}
		}
	}
}

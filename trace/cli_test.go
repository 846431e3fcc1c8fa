package trace

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestExitStatus: the app's exit status, or 128+N when signal N killed it.
func TestExitStatus(t *testing.T) {
	for _, c := range []struct {
		script string
		want   int
	}{{"exit 0", 0}, {"exit 42", 42}, {"kill -KILL $$", 128 + 9}, {"kill -SEGV $$", 128 + 11}} {
		_, res := traceRun(t, "/bin/sh", "-c", c.script)
		if res.Exit != c.want {
			t.Errorf("%q: exit %d, want %d", c.script, res.Exit, c.want)
		}
	}
}

// TestCommandNotRunnable: shell exit codes, a clear message, and no trace file.
func TestCommandNotRunnable(t *testing.T) {
	dir := t.TempDir()
	noexec := filepath.Join(dir, "script")
	os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644)
	t.Setenv("PATH", "/usr/bin:/bin")
	for _, c := range []struct {
		cmd  string
		code int
		msg  string
	}{
		{"no-such-command-dlbundle", 127, "command not found in PATH"},
		{filepath.Join(dir, "missing"), 127, "no such file"},
		{noexec, 126, "not executable"},
		{dir, 126, "is a directory"},
	} {
		out := filepath.Join(dir, "t.trace")
		_, err := Run(Options{Command: []string{c.cmd}, Output: out, Quiet: true})
		var ce *CommandError
		if !errors.As(err, &ce) || ce.Code != c.code || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: got %v, want exit %d and %q", c.cmd, err, c.code, c.msg)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Errorf("%s: files left behind: %v", c.cmd, ents)
		}
	}
}

// TestExecFails: a file that passes the checks but that the kernel cannot
// execute: the stub reports it, exits 126, and the trace has the failed exec.
func TestExecFails(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "garbage")
	os.WriteFile(bad, []byte("\x7fELF not really"), 0o755)
	tr, res := traceRun(t, bad)
	if res.Exit != ExitNotExecutable {
		t.Fatalf("exit %d, want %d", res.Exit, ExitNotExecutable)
	}
	mustFind(t, tr, OpExec, bad, "ENOEXEC")
}

// TestUnwritableOutput fails before the app runs.
func TestUnwritableOutput(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	_, err := Run(Options{Command: []string{"/usr/bin/touch", marker}, Output: "/nonexistent-dir/x.trace",
		Quiet: true})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent-dir/x.trace") || !strings.Contains(err.Error(), "-o") {
		t.Fatalf("got %v, want an error naming the path and -o", err)
	}
	if _, serr := os.Stat(marker); serr == nil {
		t.Fatal("the app ran although the output could not be written")
	}
}

// TestRankSuffix: under a launcher each rank writes its own file and the
// header names the rank; the launcher nearest the process wins (mpirun in an
// sbatch script: its ranks inherit the batch step's SLURM_PROCID=0).
func TestRankSuffix(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"SLURM_PROCID": "0", "PMIX_RANK": "5", "OMPI_COMM_WORLD_RANK": "5"}
	res, err := Run(Options{Command: []string{"/bin/true"}, Output: filepath.Join(dir, "app.trace"), Quiet: true,
		Stub: testStub(), Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != filepath.Join(dir, "app.trace.5") {
		t.Fatalf("output %s, want app.trace.5", res.Output)
	}
	f, _ := os.Open(res.Output)
	defer f.Close()
	tr, err := Read(f, res.Output)
	if err != nil || tr.Header.Rank != "5" {
		t.Fatalf("header rank %q, err %v", tr.Header.Rank, err)
	}
	for _, v := range rankVars {
		if got := LauncherRank(func(k string) string {
			if k == v {
				return "3"
			}
			return ""
		}); got != "3" {
			t.Errorf("%s not recognised", v)
		}
	}
	if OutputPath("", "") != DefaultOutput || OutputPath("", "2") != DefaultOutput+".2" {
		t.Error("default output name")
	}
}

// TestHeader: the header describes the run.
func TestHeader(t *testing.T) {
	t.Setenv("LD_LIBRARY_PATH", "/opt/x/lib")
	tr, _ := traceRun(t, "/bin/true", "arg")
	h := tr.Header
	wd, _ := os.Getwd()
	if strings.Join(h.Command, " ") != "/bin/true arg" || h.Cwd != wd || h.Env["LD_LIBRARY_PATH"] != "/opt/x/lib" ||
		h.Env["PATH"] == "" || h.Kernel == "" || h.Host == "" || h.Dlbundle == "" {
		t.Errorf("header %+v", h)
	}
	if !strings.HasPrefix(h.Glibc, "2.") {
		t.Errorf("glibc version %q", h.Glibc)
	}
	if _, err := time.Parse(time.RFC3339Nano, h.Start); err != nil {
		t.Errorf("start %q: %v", h.Start, err)
	}
}

// startCLI runs the test binary as `dlbundle trace -q -o OUT -- command` in a
// process of its own, so that it can receive signals.
func startCLI(t *testing.T, mode, out string, command ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	self, _ := os.Executable()
	cmd := exec.Command(self, append([]string{mode, out, "--"}, command...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &stderr
}

// waitForChild waits until a process whose parent is ppid runs comm.
func waitForChild(t *testing.T, ppid int, comm string) int {
	t.Helper()
	for i := 0; i < 500; i++ {
		ents, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, st := range ents {
			b, err := os.ReadFile(st)
			if err != nil {
				continue
			}
			s := string(b)
			i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
			if i < 0 || j < i {
				continue
			}
			f := strings.Fields(s[j+1:])
			if s[i+1:j] == comm && len(f) > 1 && f[1] == strconv.Itoa(ppid) {
				pid, _ := strconv.Atoi(strings.Fields(s)[0])
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %s child of %d appeared", comm, ppid)
	return 0
}

// TestSignalsReachTheApp: SIGTERM and SIGINT sent to dlbundle alone are
// forwarded; the app dies of them and its status is dlbundle's.
func TestSignalsReachTheApp(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		out := filepath.Join(t.TempDir(), "sig.trace")
		cmd, stderr := startCLI(t, "__trace-cli", out, "/bin/sleep", "60")
		waitForChild(t, cmd.Process.Pid, "sleep")
		cmd.Process.Signal(sig)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 128+int(sig) {
			t.Fatalf("%v: %v, want exit %d; stderr: %s", sig, err, 128+int(sig), stderr)
		}
		f, err := os.Open(out)
		if err != nil {
			t.Fatalf("%v: no trace written: %v", sig, err)
		}
		tr, err := Read(f, out)
		f.Close()
		if err != nil || tr.End == nil || tr.End.Exit != 128+int(sig) {
			t.Fatalf("%v: trace end %+v, err %v", sig, tr.End, err)
		}
	}
}

// TestPtraceNotPermitted: where ptrace is refused (here by a seccomp filter
// returning EPERM, as container runtimes do) the message says so.
func TestPtraceNotPermitted(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	cmd, stderr := startCLI(t, "__deny-ptrace", filepath.Join(dir, "x.trace"), "/usr/bin/touch", marker)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("%v, want exit 1; stderr: %s", err, stderr)
	}
	if msg := stderr.String(); !strings.Contains(msg, "ptrace is not permitted") || !strings.Contains(msg, "CAP_SYS_PTRACE") {
		t.Errorf("message: %s", msg)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the app ran untraced")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("files left: %v", ents)
	}
}

// countSIGINT exits with the number of SIGINTs it received within 0.5 s of
// the first one.
const countSIGINT = `
import signal, sys, time
n = 0
def h(s, f):
    global n
    n += 1
signal.signal(signal.SIGINT, h)
open(sys.argv[1], "w").close()
while n == 0:
    time.sleep(0.01)
time.sleep(0.5)
sys.exit(n)
`

// TestCtrlCOnce: Ctrl-C reaches the whole foreground process group, dlbundle
// and the app alike; forwarding must not make the app see it twice.
func TestCtrlCOnce(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	self, _ := os.Executable()
	cmd := exec.Command(self, "__trace-cli", filepath.Join(dir, "c.trace"), "--", "/usr/bin/python3", "-c", countSIGINT, ready)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) // what the terminal does
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("app saw SIGINT %v times (exit status), want 1; stderr: %s", err, stderr.String())
	}
}

// TestGlibcVersionMatchesGetconf: the version read from ld.so's banner is
// what getconf (gnu_get_libc_version) says, and the banner is found at any
// chunk offset.
func TestGlibcVersionMatchesGetconf(t *testing.T) {
	out, err := exec.Command("getconf", "GNU_LIBC_VERSION").Output()
	if err != nil {
		t.Fatalf("getconf: %v", err)
	}
	want := strings.TrimSpace(strings.TrimPrefix(string(out), "glibc "))
	if got := bannerVersion(ldso); got != want || got == "" {
		t.Errorf("ld.so banner says %q, getconf %q", got, want)
	}
	dir := t.TempDir()
	banner := "GNU C Library stable release version 2.36."
	for _, pad := range []int{0, 1, 16<<10 - 30, 16<<10 - 16, 16<<10 - 3, 16 << 10, 3 * 16 << 10, 200 << 10} {
		p := filepath.Join(dir, "lib")
		if err := os.WriteFile(p, append(make([]byte, pad), banner+"\x00tail"...), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := bannerVersion(p); got != "2.36" {
			t.Errorf("banner at %d: %q", pad, got)
		}
	}
	if got := bannerVersion(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("missing file: %q", got)
	}
}

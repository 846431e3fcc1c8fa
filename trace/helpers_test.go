package trace

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	seccomp "github.com/elastic/go-seccomp-bpf"
)

// fixtureDir holds the C fixtures compiled once per test run (set by TestMain).
var fixtureDir string

var (
	fixtureMu    sync.Mutex
	fixturesDone = map[string]string{}
)

// gcc compiles into fixtureDir; Debian's gcc passes --as-needed, so callers
// that need a DT_NEEDED entry kept say -Wl,--no-as-needed.
func gcc(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("gcc", args...)
	cmd.Dir = fixtureDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func testdata(name string) string {
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		panic(err)
	}
	return p
}

// fixture returns the path of testdata/NAME.c compiled to an executable.
func fixture(t *testing.T, name string) string {
	t.Helper()
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if p, ok := fixturesDone[name]; ok {
		return p
	}
	out := filepath.Join(fixtureDir, name)
	gcc(t, "-O1", "-Wall", "-pthread", "-o", out, testdata(name+".c"))
	fixturesDone[name] = out
	return out
}

// pluginFixture builds plug/plugin_main with RUNPATH $ORIGIN/lib, which
// dlopens lib/libplug.so, which needs lib/libdep.so through RUNPATH $ORIGIN.
func pluginFixture(t *testing.T) (exe, lib string) {
	t.Helper()
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	dir := filepath.Join(fixtureDir, "plug")
	exe, lib = filepath.Join(dir, "plugin_main"), filepath.Join(dir, "lib")
	if _, ok := fixturesDone["plug"]; ok {
		return exe, lib
	}
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	gcc(t, "-shared", "-fPIC", "-o", filepath.Join(lib, "libdep.so"), testdata("libdep.c"))
	gcc(t, "-shared", "-fPIC", "-o", filepath.Join(lib, "libplug.so"), testdata("libplug.c"),
		"-Wl,--no-as-needed", "-L"+lib, "-ldep", "-Wl,--enable-new-dtags,-rpath,$ORIGIN")
	gcc(t, "-o", exe, testdata("plugin_main.c"), "-ldl", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/lib")
	fixturesDone["plug"] = exe
	return exe, lib
}

// traceRun traces command in-process and reads the trace back.
func traceRun(t *testing.T, command ...string) (*Trace, *Result) {
	t.Helper()
	return traceRunOpts(t, Options{Command: command})
}

// traceRunOpts is traceRun with options (Output and Quiet are set here; no
// Stub: the filter is injected, as dlbundle does).
func traceRunOpts(t *testing.T, opts Options) (*Trace, *Result) {
	t.Helper()
	command := opts.Command
	opts.Output, opts.Quiet = filepath.Join(t.TempDir(), "run.trace"), true
	res, err := Run(opts)
	if err != nil {
		t.Fatalf("trace %v: %v", command, err)
	}
	f, err := os.Open(res.Output)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := Read(f, res.Output)
	if err != nil {
		t.Fatal(err)
	}
	if tr.End == nil {
		t.Fatalf("trace of %v has no end record", command)
	}
	if tr.End.Events != int64(len(tr.Events)) || tr.End.Exit != res.Exit {
		t.Fatalf("end record %+v does not match %d events, exit %d", *tr.End, len(tr.Events), res.Exit)
	}
	return tr, res
}

// find returns the events with op and path (any syscall).
func find(tr *Trace, op Op, path string) []Event {
	var out []Event
	for _, e := range tr.Events {
		if e.Op == op && e.Path == path {
			out = append(out, e)
		}
	}
	return out
}

// mustFind fails unless exactly the expected outcome (err "" = success) is in the trace.
func mustFind(t *testing.T, tr *Trace, op Op, path, err string) Event {
	t.Helper()
	for _, e := range find(tr, op, path) {
		if e.Err == err {
			return e
		}
	}
	t.Fatalf("no %s %s (err %q) in trace; events:\n%s", op, path, err, dump(tr))
	return Event{}
}

func dump(tr *Trace) string {
	var b strings.Builder
	for _, e := range tr.Events {
		b.WriteString(string(e.Op) + " " + e.Syscall + " " + e.Path + " " + e.Path2 + " " + e.Err + "\n")
	}
	return b.String()
}

// denyPtrace makes ptrace fail with EPERM in this process and its children,
// as the default seccomp profile of container runtimes does.
func denyPtrace() error {
	return seccomp.LoadFilter(seccomp.Filter{
		NoNewPrivs: true,
		Flag:       seccomp.FilterFlagTSync,
		Policy: seccomp.Policy{
			DefaultAction: seccomp.ActionAllow,
			Syscalls: []seccomp.SyscallGroup{{
				Action: seccomp.ActionErrno | seccomp.Action(syscall.EPERM),
				Names:  []string{"ptrace"},
			}},
		},
	})
}

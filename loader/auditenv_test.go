package loader

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAuditReadsTheEnvironmentFromTheStack: the audit module finds the
// environment on the initial stack (the auxiliary vector as the kernel
// keeps it, matched in memory), so a served process opens neither
// /proc/self/environ nor /proc/self/stat, which cost ~70 us per process.
// Its variables still take effect: DLBUNDLE_DEBUG turns its log on, and
// the app sees its own LD_LIBRARY_PATH (the audit module's swap, before any
// constructor). Run as `ld.so PROGRAM`, ld.so moves argv and rewrites the
// vector: the module then reads /proc/self/environ, says so, and still
// answers the search's candidates.
func TestAuditReadsTheEnvironmentFromTheStack(t *testing.T) {
	if _, err := exec.LookPath("strace"); err != nil {
		t.Fatal("strace is needed (make deps)")
	}
	f := newHardFixture(t, nil)
	env := ShimEnv(f.stage, append(probeEnv(f.root), "LD_LIBRARY_PATH="+filepath.Join(f.tree, "d")), EnvOptions{Debug: true})
	trace := filepath.Join(f.root, "strace.out")
	cmd := exec.Command("strace", "-f", "-qq", "-e", "trace=openat,open", "-o", trace, f.staged, "env")
	cmd.Args[len(cmd.Args)-2] = f.probe // argv[0] as dlbundle exec gives it
	cmd.Env, cmd.Dir = env, "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("strace hard env: %v\n%s", err, out)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	calls := string(b)
	for _, p := range []string{"/proc/self/environ", "/proc/self/stat"} {
		if strings.Contains(calls, `"`+p+`"`) {
			t.Errorf("the served process opened %s:\n%s", p, calls)
		}
	}
	if !strings.Contains(string(out), "dlbundle[audit]: ") {
		t.Errorf("the audit module's log is off: DLBUNDLE_DEBUG was not read:\n%.800s", out)
	}
	if strings.Contains(string(out), "environ read from /proc/self/environ") {
		t.Errorf("the audit module fell back to /proc:\n%.800s", out)
	}
	if want := "LD_LIBRARY_PATH=" + filepath.Join(f.tree, "d") + "\n"; !strings.Contains(string(out), want) {
		t.Errorf("the app does not see its own %q:\n%.800s", want, out)
	}

	interp := interpreter(t, f.probe)
	cmd = exec.Command(interp, f.staged, "name", filepath.Join(f.tree, "f"))
	cmd.Env, cmd.Dir = env, "/"
	out, err = cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s hard: %v\n%s", interp, err, out)
	}
	if !strings.Contains(string(out), "dlbundle[audit]: environ read from /proc/self/environ") {
		t.Errorf("run as `ld.so PROGRAM`, the audit module did not say it read /proc/self/environ:\n%.800s", out)
	}
	// LD_LIBRARY_PATH's directory is bundled: the module answers its
	// candidates from the table
	if !strings.Contains(string(out), "dlbundle[audit]: missing "+filepath.Join(f.tree, "d")) {
		t.Errorf("run as `ld.so PROGRAM`, the audit module answered no candidate:\n%.800s", out)
	}
}

// TestOneTableMappingPerProcess: the preload uses the table audit.so
// mapped (handed over in la_objopen: shim/table.h, DLB_SHARE_SLOT), so a served
// process maps STAGE/table once, and the pages audit.so's search faulted in
// are not faulted in again. Without audit.so the preload maps it itself,
// and answers as before.
func TestOneTableMappingPerProcess(t *testing.T) {
	f := newHardFixture(t, nil)
	env := ShimEnv(f.stage, probeEnv(f.root), EnvOptions{})
	table := filepath.Join(f.stage, "table")
	if out, _ := f.run(t, env, nil, "maps", table); out != "1\n" {
		t.Errorf("the served process has %q mappings of %s, want 1", out, table)
	}
	var noAudit []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "LD_AUDIT=") {
			noAudit = append(noAudit, kv)
		}
	}
	if out, _ := f.run(t, noAudit, nil, "maps", table); out != "1\n" {
		t.Errorf("without audit.so, the process has %q mappings of %s, want 1 (the preload's own)", out, table)
	}
	// served: a bundled file's stat comes from the table, as with audit.so
	native, _ := f.run(t, probeEnv(f.root), nil, "name", filepath.Join(f.tree, "f"))
	for name, e := range map[string][]string{"with audit.so": env, "without": noAudit} {
		if shim, _ := f.run(t, e, nil, "name", filepath.Join(f.tree, "f")); shim != native {
			t.Errorf("%s: native:\n%sshim:\n%s", name, native, shim)
		}
	}
}

// interpreter is the program's PT_INTERP (the node's ld.so).
func interpreter(t *testing.T, prog string) string {
	t.Helper()
	ef, err := elf.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			return strings.TrimRight(string(b), "\x00")
		}
	}
	t.Fatalf("%s has no PT_INTERP", prog)
	return ""
}

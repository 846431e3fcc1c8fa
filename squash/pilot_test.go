package squash

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/trace"
)

// realPilot runs command under the real tracer (ptrace) and reads its trace.
func realPilot(t *testing.T, command ...string) *trace.Trace {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "pilot.trace")
	var log bytes.Buffer
	res, err := trace.Run(trace.Options{
		Command: command, Output: out, Quiet: true, Stderr: &log,
		Stub:   []string{self, trace.StubVerb, "--"},
		Getenv: func(string) string { return "" }, // not a rank of a launcher
	})
	if err != nil {
		t.Fatalf("pilot %q: %v\n%s", command, err, log.String())
	}
	if res.Exit != 0 {
		t.Fatalf("pilot %q exited %d\n%s", command, res.Exit, log.String())
	}
	ts, err := Load([]string{out})
	if err != nil {
		t.Fatal(err)
	}
	return ts[0]
}

// python runs Debian's Python with only the environment given (no
// PYTHONDONTWRITEBYTECODE unless asked, no user site).
func python(env ...string) []string {
	return append(append([]string{"/usr/bin/env", "-i", "PYTHONNOUSERSITE=1"}, env...), "/usr/bin/python3")
}

// A real pilot of Debian's Python importing stdlib modules and a module of
// our own: .py, .pyc and extension modules are bundled, import probes that
// failed are kept as missing, /etc and /proc are left out.
func TestPlanFromRealPythonPilot(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"lib/mymod.py": "import json, decimal, ctypes\nVALUE = 42\n"})
	cmd := append(python("PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="+root+"/lib"),
		"-c", "import mymod, os; os.listdir('/proc/self/fd'); open('/etc/hostname').read(); print(mymod.VALUE)")
	tr := realPilot(t, cmd...)
	plan := build(t, root, Options{}, tr)

	byPath := entriesByPath(plan)
	wantEntry(t, plan, "/usr/bin/python3", image.TypeSymlink)
	if e := wantEntry(t, plan, "/usr/bin/python3.11", image.TypeRegular); e.Kind != image.KindELFExec {
		t.Errorf("python3.11 kind %s", e.Kind)
	}
	if e := wantEntry(t, plan, "/usr/lib/x86_64-linux-gnu/libc.so.6", image.TypeRegular); e.Kind != image.KindELFShared {
		t.Errorf("libc kind %s", e.Kind)
	}
	wantEntry(t, plan, "/lib", image.TypeSymlink) // ld.so.cache names /lib/x86_64-linux-gnu/...
	if e := wantEntry(t, plan, root+"/lib/mymod.py", image.TypeRegular); e.Kind != image.KindPySource {
		t.Errorf("mymod.py kind %s", e.Kind)
	}
	if e := wantEntry(t, plan, "/usr/lib/python3.11/json/__pycache__/__init__.cpython-311.pyc", image.TypeRegular); e.Kind != image.KindPyBytecode {
		t.Errorf("json pyc kind %s", e.Kind)
	}
	// Stat'd only (the source of a loaded .pyc): bundled, so that stats are answered from the image.
	if e := wantEntry(t, plan, "/usr/lib/python3.11/json/__init__.py", image.TypeRegular); e.Kind != image.KindPySource {
		t.Errorf("json/__init__.py kind %s", e.Kind)
	}
	ext := wantEntry(t, plan, "/usr/lib/python3.11/lib-dynload/_decimal.cpython-311-x86_64-linux-gnu.so", image.TypeRegular)
	if ext.Kind != image.KindPyExtension {
		t.Errorf("_decimal kind %s", ext.Kind)
	}
	// The import system's failed probes: the extension-module names tried before json/__init__.py.
	wantEntry(t, plan, "/usr/lib/python3.11/json/__init__.cpython-311-x86_64-linux-gnu.so", image.TypeMissing)
	// mymod's directory: Python lists it (and so probes nothing that is absent).
	wantEntry(t, plan, root+"/lib", image.TypeDir)

	for _, e := range plan.Entries {
		if strings.HasPrefix(e.Path, "/proc") || strings.HasPrefix(e.Path, "/dev/") {
			t.Errorf("%s (%s) is in the plan", e.Path, e.Type)
		}
		if strings.HasPrefix(e.Path, "/etc/") && e.Type != image.TypeExternal && e.Type != image.TypeSymlink {
			t.Errorf("%s is %s; /etc is node-local", e.Path, e.Type)
		}
	}
	if e := byPath["/etc/hostname"]; e == nil || e.Type != image.TypeExternal {
		t.Errorf("/etc/hostname: %v, want an external entry", e)
	}
	if len(plan.Report.Warnings) != 0 {
		t.Errorf("warnings: %q", plan.Report.Warnings)
	}
	if plan.Report.Skipped[ReasonPseudoFS] == 0 || plan.Report.Skipped[ReasonEtc] == 0 {
		t.Errorf("skipped: %v", plan.Report.Skipped)
	}
	// Load order: env (and its libc), then python, then mymod, then what mymod imports.
	env, py, libc, mymod := byPath["/usr/bin/env"], byPath["/usr/bin/python3.11"], byPath["/usr/lib/x86_64-linux-gnu/libc.so.6"], byPath[root+"/lib/mymod.py"]
	if env == nil || !(env.Order < libc.Order && libc.Order < py.Order && py.Order < mymod.Order && mymod.Order < ext.Order) {
		t.Errorf("load order: env %v libc %d python %d mymod %d _decimal %d", env, libc.Order, py.Order, mymod.Order, ext.Order)
	}
}

// A C program linked (RUNPATH) against libfoo.so.1 -> libfoo.so.1.0 in a
// temp tree: the symlink and the file are kept, ld.so's failed probes in the
// RUNPATH directory are kept as missing.
func TestPlanFromRealCPilot(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{
		"src/foo.c":  "int foo(void) { return 7; }\n",
		"src/main.c": "int foo(void);\nint main(void) { return foo() == 7 ? 0 : 1; }\n",
	})
	lib := filepath.Join(root, "app", "lib")
	gcc(t, "-shared", "-fPIC", "-Wl,-soname,libfoo.so.1", "-o", lib+"/libfoo.so.1.0", root+"/src/foo.c")
	if err := os.Symlink("libfoo.so.1.0", lib+"/libfoo.so.1"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("libfoo.so.1", lib+"/libfoo.so"); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(root, "app", "bin", "main")
	gcc(t, "-Wl,--no-as-needed", "-o", exe, root+"/src/main.c", "-L"+lib, "-lfoo", "-Wl,-rpath,$ORIGIN/../lib", "-Wl,--enable-new-dtags")
	tr := realPilot(t, exe)
	plan := build(t, root, Options{}, tr)

	if e := wantEntry(t, plan, exe, image.TypeRegular); e.Kind != image.KindELFExec {
		t.Errorf("main kind %s", e.Kind)
	}
	wantEntry(t, plan, lib+"/libfoo.so.1", image.TypeSymlink)
	if e := wantEntry(t, plan, lib+"/libfoo.so.1.0", image.TypeRegular); e.Kind != image.KindELFShared {
		t.Errorf("libfoo kind %s", e.Kind)
	}
	wantAbsent(t, plan, lib+"/libfoo.so") // in the listing, never used
	// The kernel loads the program interpreter itself (no trace record):
	// build adds it, through /lib64 -> usr/lib64 and ld-linux -> /lib/... links.
	wantEntry(t, plan, "/lib64", image.TypeSymlink)
	wantEntry(t, plan, "/usr/lib64/ld-linux-x86-64.so.2", image.TypeSymlink)
	if e := wantEntry(t, plan, "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", image.TypeRegular); e.Kind != image.KindELFShared {
		t.Errorf("ld.so kind %s", e.Kind)
	}
	missing := 0
	for _, e := range plan.Entries {
		if e.Type == image.TypeMissing && strings.HasPrefix(e.Path, lib+"/") {
			missing++
		}
	}
	var probes int
	for _, e := range tr.Events {
		if e.Err == "ENOENT" && strings.HasPrefix(e.Path, lib+"/") {
			probes++
		}
	}
	if probes > 0 && missing == 0 {
		t.Errorf("ld.so made %d failed probes under %s, none kept as missing:\n%s", probes, lib, dump(plan))
	}
}

func gcc(t *testing.T, args ...string) {
	t.Helper()
	out := args[len(args)-1]
	for i, a := range args {
		if a == "-o" {
			out = args[i+1]
		}
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, b)
	}
}

// The pilot imports a module that has no __pycache__ yet, with bytecode
// writing on: Python writes the .pyc during the pilot. The .pyc is a cache,
// valid for its source, so it is bundled, and it is in the written image.
// Building twice gives byte-identical images.
func TestPycWrittenByRealPilotEndToEnd(t *testing.T) {
	root := t.TempDir()
	tree(t, root, map[string]string{"lib/fresh/__init__.py": "", "lib/fresh/mod.py": "X = 'fresh'\n"})
	tr := realPilot(t, append(python("PYTHONPATH="+root+"/lib"), "-c", "import fresh.mod; print(fresh.mod.X)")...)
	pyc := root + "/lib/fresh/__pycache__/mod.cpython-311.pyc"
	if _, err := os.Stat(pyc); err != nil {
		t.Fatalf("the pilot did not write %s: %v", pyc, err)
	}
	wrote := false
	for _, e := range tr.Events {
		if e.Path2 == pyc || (e.Path == pyc && e.Writes()) {
			wrote = true
		}
	}
	if !wrote {
		t.Fatalf("the trace does not show the pilot writing %s", pyc)
	}
	plan := build(t, root, Options{}, tr)
	e := wantEntry(t, plan, pyc, image.TypeRegular)
	if e.Kind != image.KindPyBytecode {
		t.Errorf("kind %s", e.Kind)
	}
	wantEntry(t, plan, root+"/lib/fresh/__pycache__/__init__.cpython-311.pyc", image.TypeRegular)
	wantEntry(t, plan, root+"/lib/fresh/mod.py", image.TypeRegular)
	if len(plan.Report.PycCaches) != 2 || len(plan.Report.ListingsChanged) != 0 {
		t.Errorf("pyc caches %v, listings changed %v", plan.Report.PycCaches, plan.Report.ListingsChanged)
	}

	write := func() []byte {
		var buf bytes.Buffer
		if _, err := image.Write(&buf, plan.Entries, image.WriteOptions{Pilots: plan.Pilots, Workers: 2}); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	img := write()
	first := plan
	plan = build(t, root, Options{}, tr) // a second build from scratch
	for i := range plan.Entries {
		if a, b := first.Entries[i], plan.Entries[i]; !reflect.DeepEqual(a, b) {
			t.Errorf("entry %d differs:\n%+v\n%+v", i, a, b)
		}
	}
	if again := write(); !bytes.Equal(img, again) {
		t.Fatalf("two builds of the same inputs differ (%d and %d bytes)", len(img), len(again))
	}
	name := filepath.Join(t.TempDir(), "app.dlimg")
	if err := os.WriteFile(name, img, 0o644); err != nil {
		t.Fatal(err)
	}
	im, err := image.OpenFile(name)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	got, ok := im.Lookup(pyc)
	if !ok || got.Type != image.TypeRegular {
		t.Fatalf("image lookup of %s: %v %v", pyc, got, ok)
	}
	content, _ := os.ReadFile(pyc)
	sum := sha256.Sum256(content)
	if got.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("image holds %s with sha256 %s, file has %x", pyc, got.SHA256, sum)
	}
}

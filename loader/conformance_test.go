package loader

// Differential conformance: a C probe and a Python probe print what they
// observe of a tree (stat fields, errno, listings with d_type, readlink,
// realpath, dladdr, /proc/self/maps, $ORIGIN and dlopen by name, namespace
// packages, importlib.resources, subprocess with close_fds, posix_spawn, dash,
// vfork, threads, open fds). Their output natively must equal their output
// under the shim with a stage of the tree, byte for byte.

import (
	"bufio"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
)

// buildProbeTree compiles the C fixtures into a fresh tree and adds the
// Python packages and data files the probes look at.
func buildProbeTree(t *testing.T, root string) string {
	t.Helper()
	T := filepath.Join(root, "tree")
	// ../outside is not bundled (external, listed in root): symlinks into it
	// are followed by the shim, the rest of the path passes through.
	if err := os.MkdirAll(filepath.Join(root, "outside", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "outside", "file"), []byte("outside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"bin", "lib/plugins", "data/sub", "py/pkg", "py/ns", "py2/ns"} {
		if err := os.MkdirAll(filepath.Join(T, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	gcc := func(args ...string) {
		t.Helper()
		// Debian's gcc passes --as-needed: keep every DT_NEEDED.
		cmd := exec.Command("gcc", append([]string{"-O1", "-Wl,--no-as-needed", "-Wl,--enable-new-dtags"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	lib := filepath.Join(T, "lib")
	gcc("-shared", "-fPIC", "-o", filepath.Join(lib, "libdep.so"), "testdata/libdep.c")
	gcc("-shared", "-fPIC", "-o", filepath.Join(lib, "libprobe.so"), "testdata/libprobe.c",
		"-L"+lib, "-ldep", "-Wl,-rpath,$ORIGIN")
	gcc("-shared", "-fPIC", "-o", filepath.Join(lib, "plugins", "libplug.so"), "testdata/plugin.c",
		"-L"+lib, "-ldep", "-Wl,-rpath,$ORIGIN/..")
	gcc("-shared", "-fPIC", "-o", filepath.Join(lib, "libbad.so"), "testdata/libbad.c", "-Wl,-z,lazy")
	// RUNPATH: a directory that does not exist first (a known-missing
	// candidate), then $ORIGIN-relative ones.
	gcc("-o", filepath.Join(T, "bin", "probe"), "testdata/probe.c", "-L"+lib, "-lprobe", "-ldl", "-lpthread",
		"-Wl,-rpath,$ORIGIN/../nolib:$ORIGIN/../lib:$ORIGIN/../lib/plugins")
	files := map[string]string{
		"data/hello.txt": "hello\n", "data/noperm.txt": "secret\n", "data/sub/x": "x\n",
		"py/pkg/__init__.py": "", "py/pkg/mod.py": "VALUE = 41\n", "py/pkg/data.txt": "resource data\n",
		"py/ns/a.py": "VALUE = 'a'\n", "py2/ns/b.py": "VALUE = 'b'\n",
	}
	for rel, content := range files {
		if err := os.WriteFile(filepath.Join(T, rel), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(T, "data/noperm.txt"), 0); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"lib/link-to-probe.so": "libprobe.so", "lib/abs-link.so": filepath.Join(lib, "libdep.so"),
		"lib/dangling": "does-not-exist", "lib/loop1": "loop2", "lib/loop2": "loop1",
		"lib/to-outside": "../../outside/file", "lib/to-outside-dir": filepath.Join(root, "outside"),
	}
	for rel, target := range links {
		if err := os.Symlink(target, filepath.Join(T, rel)); err != nil {
			t.Fatal(err)
		}
	}
	return T
}

// probeEnv is the fixed environment the probes run in.
func probeEnv(home string) []string {
	return []string{"PATH=/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
}

// runProbe runs argv with env; path, if not "", is the file to execute
// (argv[0] is kept, as dlbundle exec does for a staged executable).
func runProbe(t *testing.T, path string, argv, env []string) string {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	if path != "" {
		cmd.Path = path
	}
	cmd.Env = env
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, out)
	}
	return string(out)
}

// diffLines reports the first differing lines of two outputs.
func diffLines(t *testing.T, what, native, shim string) {
	t.Helper()
	if native == shim {
		return
	}
	a, b := strings.Split(native, "\n"), strings.Split(shim, "\n")
	n := 0
	for i := 0; i < len(a) || i < len(b); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			t.Errorf("%s line %d:\n  native: %s\n  shim:   %s", what, i+1, x, y)
			if n++; n > 15 {
				break
			}
		}
	}
}

type reportLine struct {
	Exe         string   `json:"exe"`
	Answered    int      `json:"answered"`
	Missing     int      `json:"missing"`
	Passed      int      `json:"passed"`
	PassedPaths []string `json:"passed_paths"`
}

func readReport(t *testing.T, p string) []reportLine {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatalf("report %s: %v", p, err)
	}
	defer f.Close()
	var rs []reportLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		var r reportLine
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("report line %q: %v", sc.Text(), err)
		}
		rs = append(rs, r)
	}
	return rs
}

func TestConformance(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Fatal("gcc is needed to build the probe (make deps)")
	}
	root := t.TempDir()
	if keep := os.Getenv("LOADER_TEST_KEEP"); keep != "" {
		root = keep // debugging: keep the tree and stage (an empty directory)
	}
	T := buildProbeTree(t, root)
	// Like squash, give the directories between / and the test's own
	// (/tmp/...) no entry: /tmp is then external (listed in /), and the shim
	// walks through it as a prefix outside the image.
	var entries []image.Entry
	for _, e := range treeEntries(t, T, "/usr/lib/python3.11", "/usr/bin/python3", "/usr/bin/python3.11") {
		if !strings.HasPrefix(root, e.Path) || e.Path == root || e.Path == "/" {
			entries = append(entries, e)
		}
	}
	stage := stageEntries(t, root, entries)
	home := filepath.Join(root, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	base := probeEnv(home)
	report := filepath.Join(root, "report.jsonl")
	shimEnv := ShimEnv(stage, base, EnvOptions{Report: report})

	probe := filepath.Join(T, "bin", "probe")
	staged, ok := StagedPath(stage, probe)
	if !ok {
		t.Fatalf("StagedPath(%s) = not bundled", probe)
	}

	t.Run("C", func(t *testing.T) {
		native := runProbe(t, "", []string{probe, "full", T}, base)
		shim := runProbe(t, staged, []string{probe, "full", T}, shimEnv)
		diffLines(t, "C probe", native, shim)
		if strings.Contains(shim, "audit interface") || strings.Contains(shim, "ERROR: ld.so") {
			t.Errorf("ld.so complained about the shim:\n%s", shim)
		}
	})
	// ld.so accepted the audit object (la_version) and it answered the
	// search: the RUNPATH candidate in a missing directory was skipped
	// without a syscall, the bundled one served from the stage.
	t.Run("audit", func(t *testing.T) {
		env := ShimEnv(stage, base, EnvOptions{Debug: true})
		out := runProbe(t, staged, []string{probe, "helper", T}, env)
		// The whole search is decided from the table at LA_SER_ORIG
		// ($ORIGIN/../nolib known missing, then $ORIGIN/../lib): ld.so gets
		// the staged path and searches nothing.
		for _, want := range []string{
			"dlbundle[audit]: search libprobe.so -> " + stage + "/root" + T + "/bin/../lib/libprobe.so",
		} {
			if !strings.Contains(out, want+"\n") {
				t.Errorf("debug log lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "audit interface") {
			t.Errorf("ld.so refused the audit object:\n%s", out)
		}
	})
	// Random paths through the tree (., .., symlinks, loops, trailing
	// slashes, files used as directories): the table's resolver must agree
	// with the kernel on every one.
	t.Run("paths", func(t *testing.T) {
		parts := []string{"lib", "data", "..", ".", "", "link-to-probe.so", "abs-link.so", "loop1", "dangling",
			"libprobe.so", "nope", "sub", "hello.txt", "plugins", "bin", "probe", "noperm.txt", "py", "pkg",
			"to-outside", "to-outside-dir", "file", "tree", "lib/to-outside-dir"}
		rng := rand.New(rand.NewPCG(4, 2))
		var in strings.Builder
		for i := 0; i < 3000; i++ {
			p := T
			for n := 1 + rng.IntN(5); n > 0; n-- {
				p += "/" + parts[rng.IntN(len(parts))]
			}
			in.WriteString(p + "\n")
		}
		run := func(path string, env []string) string {
			cmd := exec.Command(probe, "paths", T)
			if path != "" {
				cmd.Path = path
			}
			cmd.Env, cmd.Stdin = env, strings.NewReader(in.String())
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("probe paths: %v", err)
			}
			return string(out)
		}
		diffLines(t, "random paths", run("", base), run(staged, shimEnv))
	})
	t.Run("Python", func(t *testing.T) {
		argv := []string{"/usr/bin/python3", "-I", "-B", "testdata/probe.py", T}
		abs, _ := filepath.Abs("testdata/probe.py")
		argv[3] = abs
		native := runProbe(t, "", argv, base)
		py, ok := StagedPath(stage, "/usr/bin/python3")
		if !ok {
			t.Fatal("StagedPath(/usr/bin/python3) = not bundled")
		}
		shim := runProbe(t, py, argv, shimEnv)
		diffLines(t, "Python probe", native, shim)
	})

	// The report proves the shim answered: every process wrote a line, the
	// tree's lookups were answered from the table, none passed through.
	rs := readReport(t, report)
	if len(rs) < 4 {
		t.Fatalf("report has %d lines, want one per process (>= 4)", len(rs))
	}
	answered := 0
	for _, r := range rs {
		answered += r.Answered + r.Missing
		for _, p := range r.PassedPaths {
			// (random paths may climb out of the tree with ..)
			if strings.HasPrefix(filepath.Clean(p), T+"/") {
				t.Errorf("%s: lookup of bundled tree path %s passed through", r.Exe, p)
			}
		}
	}
	if answered < 100 {
		t.Errorf("the shim answered only %d lookups from the table", answered)
	}
}

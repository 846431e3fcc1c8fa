package loader

// End-to-end on the layouts real software stacks have: a Spack-style tree
// (every package in its own prefix, absolute RUNPATHs), numpy, torch, a failed
// dlopen. Counted with strace: under exec, ZERO system calls on the app's tree
// and on every path the image decides (bundled paths and anything below a
// bundled directory: ld.so's directory probes included), cold and warm.

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/clitest"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// decidedPaths maps each image entry to whether lookups below it are the
// shim's to answer: bundled files, directories, symlinks, known-missing
// paths (true), external ones (false).
func decidedPaths(t *testing.T, img string) map[string]bool {
	im, err := image.OpenFile(img)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	m := map[string]bool{}
	for _, e := range im.Entries() {
		m[e.Path] = e.Type != image.TypeExternal
		for _, d := range e.Listing {
			if p := filepath.Join(e.Path, d.Name); e.Type == image.TypeDir {
				if _, ok := m[p]; !ok {
					m[p] = false // listed, not an entry: exists, not bundled
				}
			}
		}
	}
	// a listing name first seen as external may be an entry later
	for _, e := range im.Entries() {
		m[e.Path] = e.Type != image.TypeExternal
	}
	return m
}

// decided reports whether the image decides lookups of p: the nearest of p
// and its ancestors that the image names is not external.
func decided(p string, m map[string]bool) bool {
	for q := p; ; q = filepath.Dir(q) {
		if d, ok := m[q]; ok {
			return d
		}
		if q == "/" {
			return false
		}
	}
}

// opsOn counts the traced system calls on paths below one of the prefixes or
// decided by the image, and describes them (count, path, first call).
func opsOn(ops map[string][]string, prefixes []string, m map[string]bool, skip func(string) bool) (n int, report []string) {
	for p, lines := range ops {
		hit := decided(p, m)
		for _, pre := range prefixes {
			hit = hit || p == pre || strings.HasPrefix(p, pre+"/")
		}
		if !hit || (skip != nil && skip(p)) {
			continue
		}
		n += len(lines)
		report = append(report, "  "+strconv.Itoa(len(lines))+"  "+p+"\n        e.g. "+lines[0])
	}
	sort.Strings(report)
	return n, report
}

type stackApp struct {
	name string
	// setup builds what the app needs in dir and returns the commands to
	// trace (all of them) and to check (the last), and the trees whose every
	// path must see no system call under exec (besides the decided ones).
	setup    func(t *testing.T, dir string) (cmds [][]string, trees []string)
	includes func(dir string) []string
}

// runStackApp traces every command, builds one image, and checks that the
// last command, run under exec cold (staging) and warm, prints what it prints
// natively and makes no system call on the trees or decided paths.
func runStackApp(t *testing.T, app stackApp) {
	bin := clitest.CLI(t)
	dir := t.TempDir()
	cmds, trees := app.setup(t, dir)
	env := clitest.CleanEnv(dir)
	var traces []string
	for i, c := range cmds {
		tr := filepath.Join(dir, "t"+strconv.Itoa(i)+".trace")
		runIn(t, dir, env, bin, append([]string{"trace", "-q", "-o", tr, "--"}, c...)...)
		traces = append(traces, tr)
	}
	build := append([]string{"build", "-o", "app.dlimg"}, traces...)
	if app.includes != nil {
		for _, inc := range app.includes(dir) {
			build = append(build, "--include", inc)
		}
	}
	runIn(t, dir, env, bin, build...)
	img := filepath.Join(dir, "app.dlimg")
	m := decidedPaths(t, img)
	cmd := cmds[len(cmds)-1]
	native := runIn(t, dir, env, cmd[0], cmd[1:]...)
	stage := filepath.Join(dir, "stage")
	execArgs := append([]string{bin, "exec", "--stage-dir", stage, img, "--"}, cmd...)
	var stderr strings.Builder
	strace := func(name string, args ...string) map[string][]string {
		log := filepath.Join(dir, name+".strace")
		c := exec.Command("strace", append([]string{"-f", "-qq", "-y", "-s", "4096",
			"-e", "trace=%file,getdents64", "-o", log}, args...)...)
		c.Dir, c.Env = dir, env
		stderr.Reset()
		c.Stderr = &stderr
		o, err := c.Output()
		out := string(o)
		if err != nil {
			t.Fatalf("%s: %v\n%s%s", name, err, out, stderr.String())
		}
		if out != native {
			t.Fatalf("%s: output differs from the native run:\nnative: %q\ngot:    %q", name, native, out)
		}
		return straceOps(t, log, dir)
	}
	// The staging exec reads the image (outside the trees) and writes the
	// stage; dlbundle's own command line names the app: not a lookup.
	// "/" itself: glibc's NSS stats it after reading nsswitch.conf (a chroot
	// check, an internal call no preload sees); the root directory is the
	// node's own, never on the shared file system.
	skip := func(p string) bool {
		return strings.HasPrefix(p, stage) || p == img || p == "/"
	}
	nNative, _ := opsOn(strace("native", cmd...), trees, m, skip)
	if nNative == 0 {
		t.Fatalf("natively the app made no operation on its trees or bundled paths: the check is broken")
	}
	for _, run := range []string{"exec-cold", "exec-warm"} {
		skipRun := skip
		if run == "exec-cold" { // the stager opens the node's ld.so (e2e_test.go)
			skipRun = func(p string) bool { return skip(p) || ldsoProbeTouches()[p] }
		}
		n, report := opsOn(strace(run, execArgs...), trees, m, skipRun)
		if rules, _ := filepath.Glob(filepath.Join(stage, "sha256-*", stagefmt.SearchFile)); len(rules) != 1 {
			t.Errorf("%s: the stage has no %s (ld.so's search rules): the probe failed:\n%s", run, stagefmt.SearchFile, stderr.String())
		}
		t.Logf("%s: native %d system calls on the tree and decided paths, %s %d", app.name, nNative, run, n)
		if n != 0 {
			if len(report) > 40 {
				report = append(report[:40], "...")
			}
			t.Errorf("%s: %d system calls on the tree or on paths the image decides (count, path, first call):\n%s%s",
				run, n, strings.Join(report, "\n"), glibcInternalHint(report))
		}
	}
}

func needTools(t *testing.T, tools ...string) {
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (make deps installs it): %v", tool, err)
		}
	}
}

// spackTree generates examples/spack's tree with n packages in dir/tree and
// returns its two commands (the C app, the Python script).
func spackTree(t *testing.T, dir string, n int) (app, py string) {
	t.Helper()
	gen, err := filepath.Abs("../examples/spack/make-tree.sh")
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Fields(runIn(t, dir, clitest.CleanEnv(dir), gen, filepath.Join(dir, "tree"), strconv.Itoa(n)))
	if len(out) != 2 {
		t.Fatalf("make-tree.sh printed %q, want the two commands", out)
	}
	return out[0], out[1]
}

func TestExecZeroOpsSpackTree(t *testing.T) {
	needTools(t, "strace", "gcc", "/usr/bin/python3")
	shared := t.TempDir()
	tree := filepath.Join(shared, "tree")
	app, py := spackTree(t, shared, 30)
	inc := func(string) []string { return []string{tree} }
	for _, a := range []stackApp{
		{name: "spack-app", setup: func(*testing.T, string) ([][]string, []string) {
			return [][]string{{app}}, []string{tree}
		}, includes: inc},
		{name: "spack-py", setup: func(*testing.T, string) ([][]string, []string) {
			return [][]string{{"/usr/bin/python3", "-I", py}}, []string{tree}
		}, includes: inc},
	} {
		t.Run(a.name, func(t *testing.T) { runStackApp(t, a) })
	}
}

func TestExecZeroOpsPythonStacks(t *testing.T) {
	needTools(t, "strace", "/usr/bin/python3")
	py := func(code string) func(t *testing.T, dir string) ([][]string, []string) {
		return func(t *testing.T, dir string) ([][]string, []string) {
			return [][]string{{"/usr/bin/python3", "-I", "-c", code}}, nil
		}
	}
	for _, app := range []stackApp{
		{name: "numpy", setup: py("import numpy; print(numpy.arange(10).sum())")},
		// by soname, by a path in a bundled directory, below a bundled file
		{name: "failed-dlopen", setup: py("import ctypes\nfor n in ['libnope.so', '/usr/lib/x86_64-linux-gnu/libnope.so', " +
			"'/usr/lib/x86_64-linux-gnu/libm.so.6/x']:\n try:\n  ctypes.CDLL(n)\n except OSError as e:\n  print(e)")},
	} {
		t.Run(app.name, func(t *testing.T) { runStackApp(t, app) })
	}
}

// TestExecZeroOpsTorch: Debian's python3-torch, ~1,000 files. One pilot,
// one build, one native run and two exec runs.
func TestExecZeroOpsTorch(t *testing.T) {
	needTools(t, "strace", "/usr/bin/python3")
	if _, err := os.Stat("/usr/lib/python3/dist-packages/torch/__init__.py"); err != nil {
		t.Fatalf("python3-torch is needed (make deps installs it): %v", err)
	}
	runStackApp(t, stackApp{name: "torch", setup: func(t *testing.T, dir string) ([][]string, []string) {
		return [][]string{{"/usr/bin/python3", "-I", "-c", "import torch; print(torch.tensor([1, 2, 3]).sum().item())"}}, nil
	}})
}

// Interpreters however they are reached: a venv's bin/python (a symlink into
// /usr/bin), a bash script, a "#!/usr/bin/env python3" script. Each prints
// what it sees of itself (argv, /proc/self/exe, sys.executable, sys.prefix),
// which must be the native values.
func TestExecZeroOpsInterpreters(t *testing.T) {
	needTools(t, "strace", "/usr/bin/python3", "/bin/bash")
	show := `import os, sys; print(sys.argv, os.readlink("/proc/self/exe"), sys.executable, sys.prefix, sys.base_prefix)`
	setup := func(t *testing.T, dir string) (venv, app string) {
		venv, app = filepath.Join(dir, "venv"), filepath.Join(dir, "app")
		runIn(t, dir, clitest.CleanEnv(dir), "/usr/bin/python3", "-m", "venv", "--without-pip", "--system-site-packages", venv)
		if err := os.MkdirAll(app, 0o755); err != nil {
			t.Fatal(err)
		}
		write := func(name, text string) {
			if err := os.WriteFile(filepath.Join(app, name), []byte(text), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		write("envpy", "#!/usr/bin/env python3\n"+show+"\n")
		write("run.sh", "#!/bin/bash\necho \"$0 $*\"\n"+venv+"/bin/python -c '"+show+"' x\n"+app+"/envpy y\n")
		return venv, app
	}
	for _, a := range []struct {
		name string
		cmd  func(venv, app string) []string
	}{
		{"venv-python", func(venv, _ string) []string { return []string{venv + "/bin/python", "-c", show, "z"} }},
		{"bash-script-app", func(_, app string) []string { return []string{app + "/run.sh", "a", "b"} }},
		{"env-shebang", func(_, app string) []string { return []string{app + "/envpy", "c"} }},
	} {
		t.Run(a.name, func(t *testing.T) {
			runStackApp(t, stackApp{name: a.name, setup: func(t *testing.T, dir string) ([][]string, []string) {
				venv, app := setup(t, dir)
				return [][]string{a.cmd(venv, app)}, []string{venv, app}
			}, includes: func(dir string) []string {
				return []string{filepath.Join(dir, "venv"), filepath.Join(dir, "app")}
			}})
		})
	}
}

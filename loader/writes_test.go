package loader

// Writes mark only what they change: a write that fails
// marks nothing, one that succeeds marks the name it created, removed or
// changed and its directory's listing, not the directory's whole subtree.
// Counted with strace: the lookups that reach the file system.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/treeimage"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
	"github.com/dlbundle/dlbundle/report"
)

// openToAll gives others r-x on every directory of the stage and on dir's
// ancestors, for tests whose processes run as nobody: a stage is its user's
// own (0700 where it made directories of its own), and nobody runs here.
func openToAll(t testing.TB, stage, dir string) {
	t.Helper()
	filepath.Walk(stage, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			err = os.Chmod(p, fi.Mode().Perm()|0o055)
		}
		if err != nil {
			t.Fatal(err)
		}
		return nil
	})
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// writesTree writes files (path -> content) below root/tree and stages the
// tree (without its ancestors, as squash leaves /tmp out).
func writesTree(t *testing.T, files map[string]string) (root, tree, stage string) {
	t.Helper()
	root = t.TempDir()
	tree = filepath.Join(root, "tree")
	for rel, content := range files {
		p := filepath.Join(tree, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var entries []image.Entry
	for _, e := range treeimage.Entries(t, tree) {
		if e.Path == tree || strings.HasPrefix(e.Path, tree+"/") {
			entries = append(entries, e)
		}
	}
	stage = stageEntries(t, root, entries)
	openToAll(t, stage, root)
	return root, tree, stage
}

// straceTree runs argv under strace (as cred, nil: root) with env and
// returns its output and the calls on paths below tree, but for the calls
// named in skip (the app's own writes, which always reach the kernel).
func straceTree(t *testing.T, env []string, cred *syscall.Credential, tree string, skip []string, argv ...string) (string, []string) {
	t.Helper()
	if _, err := exec.LookPath("strace"); err != nil {
		t.Fatal("strace is needed (make deps)")
	}
	log := filepath.Join(t.TempDir(), "strace.log")
	if err := os.Chmod(filepath.Dir(log), 0o777); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("strace", append([]string{"-f", "-qq", "-e", "trace=%file,getdents64", "-y", "-o", log, "--"}, argv...)...)
	cmd.Env, cmd.Dir = env, "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, out)
	}
	var calls []string
	for p, lines := range straceOps(t, log, "/") {
		if p != tree && !strings.HasPrefix(p, tree+"/") {
			continue
		}
	line:
		for _, l := range lines {
			for _, s := range skip {
				if strings.Contains(l, " "+s+"(") {
					continue line
				}
			}
			calls = append(calls, l)
		}
	}
	return string(out), calls
}

// TestFailedMkdirKeepsImage: a user importing from a read-only software
// tree without .pyc files fails to mkdir __pycache__ (EACCES) for every
// package; the packages stay served from the image (on main 9f80a42 the
// failed mkdir marked the package directory and its later imports went to
// the file system).
func TestFailedMkdirKeepsImage(t *testing.T) {
	_, tree, stage := writesTree(t, map[string]string{"pkg/__init__.py": "", "pkg/a.py": "A = 1\n",
		"pkg/b.py": "B = 2\n", "pkg/sub/__init__.py": "", "pkg/sub/c.py": "C = 3\n", "other/x.txt": "x\n"})
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	// Bytecode writing on: Python tries each package's __pycache__.
	base := []string{"PATH=/usr/bin:/bin", "HOME=/", "LANG=C.UTF-8"}
	code := "import sys; sys.path.insert(0, sys.argv[1]); import pkg.a, pkg.b, pkg.sub.c, os; " +
		"print(pkg.a.A + pkg.b.B + pkg.sub.c.C, os.path.exists(sys.argv[1] + '/other/x.txt'))"
	argv := []string{"/usr/bin/python3", "-I", "-c", code, tree}
	native, nativeCalls := straceTree(t, base, nobody, tree, nil, argv...)
	if !strings.Contains(native, "6 True") {
		t.Fatalf("native run: %s", native)
	}
	failed := 0
	for _, l := range nativeCalls {
		if strings.Contains(l, "mkdir(") && strings.Contains(l, "__pycache__") && strings.Contains(l, "EACCES") {
			failed++
		}
	}
	if failed < 2 {
		t.Fatalf("natively Python made %d failing mkdir of __pycache__ (want one per package); the test does not test that:\n%s",
			failed, strings.Join(nativeCalls, "\n"))
	}
	shim, calls := straceTree(t, ShimEnv(stage, base, EnvOptions{}), nobody, tree, []string{"mkdir"}, argv...)
	if shim != native {
		t.Errorf("output under the shim %q, natively %q", shim, native)
	}
	if len(calls) > 0 {
		t.Errorf("after the failed mkdir of __pycache__, %d lookups in the read-only tree went to the file system:\n%s",
			len(calls), strings.Join(calls, "\n"))
	}
}

// TestWriteMarksOnlyTheName: a file created in a bundled directory is seen
// (its lookups and the directory's listing go to the kernel), while the
// directory's other names, its subdirectories and their listings stay
// answered from the table.
func TestWriteMarksOnlyTheName(t *testing.T) {
	_, tree, stage := writesTree(t, map[string]string{"d/old.txt": "old\n", "d/sub/x.txt": "x\n",
		"d/pkg/__init__.py": "", "d/pkg/m.py": "M = 7\n"})
	base := []string{"PATH=/usr/bin:/bin", "HOME=/", "LANG=C.UTF-8"}
	code := `import os, sys
d = sys.argv[1] + '/d'
with open(d + '/new.txt', 'w') as f:
    f.write('new')
sys.path.insert(0, d)
import pkg.m
print(sorted(os.listdir(d)), os.path.exists(d + '/new.txt'), os.stat(d + '/old.txt').st_size,
      os.listdir(d + '/sub'), os.path.exists(d + '/nope'), pkg.m.M)
os.unlink(d + '/new.txt')
print(os.path.exists(d + '/new.txt'), sorted(os.listdir(d)))
`
	argv := []string{"/usr/bin/python3", "-I", "-B", "-c", code, tree}
	native, _ := straceTree(t, base, nil, tree, nil, argv...)
	want := "['new.txt', 'old.txt', 'pkg', 'sub'] True 4 ['x.txt'] False 7\nFalse ['old.txt', 'pkg', 'sub']\n"
	if native != want {
		t.Fatalf("native run: %q, want %q", native, want)
	}
	shim, calls := straceTree(t, ShimEnv(stage, base, EnvOptions{}), nil, tree, []string{"openat", "unlink"}, argv...)
	if shim != native {
		t.Errorf("output under the shim %q, natively %q", shim, native)
	}
	// What may reach the kernel: d/new.txt (created, then removed) and d
	// itself (its listing and attributes changed). Nothing else.
	d := tree + "/d"
	var others []string
	for _, l := range calls {
		if !strings.Contains(l, `"`+d+`/new.txt"`) && !strings.Contains(l, `"`+d+`"`) && !strings.Contains(l, "<"+d+">") {
			others = append(others, l)
		}
	}
	if len(others) > 0 {
		t.Errorf("after a file was created in %s, %d lookups of its other names went to the file system:\n%s",
			d, len(others), strings.Join(others, "\n"))
	}
}

// TestReportFallbacks: lookups passed through because
// the process wrote (read-your-writes) or because the shim had no table are
// counted by reason and directory, and `dlbundle report` says so first.
// On main 9f80a42 the report had no such field and counted them as paths
// the image lacks.
func TestReportFallbacks(t *testing.T) {
	root, tree, stage := writesTree(t, map[string]string{"d/a.txt": "a\n", "d/sub/x": "x\n"})
	base := []string{"PATH=/usr/bin:/bin", "HOME=/", "LANG=C.UTF-8"}
	reportFile := filepath.Join(root, "report.jsonl")
	code := `import os, sys
d = sys.argv[1] + '/d'
open(d + '/new.txt', 'w').close()
for i in range(3):
    os.stat(d + '/new.txt')
os.listdir(d)
os.stat(d + '/a.txt')
os.unlink(d + '/new.txt')
`
	runProbe(t, "", []string{"/usr/bin/python3", "-I", "-B", "-c", code, tree}, ShimEnv(stage, base, EnvOptions{Report: reportFile}))
	// A stage without its table: the shim is inactive in every process.
	broken := filepath.Join(root, "broken")
	if err := os.MkdirAll(filepath.Join(broken, stagefmt.ShimDir), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, obj := range stagefmt.ShimObjects {
		if err := os.WriteFile(filepath.Join(broken, stagefmt.ShimDir, name), obj, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	runProbe(t, "", []string{"/usr/bin/python3", "-I", "-B", "-c", "import os; os.stat('/')"},
		ShimEnv(broken, base, EnvOptions{Report: reportFile}))

	f, err := os.Open(reportFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rs, bad, err := report.ReadReports(f)
	if err != nil || bad != 0 || len(rs) != 2 {
		t.Fatalf("report: %d lines, %d bad, %v", len(rs), bad, err)
	}
	got := map[report.Fallback]bool{}
	for _, r := range rs {
		for _, fb := range r.Fallbacks {
			got[report.Fallback{Reason: fb.Reason, Dir: fb.Dir}] = true
			if fb.Reason == "written" && fb.Dir == tree+"/d/new.txt" && fb.Lookups < 3 {
				t.Errorf("%d lookups of the created file counted, want >= 3", fb.Lookups)
			}
		}
		for _, p := range r.PassedPaths {
			if strings.HasPrefix(p, tree+"/d") {
				t.Errorf("%s listed as a path the image lacks; it passed through because the process wrote", p)
			}
		}
	}
	for _, want := range []report.Fallback{{Reason: "written", Dir: tree + "/d/new.txt"}, {Reason: "written", Dir: tree + "/d"},
		{Reason: "no-table", Dir: broken}} {
		if !got[want] {
			t.Errorf("report lacks fallback %+v; it has %v", want, got)
		}
	}
	var text strings.Builder
	s := report.Summarize(rs)
	if err := s.WriteText(&text, 30); err != nil {
		t.Fatal(err)
	}
	first := strings.SplitN(text.String(), "\n", 2)[0]
	if !strings.Contains(first, "lookups in 1 process went to the file system because") {
		t.Errorf("dlbundle report does not begin with the fallbacks:\n%s", text.String())
	}
	// --debug says when it starts.
	out := runProbe(t, "", []string{"/usr/bin/python3", "-I", "-B", "-c", code, tree}, ShimEnv(stage, base, EnvOptions{Debug: true}))
	if want := "written " + tree + "/d/new.txt: from now on lookups at or below it go to the file system"; !strings.Contains(out, want) {
		t.Errorf("the debug log lacks %q:\n%s", want, grepLines(out, "written"))
	}
	t.Logf("dlbundle report:\n%s", text.String())
}

package loader

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/treeimage"
)

// TestChildOfAnotherUser: a child that runs as another
// user (subprocess.run(user='nobody'), runuser) cannot read the 0700
// stage. It runs the original files, without the shim, as natively: the
// same output and exit status, no ld.so "cannot be preloaded" lines, and a
// program the image does not hold runs although LD_LIBRARY_PATH was mapped
// into the stage. On main 9f80a42 the first raised PermissionError on
// /usr/bin/python3.
func TestChildOfAnotherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("runs as root (it switches to nobody)")
	}
	root := t.TempDir()
	lib := filepath.Join(root, "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", filepath.Join(lib, "libdep.so"), "testdata/libdep.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	var entries []image.Entry
	for _, e := range treeimage.Entries(t, "/usr/bin/python3", "/usr/bin/python3.11", lib) {
		if e.Path == "/usr/bin/python3" || e.Path == "/usr/bin/python3.11" || strings.HasPrefix(e.Path, root) {
			entries = append(entries, e)
		}
	}
	stage := stageEntries(t, root, entries)
	if err := os.Chmod(stage, 0o700); err != nil {
		t.Fatal(err)
	}
	for d := root; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := StagedPath(stage, "/usr/bin/python3"); !ok {
		t.Fatal("python3 is not bundled")
	}
	// LD_LIBRARY_PATH names a bundled directory: exec maps it into the stage.
	base := []string{"PATH=/usr/bin:/bin", "HOME=/", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1", "LD_LIBRARY_PATH=" + lib}
	code := `import subprocess
for argv in (['/usr/bin/python3', '-c', 'import os; print(os.getuid(), os.environ.get("LD_LIBRARY_PATH"))'], ['/bin/ls', '-d', '/'], ['python3', '-c', 'print("path")']):
    r = subprocess.run(argv, user='nobody', capture_output=True)
    print(r.returncode, r.stdout, r.stderr)
r = subprocess.run(['/usr/sbin/runuser', '-u', 'nobody', '--', '/usr/bin/python3', '-c', 'import os; print(os.geteuid())'], capture_output=True)
print(r.returncode, r.stdout, r.stderr)
`
	argv := []string{"/usr/bin/python3", "-I", "-c", code}
	native := runProbe(t, "", argv, base)
	want := "0 b'65534 " + lib + "\\n' b''\n0 b'/\\n' b''\n0 b'path\\n' b''\n0 b'65534\\n' b''\n"
	if native != want {
		t.Fatalf("natively:\n%s\nwant:\n%s", native, want)
	}
	staged, _ := StagedPath(stage, "/usr/bin/python3")
	if shim := runProbe(t, staged, argv, ShimEnv(stage, base, EnvOptions{})); shim != native {
		t.Errorf("under the shim:\n%s\nnatively:\n%s", shim, native)
	}
}

package materialize

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/treeimage"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// envMaterializeChild makes the test binary a stager run as another user: it
// materializes <dir>/app.dlimg into <dir>/stage.
const envMaterializeChild = "DLBUNDLE_TEST_MATERIALIZE_CHILD"

// A user who is not root stages an image of a read-only directory (mode
// 0555, as in a Nix store) whose listing names a subdirectory the image does
// not bundle that ld.so may probe (tls/). The staged tree must mirror that
// subdirectory (ld.so stats it) and keep the directory's mode and mtime.
// Before, the mirror was made after the modes were set, and staging failed
// with "permission denied" for every user but root, whom permission checks
// do not stop. A listed subdirectory ld.so never probes is not made: the
// table lists it.
func TestMaterializeReadOnlyDirAsUnprivilegedUser(t *testing.T) {
	if dir := os.Getenv(envMaterializeChild); dir != "" {
		im, err := image.OpenFile(filepath.Join(dir, "app.dlimg"))
		if err != nil {
			t.Fatal(err)
		}
		defer im.Close()
		stage := filepath.Join(dir, "stage")
		if err := os.Mkdir(stage, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := Materialize(context.Background(), im, stage, Options{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to run the stager as another user") // make test runs as root (CI too)
	}
	top := t.TempDir()
	for _, d := range []string{filepath.Dir(top), top} { // testing's temp dirs are private to root
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tree := filepath.Join(top, "app")
	ro := filepath.Join(tree, "lib")
	for _, d := range []string{filepath.Join(ro, "tls"), filepath.Join(ro, "unused"), filepath.Join(ro, "used")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ro, "used", "f"), []byte("f\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(ro, 0o755) })
	var entries []image.Entry
	for _, e := range treeimage.Entries(t, tree) {
		if e.Path != filepath.Join(ro, "unused") && e.Path != filepath.Join(ro, "tls") {
			entries = append(entries, e)
		}
	}
	work := filepath.Join(top, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	treeimage.Write(t, filepath.Join(work, "app.dlimg"), entries)
	if err := os.Chown(work, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	// The test binary's own directory is private to root: run a copy.
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(top, "materialize.test")
	if err := os.WriteFile(child, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(child, "-test.run=^TestMaterializeReadOnlyDirAsUnprivilegedUser$", "-test.count=1")
	cmd.Env = append(os.Environ(), envMaterializeChild+"="+work)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("staging as uid 65534: %v\n%s", err, out)
	}
	staged := filepath.Join(work, "stage", stagefmt.RootDir, ro)
	if st, err := os.Stat(filepath.Join(staged, "tls")); err != nil || !st.IsDir() {
		t.Errorf("the unbundled subdirectory tls/ of the listing is not mirrored: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(staged, "unused")); err == nil {
		t.Errorf("the unbundled subdirectory unused/, which ld.so never probes, was made in the stage")
	}
	var orig, got syscall.Stat_t
	if err := syscall.Stat(ro, &orig); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(staged, &got); err != nil {
		t.Fatal(err)
	}
	if got.Mode&0o7777 != 0o555 || got.Mtim != orig.Mtim {
		t.Errorf("staged %s: mode %o, mtime %v; want 0555 and the original's %v", ro, got.Mode&0o7777, got.Mtim, orig.Mtim)
	}
}

package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Regression: the parents of --stage-dir were created with MkdirAll,
// which follows whatever symlink another user planted on the way. Uid 1001
// plants /tmp/a -> a directory only root may write; root's
// `--stage-dir /tmp/a/b/stage` must refuse before creating anything there
// (fs.protected_symlinks is 0 here, as it may be on a site's nodes).
func TestStageDirParentsDoNotFollowOthersSymlink(t *testing.T) {
	needRoot(t)
	top := publicDir(t)
	tmp := stickyDir(t, top, "tmp")
	rootOnly := filepath.Join(top, "root-only")
	if err := os.Mkdir(rootOnly, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, code := runAs(t, attackerUID, nil, "/bin/ln", "-s", rootOnly, filepath.Join(tmp, "a")); code != 0 {
		t.Fatalf("ln as uid 1001: %s", out)
	}
	_, _, err := OpenStageDirFor(filepath.Join(tmp, "a", "b", "stage"))
	if !errors.Is(err, ErrUnsafeStageDir) || !strings.Contains(err.Error(), "a symbolic link of uid 1001") {
		t.Errorf("stage dir through uid 1001's symlink: %v; want a refusal naming the link's owner", err)
	}
	if left, _ := os.ReadDir(rootOnly); len(left) != 0 {
		t.Errorf("root created %v in the directory the attacker's symlink chose", left)
	}
	// The same walk through root's own link, and creating missing parents
	// below a sticky directory, are fine.
	if err := os.Symlink(tmp, filepath.Join(top, "link")); err != nil {
		t.Fatal(err)
	}
	got, err := OpenStageDir(filepath.Join(top, "link", "x", "y", "stage"))
	if want := filepath.Join(tmp, "x", "y", "stage"); err != nil || got != want {
		t.Errorf("through root's symlink: %q, %v; want %s", got, err, want)
	}
	// A relative link with .. is resolved as the kernel would.
	if err := os.Symlink("../tmp/x", filepath.Join(top, "root-only", "rel")); err != nil {
		t.Fatal(err)
	}
	got, err = OpenStageDir(filepath.Join(rootOnly, "rel", "y", "stage"))
	if want := filepath.Join(tmp, "x", "y", "stage"); err != nil || got != want {
		t.Errorf("through a relative symlink: %q, %v; want %s", got, err, want)
	}
}

// Regression: a 4,000-byte --stage-dir of 2,000 components was refused
// (too long for the shim) only after its parents were created one by one,
// each mkdir and lstat walking the whole path again from / (O(n²) lookups:
// 1,992 mkdirat and 5,980 newfstatat, 31 s on the red team's machine). It is
// refused before anything is created.
func TestStageDirTooLongRefusedBeforeCreating(t *testing.T) {
	top := t.TempDir()
	long := filepath.Join(top, "long", strings.Repeat("a/", 1990)+"stage")
	_, _, err := OpenStageDirFor(long)
	if err == nil || !strings.Contains(err.Error(), "use a shorter --stage-dir") {
		t.Errorf("a %d-byte stage dir: %v; want a refusal", len(long), err)
	}
	if _, err := os.Lstat(filepath.Join(top, "long")); err == nil {
		t.Errorf("the parents of a refused stage dir were created")
	}
}

package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// A stage dir below a directory that others can write into (and that is not
// sticky), or below one owned by another user, is refused: they could swap
// the stage dir's name between the check and ld.so loading the shim by path
// (a RENAME_EXCHANGE attacker once got their preload.so loaded in
// 5 of 40 runs). Sticky directories (/tmp, /dev/shm) and symlinks into safe
// places are fine; the path returned is the one checked.
func TestOpenStageDirChecksAncestors(t *testing.T) {
	tmp := t.TempDir()
	mk := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(tmp, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if uid >= 0 {
			if err := os.Chown(p, uid, -1); err != nil {
				t.Fatalf("chown (the tests run as root): %v", err)
			}
		}
		return p
	}
	shared := mk("shared", 0o777, -1)
	groupw := mk("groupw", 0o775, -1)
	sticky := mk("sticky", 0o777|os.ModeSticky, -1)
	other := mk("other", 0o755, 1001)
	for _, c := range []struct {
		dir, want string
	}{
		{filepath.Join(shared, "stage"), "writable by others and not sticky"},
		{filepath.Join(shared, "deeper", "stage"), "writable by others and not sticky"},
		{filepath.Join(groupw, "stage"), "writable by others and not sticky"},
		{filepath.Join(other, "stage"), "owned by uid 1001"},
	} {
		_, _, err := OpenStageDirFor(c.dir)
		if !errors.Is(err, ErrUnsafeStageDir) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "given by --stage-dir") {
			t.Errorf("%s: %v, want a refusal saying %q", c.dir, err, c.want)
		}
	}
	if _, err := os.Lstat(filepath.Join(shared, "stage")); err == nil {
		t.Errorf("a refused stage dir was created")
	}
	if _, err := OpenStageDir(filepath.Join(sticky, "stage")); err != nil {
		t.Errorf("below a sticky directory: %v", err)
	}
	// A symlink among the ancestors is resolved; its target is what is checked.
	if err := os.Symlink(sticky, filepath.Join(tmp, "link")); err != nil {
		t.Fatal(err)
	}
	got, err := OpenStageDir(filepath.Join(tmp, "link", "stage2"))
	if err != nil || got != filepath.Join(sticky, "stage2") {
		t.Errorf("through a symlink: %q, %v; want %s", got, err, filepath.Join(sticky, "stage2"))
	}
	if err := os.Symlink(shared, filepath.Join(tmp, "badlink")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStageDir(filepath.Join(tmp, "badlink", "stage")); !errors.Is(err, ErrUnsafeStageDir) {
		t.Errorf("through a symlink to a shared dir: %v, want a refusal", err)
	}
}

// The shim opens --report FILE with O_NOFOLLOW: a symlink planted at FILE
// does not get the report appended to its target (a victim's
// ~/.profile).
func TestExecReportDoesNotFollowSymlink(t *testing.T) {
	p := clitest.NewProbeImage(t)
	victim := filepath.Join(p.Work, "profile")
	if err := os.WriteFile(victim, []byte("export PATH\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(p.Work, "report.jsonl")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	stage := filepath.Join(p.Work, "stage")
	_, stderr, _, state := clitest.RunCLI(t, clitest.CleanEnv(p.Work), "exec", "--stage-dir", stage, "--report", link, p.Image, "--", p.Original)
	if state.ExitCode() != 0 {
		t.Fatalf("exec: status %d, stderr %q", state.ExitCode(), stderr)
	}
	if b, _ := os.ReadFile(victim); string(b) != "export PATH\n" {
		t.Errorf("the report was written through the symlink into its target: %q", b)
	}
	// The same run with a plain path writes the report (so the above proves something).
	plain := filepath.Join(p.Work, "plain.jsonl")
	clitest.RunCLI(t, clitest.CleanEnv(p.Work), "exec", "--stage-dir", stage, "--report", plain, p.Image, "--", p.Original)
	if b, err := os.ReadFile(plain); err != nil || len(b) == 0 {
		t.Errorf("no report written to a plain path: %v", err)
	}
}

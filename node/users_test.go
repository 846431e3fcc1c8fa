package node

// Helpers for the tests that play several users of a shared node: root,
// uid 1001 (the attacker), uid 1002 (the victim). The tests run as root.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

const (
	attackerUID = 1001
	victimUID   = 1002
)

// asUser returns credentials of uid (its own group, no others).
func asUser(uid uint32) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
}

// needRoot skips a test that plays other users when not run as root.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("plays uids 1001 and 1002: needs root (make test runs as root)")
	}
}

// makePublic lets every user reach dir: it and its parent (t.TempDir's
// parent is private to root) get mode 0755.
func makePublic(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// publicDir is a new empty directory that every user can reach (not write).
func publicDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	makePublic(t, d)
	return d
}

// stickyDir makes dir/name a world-writable sticky directory, like /tmp.
func stickyDir(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return p
}

// publicCLI copies the dlbundle CLI into dir (the build cache is private
// to root), so that other users can run it.
func publicCLI(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(clitest.CLI(t))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "dlbundle")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// runAs runs argv as uid (0: root) with env and returns its combined output
// and exit status.
func runAs(t *testing.T, uid uint32, env []string, argv ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = "/"
	if uid != 0 {
		cmd.SysProcAttr = asUser(uid)
	}
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

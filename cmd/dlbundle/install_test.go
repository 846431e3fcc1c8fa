package main

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// README's install line, run in a clean clone, gives what `make` gives: a
// static binary (ranks exec it from the shared file system: no ld.so, no
// library search) that reports the commit it was built from.
func TestReadmeInstallLineGivesMakesBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds dlbundle twice in a clone")
	}
	line := readmeInstallLine(t)
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	sh := func(wd, script string, env ...string) string {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Dir = wd
		// A user's environment: no CGO_ENABLED (make test exports 0), and
		// VCS stamping on (this machine's go env says -buildvcs=false).
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, "CGO_ENABLED=") && !strings.HasPrefix(e, "GOFLAGS=") {
				cmd.Env = append(cmd.Env, e)
			}
		}
		cmd.Env = append(append(cmd.Env, "GOFLAGS=-buildvcs=auto"), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	sh(dir, "git clone -q "+strings.TrimSpace(string(top))+" src")
	rev := sh(src, "git rev-parse --short=12 HEAD")
	sh(src, line, "GOBIN="+filepath.Join(dir, "gobin"))
	sh(src, "make -s build")
	for _, bin := range []string{filepath.Join(dir, "gobin", "dlbundle"), filepath.Join(src, "bin", "dlbundle")} {
		if v := sh(dir, bin+" --version"); v != rev {
			t.Errorf("%s --version = %q, want the commit %q", bin, v, rev)
		}
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s is dynamically linked (%v)", bin, p.Type)
			}
		}
		f.Close()
	}
}

// readmeInstallLine is the go install command of README's Set-up section.
func readmeInstallLine(t *testing.T) string {
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, "go install") && strings.Contains(l, "./cmd/dlbundle") && !strings.Contains(l, "`") {
			return l
		}
	}
	t.Fatal("README.md has no go install line")
	return ""
}

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dlbundle/dlbundle/image"
)

// publicTempDir is a new directory every user can reach (t.TempDir and its
// parent are private to their creator).
func publicTempDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// Regression: files the pilot read were bundled whatever their mode and
// the image was chmod 0644 whatever the umask: a 0600 ~/.netrc the pilot read
// was readable by every user from the image on shared storage. The image is
// now no more readable than its least readable input (a file's mode, or a
// directory above it that others cannot search), within the umask, and the
// summary says which inputs were private.
func TestBuildImageNoMoreReadableThanInputs(t *testing.T) {
	dir := publicTempDir(t)
	t.Chdir(dir)
	app := filepath.Join(dir, "app")
	home := filepath.Join(dir, "home")
	for _, d := range []string{app, home} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]os.FileMode{app + "/lib.so": 0o644, app + "/.netrc": 0o600, home + "/conf": 0o644}
	for p, m := range files {
		if err := os.WriteFile(p, []byte("x "+p), m); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, m)
	}
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	build := func(name string, umask int, inputs ...string) (os.FileMode, string) {
		t.Helper()
		writeTestTrace(t, name+".trace", inputs...)
		syscall.Umask(umask)
		var out bytes.Buffer
		c := &BuildCmd{Output: name + ".dlimg", Level: 1, Include: []string{dir}, Traces: []string{name + ".trace"}, summary: &out}
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(name + ".dlimg")
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode().Perm(), out.String()
	}
	if mode, out := build("public", 0o022, app+"/lib.so"); mode != 0o644 || strings.Contains(out, "private") {
		t.Errorf("public inputs, umask 022: image mode %04o, want 0644; summary:\n%s", mode, out)
	}
	mode, out := build("netrc", 0o022, app+"/lib.so", app+"/.netrc")
	if mode != 0o600 || !strings.Contains(out, "1 private input(s)") || !strings.Contains(out, app+"/.netrc (mode 0600)") || !strings.Contains(out, "--exclude") {
		t.Errorf("a 0600 input: image mode %04o, want 0600, and the summary naming it; summary:\n%s", mode, out)
	}
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if mode, out := build("home", 0o002, home+"/conf"); mode != 0o660&^0o060 || !strings.Contains(out, "below "+home+", mode 0700") {
		t.Errorf("a 0644 file below a 0700 directory: image mode %04o, want 0600; summary:\n%s", mode, out)
	}
	if mode, _ := build("umask", 0o077, app+"/lib.so"); mode != 0o600 {
		t.Errorf("umask 077: image mode %04o, want 0600", mode)
	}
}

// Regression: as root, `build` of a user's trace bundled root-only
// files the trace named (a trace is a list of paths its writer chose). Root
// now builds a user's traces as that user: uid 1001's trace naming a
// root-only file fails to build, naming the file, and writes no image; its
// trace of its own files builds, and the image is the user's.
func TestBuildAsRootOfUsersTraceReadsAsTheUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (make test runs as root)")
	}
	dir := publicTempDir(t)
	self, err := os.ReadFile(buildCLI(t))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "dlbundle")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "root-only")
	if err := os.WriteFile(secret, []byte("root's secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	user := filepath.Join(dir, "user")
	if err := os.Mkdir(user, 0o755); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(user, "lib.so")
	if err := os.WriteFile(mine, []byte("the user's library"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(user)
	writeTestTrace(t, "steal.trace", mine, secret)
	writeTestTrace(t, "own.trace", mine)
	for _, p := range []string{user, mine, "steal.trace", "own.trace"} {
		if err := os.Chown(p, 1001, 1001); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	out, code := run("build", "--include", dir, "-o", "steal.dlimg", "steal.trace")
	if code == 0 || !strings.Contains(out, "building as that user") || !strings.Contains(out, "root-only") {
		t.Errorf("root's build of uid 1001's trace naming a root-only file: exit %d; want a failure naming it:\n%s", code, out)
	}
	if _, err := os.Stat("steal.dlimg"); err == nil {
		t.Errorf("an image was written from the trace naming root's file")
	}
	out, code = run("build", "--include", dir, "-o", "own.dlimg", "own.trace")
	if code != 0 {
		t.Fatalf("root's build of uid 1001's own files: exit %d:\n%s", code, out)
	}
	var st syscall.Stat_t
	if err := syscall.Stat("own.dlimg", &st); err != nil || st.Uid != 1001 {
		t.Errorf("the image of uid 1001's trace is owned by uid %d, want 1001 (%v)", st.Uid, err)
	}
	if im, err := image.OpenFile("own.dlimg"); err != nil {
		t.Error(err)
	} else {
		im.Close()
	}
}

package platform

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestForeignArchImageRefused: an image of aarch64 programs (traced and
// built in the arm64 chroot, under qemu-user) staged on this x86-64 node.
// exec and env exit 1 before anything runs, with one line that names the
// two architectures and the ways out (--fallback among them), and publish
// no stage; with --fallback, exec runs the command natively (the node's
// /bin/ls, its native output) and env prints no variable, each with one
// warning line.
func TestForeignArchImageRefused(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the arm64 chroot is prepared for an x86-64 host")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root (chroot, mount namespaces); make test runs as root")
	}
	root := filepath.Join(chrootRoot(), "bookworm-arm64")
	if _, err := os.Stat(filepath.Join(root, "usr/bin/python3")); err != nil {
		t.Skipf("chroot bookworm-arm64 absent (%v): `make deps` prepares it", err)
	}
	if _, err := os.Stat("/proc/sys/fs/binfmt_misc/qemu-aarch64"); err != nil {
		t.Fatalf("qemu-aarch64 is not registered with binfmt_misc (%v): `make deps` registers it", err)
	}
	arm := newChroot(t, chroots[0], root)
	arm.must(t, arm.work+"/dlbundle-amd64", "trace", "-q", "-o", arm.work+"/ls.trace", "--", "/bin/ls", "--version")
	arm.must(t, arm.work+"/dlbundle-amd64", "build", "-o", arm.work+"/ls.dlimg", arm.work+"/ls.trace")
	img := filepath.Join(arm.host, "ls.dlimg")

	cli := dlbundleFor(t, "amd64")
	dir := t.TempDir()
	stage := filepath.Join(dir, "stage")
	run := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Dir, cmd.Env = dir, []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "LANG=C.UTF-8"}
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		code = 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return o.String(), e.String(), code
	}
	oneLine := func(what, stderr string, words ...string) {
		t.Helper()
		if strings.Count(strings.TrimRight(stderr, "\n"), "\n") != 0 || stderr == "" {
			t.Errorf("%s: stderr is not one line:\n%s", what, stderr)
		}
		for _, w := range words {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr does not say %q:\n%s", what, w, stderr)
			}
		}
	}
	native, err := exec.Command("/bin/ls", "--version").Output()
	if err != nil {
		t.Fatal(err)
	}

	out, errOut, code := run("exec", "--stage-dir", stage, img, "--", "/bin/ls", "--version")
	if code != 1 || out != "" {
		t.Errorf("exec of an aarch64 image on x86_64: exit %d, stdout %q (want 1, nothing run)", code, out)
	}
	oneLine("exec", errOut, "image is for aarch64, this node is x86_64", "run it on aarch64 nodes", "--fallback")
	if ldsoNoise.MatchString(errOut) {
		t.Errorf("exec: ld.so's noise, not the stager's line:\n%s", errOut)
	}
	out, errOut, code = run("env", "--stage-dir", stage, img)
	if code != 1 || out != "" {
		t.Errorf("env of an aarch64 image on x86_64: exit %d, stdout %q (want 1, no variable)", code, out)
	}
	oneLine("env", errOut, "image is for aarch64, this node is x86_64", "--fallback")
	if published, _ := filepath.Glob(filepath.Join(stage, "sha256-*")); len(published) != 0 {
		t.Errorf("a refused image was staged: %v", published)
	}

	out, errOut, code = run("exec", "--fallback", "--stage-dir", stage, img, "--", "/bin/ls", "--version")
	if code != 0 || out != string(native) {
		t.Errorf("exec --fallback: exit %d, stdout %q, want the node's /bin/ls natively %q", code, out, native)
	}
	oneLine("exec --fallback", errOut, "warning", "image is for aarch64", "natively")
	out, errOut, code = run("env", "--fallback", "--stage-dir", stage, img)
	if code != 0 || strings.Contains(out, "LD_") || strings.Contains(out, "DLBUNDLE") {
		t.Errorf("env --fallback: exit %d, stdout %q, want no variable", code, out)
	}
	oneLine("env --fallback", errOut, "warning", "image is for aarch64", "natively")
}

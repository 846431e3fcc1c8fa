package cluster

// An image built on a node of another glibc (Debian 11's 2.31, from the
// chroot `make deps` prepares) served by the Slurm plugin on the fake
// cluster's nodes (this machine's glibc): every task runs under the image's
// own ld.so and libc and prints what it prints on the build node.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
)

// buildChroot is a Debian root of another release, as a pilot node.
type buildChroot struct {
	root, work string // work: inside the chroot, host path root+work
}

func newBuildChroot(t *testing.T, name string) *buildChroot {
	t.Helper()
	dir := os.Getenv("DLBUNDLE_CHROOTS")
	if dir == "" {
		dir = "/var/cache/dlbundle/chroots"
	}
	root := filepath.Join(dir, name)
	if _, err := os.Stat(filepath.Join(root, "usr/bin/python3")); err != nil {
		t.Skipf("chroot %s absent (%v): `make deps` prepares it", name, err)
	}
	var b [6]byte
	rand.Read(b[:])
	c := &buildChroot{root: root, work: "/tmp/dlbundle-cluster-" + hex.EncodeToString(b[:])}
	if err := os.MkdirAll(filepath.Join(root, c.work), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(root, c.work)) })
	data, err := os.ReadFile(dlb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, c.work, "dlbundle"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	return c
}

// run runs argv in the chroot with /proc mounted in a mount namespace of
// its own (nothing is mounted on the shared chroot).
func (c *buildChroot) run(t *testing.T, argv ...string) string {
	t.Helper()
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c",
		`/usr/bin/mount -t proc proc "$0/proc" && cd "$0" && exec /usr/sbin/chroot "$0" "$@"`, c.root}, argv...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + c.work, "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("in %s: %s: %v\n%s%s", c.root, strings.Join(argv, " "), err, o.String(), e.String())
	}
	return o.String()
}

// crossScript prints the glibc the process runs with (os.confstr asks the
// libc it is linked with) beside what numpy and Python say: the build
// node's line only under the image's ld.so and libc.
const crossScript = `import os, sys, numpy; print(os.confstr("CS_GNU_LIBC_VERSION"), numpy.arange(10).sum(), numpy.__version__, sys.version_info[:2], sys.executable)`

// TestSpankCrossGlibc: python3 with numpy traced and built on Debian 11
// (glibc 2.31) and on Debian 13 (2.41), each served by srun --dlbundle on 3
// nodes of glibc 2.36 (this machine): each task prints the build node's
// native line, its glibc included (under the node's ld.so an older image's
// process gets the node's libc and prints the node's version, a newer
// image's dies before main); a bare command name too.
func TestSpankCrossGlibc(t *testing.T) {
	needSpank(t)
	for _, c := range []struct{ chroot, glibc string }{{"bullseye-amd64", "2.31"}, {"trixie-amd64", "2.41"}} {
		t.Run(c.chroot, func(t *testing.T) {
			build := newBuildChroot(t, c.chroot)
			argv := []string{"/usr/bin/python3", "-c", crossScript}
			native := strings.TrimSpace(build.run(t, argv...))
			if !strings.HasPrefix(native, "glibc "+c.glibc+" ") {
				t.Fatalf("natively on %s: %q; want glibc %s", c.chroot, native, c.glibc)
			}
			host, err := exec.Command(argv[0], argv[1:]...).Output()
			if err == nil && strings.TrimSpace(string(host)) == native {
				t.Fatalf("this machine prints the build node's line natively too (%q): the test cannot tell", native)
			}
			build.run(t, append([]string{build.work + "/dlbundle", "trace", "-q", "-o", build.work + "/app.trace", "--"}, argv...)...)
			build.run(t, build.work+"/dlbundle", "build", "-o", build.work+"/app.dlimg", build.work+"/app.trace")
			data, err := os.ReadFile(filepath.Join(build.root, build.work, "app.dlimg"))
			if err != nil {
				t.Fatal(err)
			}
			img := filepath.Join(shared.Shared, "cross-"+c.chroot+".dlimg")
			if err := os.WriteFile(img, data, 0o644); err != nil {
				t.Fatal(err)
			}
			stage := "/dev/shm/t-spank-cross-" + c.chroot
			r := srunDlbundle(t, stage, append([]string{"-N3", "--ntasks-per-node=1", "--dlbundle=" + img}, argv...)...)
			if r.code != 0 || strings.Count(r.out, native+"\n") != 3 {
				t.Fatalf("srun --dlbundle= of %s's image on 3 nodes of this machine's glibc: exit %d; want 3 lines %q:\n%s\n%s",
					c.chroot, r.code, native, r.out, shared.Logs())
			}
			// A bare command (Slurm 22.05's srun passes it as given): found
			// in the job's PATH inside the stage, as exec finds it.
			// (PATH as on the build node: Python takes sys.executable from
			// the first python3 in it)
			cmd := shared.Command("srun", "-N3", "--ntasks-per-node=1", "--dlbundle="+img, "python3", "-c", crossScript)
			cmd.Env = append(cmd.Env, "DLBUNDLE_STAGE_DIR="+stage, "PATH=/usr/bin:/bin")
			r = runCmd(t, cmd)
			if r.code != 0 || strings.Count(r.out, native+"\n") != 3 {
				t.Fatalf("srun --dlbundle= python3 (bare) of %s's image: exit %d; want 3 lines %q:\n%s", c.chroot, r.code, native, r.out)
			}
			// The stages say so: an ldso record on every node.
			for _, n := range shared.Nodes {
				if out, err := shared.OnNode(n, "sh", "-c", "ls "+stage+"/*/ldso").Output(); err != nil || len(out) == 0 {
					t.Errorf("%s: no ldso record in its stage (%v): the test did not run across glibc versions", n, err)
				}
			}
		})
	}
}

// TestSpankOtherArchRefused: an image of aarch64 programs (Debian's
// arm64 /usr/bin/true from the chroot make deps prepares) on the fake
// cluster's x86-64 nodes: the step fails before any task runs, each node's
// first task printing dlbundle's one line that names both architectures;
// with --dlbundle-fallback the tasks run natively, with a warning.
func TestSpankOtherArchRefused(t *testing.T) {
	needSpank(t)
	dir := os.Getenv("DLBUNDLE_CHROOTS")
	if dir == "" {
		dir = "/var/cache/dlbundle/chroots"
	}
	src := filepath.Join(dir, "bookworm-arm64", "usr/bin/true")
	st, err := os.Stat(src)
	if err != nil {
		t.Skipf("chroot bookworm-arm64 absent (%v): `make deps` prepares it", err)
	}
	img := filepath.Join(shared.Shared, "arm64-true.dlimg")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	_, err = image.Write(f, []image.Entry{{Path: "/opt/dlbundle-cluster-arm64/bin/true", Type: image.TypeRegular, Mode: 0o100755,
		Size: st.Size(), MtimeNS: st.ModTime().UnixNano(), Kind: image.KindELFExec, SourcePath: src}}, image.WriteOptions{})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	r := srunDlbundle(t, "/dev/shm/t-spank-arch", "-N3", "--ntasks-per-node=2", "--dlbundle="+img, "/bin/echo", "ran-natively")
	var lines []string
	for _, l := range strings.Split(r.out, "\n") {
		if strings.Contains(l, "dlbundle:") {
			lines = append(lines, l)
		}
	}
	if r.code == 0 || strings.Contains(r.out, "ran-natively") || len(lines) != 3 ||
		!strings.Contains(lines[0], "aarch64") || !strings.Contains(lines[0], "x86_64") {
		t.Fatalf("aarch64 image on x86-64 nodes: exit %d; want a failed step, no task run, one dlbundle line per node naming both architectures:\n%s", r.code, r.out)
	}
	t.Logf("the message: %s", lines[0])
	r = srunDlbundle(t, "/dev/shm/t-spank-arch", "-N3", "--ntasks-per-node=2", "--dlbundle="+img, "--dlbundle-fallback", "/bin/echo", "ran-natively")
	if r.code != 0 || strings.Count(r.out, "ran-natively\n") != 6 || !strings.Contains(r.out, "dlbundle: warning:") {
		t.Fatalf("aarch64 image with --dlbundle-fallback: exit %d; want 6 native tasks and a warning:\n%s", r.code, r.out)
	}
}

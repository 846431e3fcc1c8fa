package platform

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// driverPair is an app built on one node (the build chroot) against a
// stand-in driver library, libcuda.so.1 on its RUNPATH (recorded by the
// build, never bundled), and another node (run) with its own copy of that
// library at the same path, and the app too, for --fallback's native run.
type driverPair struct {
	build, run *chroot
	dir, app   string
	img        string // on the run node, as seen from the host
}

func newDriverPair(t *testing.T, build, run string) *driverPair {
	return newDriverPairAt(t, build, run, "")
}

// newDriverPairAt: the run node's root is runRoot when not "".
func newDriverPairAt(t *testing.T, build, run, runRoot string) *driverPair {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the chroots are prepared for an x86-64 host")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root (chroot, mount namespaces); make test runs as root")
	}
	node := func(name, root string) *chroot {
		if root == "" && name == "host" {
			root = "/"
		}
		if root == "" {
			root = filepath.Join(chrootRoot(), name)
			if _, err := os.Stat(filepath.Join(root, "usr/bin/gcc")); err != nil {
				t.Skipf("chroot %s absent (%v): `make deps` prepares it", name, err)
			}
		}
		return newChroot(t, chrootSpec{name, "amd64", "", "/lib64/ld-linux-x86-64.so.2"}, root)
	}
	p := &driverPair{build: node(build, ""), run: node(run, runRoot)}
	p.dir = "/opt/" + filepath.Base(p.build.work)
	p.app = p.dir + "/app"
	for _, r := range []string{p.build.root, p.run.root} {
		if err := os.MkdirAll(filepath.Join(r, p.dir, "lib"), 0o755); err != nil {
			t.Fatal(err)
		}
		host := filepath.Join(r, p.dir)
		t.Cleanup(func() { os.RemoveAll(host) })
	}
	return p
}

func (p *driverPair) write(t *testing.T, ch *chroot, name, text string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(ch.root, p.dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p.dir + "/" + name
}

// driver compiles the node's libcuda.so.1 from src with the node's gcc.
func (p *driverPair) driver(t *testing.T, ch *chroot, src string, libs ...string) {
	t.Helper()
	c := p.write(t, ch, "drv.c", src)
	ch.must(t, append([]string{"/usr/bin/gcc", "-shared", "-fPIC", "-O", "-Wl,-soname,libcuda.so.1", "-o", p.dir + "/lib/libcuda.so.1", c}, libs...)...)
}

// image builds the app (printing its glibc and the driver's words) on the
// build node, checks its native output, traces and builds it there, and
// puts the image and the app on the run node.
func (p *driverPair) image(t *testing.T, native string) {
	c := p.write(t, p.build, "app.c", `#include <stdio.h>
#include <gnu/libc-version.h>
const char *drv(void);
int main(void) { printf("glibc %s, %s\n", gnu_get_libc_version(), drv()); return 0; }`)
	p.build.must(t, "/usr/bin/gcc", "-O", "-o", p.app, c, p.dir+"/lib/libcuda.so.1", "-Wl,-rpath,$ORIGIN/lib")
	if out := p.build.must(t, p.app); out != native {
		t.Fatalf("natively on the build node: %q, want %q", out, native)
	}
	p.build.must(t, p.build.work+"/dlbundle-amd64", "trace", "-q", "-o", p.build.work+"/app.trace", "--", p.app)
	p.build.must(t, p.build.work+"/dlbundle-amd64", "build", "-o", p.build.work+"/app.dlimg", p.build.work+"/app.trace")
	p.img = filepath.Join(p.run.host, "app.dlimg")
	for from, to := range map[string]string{filepath.Join(p.build.host, "app.dlimg"): p.img,
		filepath.Join(p.build.root, p.app): filepath.Join(p.run.root, p.app)} {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if bundledPaths(t, p.img)[p.dir+"/lib/libcuda.so.1"] {
		t.Fatalf("the image bundles the driver library: the test needs it recorded only")
	}
}

// exec runs the app from the image on the run node (in its chroot).
func (p *driverPair) exec(t *testing.T, stage string, args ...string) (string, string, int) {
	t.Helper()
	out, errOut, err := p.run.run(t, "", append(append([]string{p.run.work + "/dlbundle-amd64", "exec", "--stage-dir", p.run.work + "/" + stage}, args...),
		p.run.work+"/app.dlimg", "--", p.app)...)
	if ee, ok := err.(*exec.ExitError); ok {
		return out, errOut, ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out, errOut, 0
}

// refused checks exec's refusal: exit 1, nothing run, one line with words.
func (p *driverPair) refused(t *testing.T, stage string, words ...string) {
	t.Helper()
	out, errOut, code := p.exec(t, stage)
	if code != 1 || out != "" {
		t.Errorf("exec: exit %d, stdout %q (want 1, nothing run)\n%s", code, out, errOut)
		return
	}
	line := strings.TrimRight(errOut, "\n")
	t.Logf("the refusal: %s", line)
	for _, w := range append(words, "/libcuda.so.1", "--fallback") {
		if !strings.Contains(line, w) {
			t.Errorf("the refusal does not say %q:\n%s", w, errOut)
		}
	}
	if strings.Contains(line, "\n") {
		t.Errorf("the refusal is not one line:\n%s", errOut)
	}
}

// TestNodeBoundNeedsNewerGlibc: an app built on Debian 11 (glibc 2.31)
// against a stand-in driver library runs on this node (2.36) under the
// image's glibc, with the node's copy of the driver library. When the
// node's copy needs a glibc version the image's glibc lacks (GLIBC_2.34: it
// calls dlopen, which glibc 2.34 moved into libc), exec refuses before the
// app starts, with one line naming the library, the version and the ways
// out; with --fallback the app runs natively (the node's glibc and driver).
// A node driver library that needs nothing newer is loaded from the node
// and runs under the image's glibc.
func TestNodeBoundNeedsNewerGlibc(t *testing.T) {
	p := newDriverPair(t, "bullseye-amd64", "host")
	p.driver(t, p.build, `const char *drv(void) { return "build node's driver"; }`)
	p.image(t, "glibc 2.31, build node's driver\n")

	// This node's driver, as old as the image's glibc allows.
	p.driver(t, p.run, `const char *drv(void) { return "this node's driver"; }`)
	if out, errOut, code := p.exec(t, "stage-old"); code != 0 || out != "glibc 2.31, this node's driver\n" {
		t.Fatalf("a node driver library that needs nothing newer: exit %d, stdout %q\n%s", code, out, errOut)
	}
	// This node's driver, built against its glibc 2.36, calls dlopen
	// (dlopen@GLIBC_2.34).
	p.driver(t, p.run, `#include <dlfcn.h>
const char *drv(void) { return dlopen("libm.so.6", RTLD_NOW) ? "this node's newer driver" : dlerror(); }`)
	p.refused(t, "stage-new", p.dir+"/lib/libcuda.so.1", "GLIBC_2.34", "glibc 2.31")
	out, errOut, code := p.exec(t, "stage-new", "--fallback")
	if code != 0 || out != "glibc 2.36, this node's newer driver\n" || !strings.Contains(errOut, "warning") || !strings.Contains(errOut, "natively") {
		t.Errorf("exec --fallback: exit %d, stdout %q (want the native run), stderr:\n%s", code, out, errOut)
	}
}

// TestNodeBoundNeedsNodesGlibcObject: an app built on this node (2.36)
// runs on Debian 11 (2.31) under the image's glibc; the node's driver
// library there needs librt.so.1, which the app never loaded on the build
// node, so the image lacks it and the node's copy would load: that copy
// needs GLIBC_PRIVATE of the node's own glibc build, which the image's glibc
// cannot give. exec refuses with one line that names the driver library,
// librt.so.1 and the way out.
func TestNodeBoundNeedsNodesGlibcObject(t *testing.T) {
	p := newDriverPair(t, "host", "bullseye-amd64")
	p.driver(t, p.build, `const char *drv(void) { return "build node's driver"; }`)
	p.image(t, "glibc 2.36, build node's driver\n")
	if bundledPaths(t, p.img)["/usr/lib/x86_64-linux-gnu/librt.so.1"] {
		t.Fatalf("the image bundles librt.so.1: the test needs an image without it")
	}
	p.driver(t, p.run, `#include <time.h>
const char *drv(void) { struct timespec ts; return clock_gettime(CLOCK_MONOTONIC, &ts) == 0 ? "this node's driver" : "no clock"; }`,
		"-Wl,--no-as-needed", "-lrt")
	p.refused(t, "stage", p.dir+"/lib/libcuda.so.1", "librt.so.1", "GLIBC_PRIVATE", "glibc 2.36")
	// --fallback runs the app natively, which on this older node fails as
	// it does without dlbundle (its own GLIBC_2.34 need).
	_, errOut, _ := p.exec(t, "stage", "--fallback")
	if !strings.Contains(errOut, "warning") || !strings.Contains(errOut, "natively (--fallback)") || !strings.Contains(errOut, "version `GLIBC_2.34' not found (required by "+p.app+")") {
		t.Errorf("exec --fallback does not warn and run the app natively:\n%s", errOut)
	}
}

// TestNodeBoundFoundThroughNodeCache: the run node installs its driver
// library elsewhere than the build node did (/opt/<work>-drv, known to its
// ld.so.cache, as a distribution that keeps NVIDIA's libraries in
// /usr/lib64/nvidia): the check finds it there, as ld.so does, and refuses
// (the library links librt.so.1, which the image lacks). The run node is an
// overlay of Debian 11 whose ld.so.cache the test may rebuild.
func TestNodeBoundFoundThroughNodeCache(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (chroot, overlay mount); make test runs as root")
	}
	lower := filepath.Join(chrootRoot(), "bullseye-amd64")
	if _, err := os.Stat(filepath.Join(lower, "usr/bin/gcc")); err != nil {
		t.Skipf("chroot bullseye-amd64 absent (%v): `make deps` prepares it", err)
	}
	p := newDriverPairAt(t, "host", "bullseye-amd64", overlayOf(t, lower))
	p.driver(t, p.build, `const char *drv(void) { return "build node's driver"; }`)
	p.image(t, "glibc 2.36, build node's driver\n")
	drv := p.dir + "-drv"
	if err := os.MkdirAll(filepath.Join(p.run.root, drv), 0o755); err != nil {
		t.Fatal(err)
	}
	c := p.write(t, p.run, "drv.c", `#include <time.h>
const char *drv(void) { struct timespec ts; return clock_gettime(CLOCK_MONOTONIC, &ts) == 0 ? "this node's driver" : "no clock"; }`)
	p.run.must(t, "/usr/bin/gcc", "-shared", "-fPIC", "-O", "-Wl,-soname,libcuda.so.1", "-o", drv+"/libcuda.so.1", c, "-Wl,--no-as-needed", "-lrt")
	if err := os.WriteFile(filepath.Join(p.run.root, "etc/ld.so.conf.d/zz-driver.conf"), []byte(drv+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.run.must(t, "/sbin/ldconfig")
	if _, err := os.Stat(filepath.Join(p.run.root, p.dir, "lib/libcuda.so.1")); err == nil {
		t.Fatal("the run node has the driver library at the recorded path: the test needs it elsewhere")
	}
	p.refused(t, "stage", drv+"/libcuda.so.1", "librt.so.1", "GLIBC_PRIVATE")
}

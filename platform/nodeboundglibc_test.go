package platform

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestNodeBoundNeedsNewerGlibc: an app built on Debian 11 (glibc 2.31)
// against a stand-in driver library (libcuda.so.1, recorded, never
// bundled) runs on this node (2.36) under the image's glibc, with the
// node's copy of the driver library. When the node's copy needs a glibc
// version the image's glibc lacks (GLIBC_2.34: it calls dlopen, which glibc
// 2.34 moved into libc), exec refuses before the app starts, with one line
// naming the library, the version and the ways out; with --fallback the
// app runs natively (the node's glibc and driver). A node driver library
// that needs nothing newer is loaded from the node and runs under the
// image's glibc.
func TestNodeBoundNeedsNewerGlibc(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the chroots are prepared for an x86-64 host")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root (chroot, mount namespaces); make test runs as root")
	}
	root := filepath.Join(chrootRoot(), "bullseye-amd64")
	if _, err := os.Stat(filepath.Join(root, "usr/bin/gcc")); err != nil {
		t.Skipf("chroot bullseye-amd64 absent (%v): `make deps` prepares it", err)
	}
	build := newChroot(t, chrootSpec{"bullseye-amd64", "amd64", "", "/lib64/ld-linux-x86-64.so.2"}, root)
	node := newChroot(t, chrootSpec{"host", "amd64", "", "/lib64/ld-linux-x86-64.so.2"}, "/")

	// The app and its driver library on the build node.
	dir := "/opt/" + filepath.Base(build.work)
	for _, r := range []string{build.root, node.root} {
		if err := os.MkdirAll(filepath.Join(r, dir, "lib"), 0o755); err != nil {
			t.Fatal(err)
		}
		host := filepath.Join(r, dir)
		t.Cleanup(func() { os.RemoveAll(host) })
	}
	write := func(ch *chroot, name, text string) string {
		t.Helper()
		if err := os.WriteFile(filepath.Join(ch.root, dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir + "/" + name
	}
	driver := func(ch *chroot, src string, libs ...string) {
		t.Helper()
		c := write(ch, "drv.c", src)
		ch.must(t, append([]string{"/usr/bin/gcc", "-shared", "-fPIC", "-O", "-Wl,-soname,libcuda.so.1", "-o", dir + "/lib/libcuda.so.1", c}, libs...)...)
	}
	driver(build, `const char *drv(void) { return "build node's driver"; }`)
	app := dir + "/app"
	c := write(build, "app.c", `#include <stdio.h>
#include <gnu/libc-version.h>
const char *drv(void);
int main(void) { printf("glibc %s, %s\n", gnu_get_libc_version(), drv()); return 0; }`)
	build.must(t, "/usr/bin/gcc", "-O", "-o", app, c, dir+"/lib/libcuda.so.1", "-Wl,-rpath,$ORIGIN/lib")
	if out := build.must(t, app); out != "glibc 2.31, build node's driver\n" {
		t.Fatalf("natively on the build node: %q", out)
	}
	build.must(t, build.work+"/dlbundle-amd64", "trace", "-q", "-o", build.work+"/app.trace", "--", app)
	build.must(t, build.work+"/dlbundle-amd64", "build", "-o", build.work+"/app.dlimg", build.work+"/app.trace")
	img := filepath.Join(node.host, "app.dlimg")
	data, err := os.ReadFile(filepath.Join(build.host, "app.dlimg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if bundledPaths(t, img)[dir+"/lib/libcuda.so.1"] {
		t.Fatalf("the image bundles the driver library: the test needs it recorded only")
	}

	// This node's driver, as old as the image's glibc allows: it loads
	// from the node, into the image's glibc.
	driver(node, `const char *drv(void) { return "this node's driver"; }`)
	// The app is on this node too, for --fallback's native run.
	appData, err := os.ReadFile(filepath.Join(build.root, app))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(node.root, app), appData, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := func(stage string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(node.work+"/dlbundle-amd64", append(append([]string{"exec", "--stage-dir", filepath.Join(node.work, stage)}, args...), img, "--", app)...)
		cmd.Env = node.env
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return o.String(), e.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return o.String(), e.String(), 0
	}
	if out, errOut, code := exe("stage-old"); code != 0 || out != "glibc 2.31, this node's driver\n" {
		t.Fatalf("a node driver library that needs nothing newer: exit %d, stdout %q\n%s", code, out, errOut)
	}

	// This node's driver, built against its glibc 2.36, calls dlopen
	// (dlopen@GLIBC_2.34).
	driver(node, `#include <dlfcn.h>
const char *drv(void) { return dlopen("libm.so.6", RTLD_NOW) ? "this node's newer driver" : dlerror(); }`)
	if out, errOut, code := exe("stage-new"); code != 1 || out != "" {
		t.Errorf("a node driver library that needs GLIBC_2.34 under an image of glibc 2.31: exit %d, stdout %q (want 1, nothing run)\n%s", code, out, errOut)
	} else {
		line := strings.TrimRight(errOut, "\n")
		t.Logf("the refusal: %s", line)
		for _, w := range []string{dir + "/lib/libcuda.so.1", "GLIBC_2.34", "glibc 2.31", "--fallback"} {
			if !strings.Contains(line, w) {
				t.Errorf("the refusal does not say %q:\n%s", w, errOut)
			}
		}
		if strings.Contains(line, "\n") {
			t.Errorf("the refusal is not one line:\n%s", errOut)
		}
	}
	out, errOut, code := exe("stage-new", "--fallback")
	if code != 0 || out != "glibc 2.36, this node's newer driver\n" || !strings.Contains(errOut, "warning") || !strings.Contains(errOut, "natively") {
		t.Errorf("exec --fallback: exit %d, stdout %q (want the native run), stderr:\n%s", code, out, errOut)
	}
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/clitest"
)

// A driver's user-space library is recorded, never bundled, and comes from
// the node at run time: a stand-in libcuda.so.1 (a symlink to the release's
// file, as NVIDIA installs it) on the app's RUNPATH is replaced after the
// build by a newer release whose file has another name and which dlopens a
// library the image never saw (libnvidia-*.so.200, as a newer driver adds
// libraries); the served app prints the new driver's words, while an
// ordinary library of the app, changed on disk too, is still served from the
// image. --include of the driver's directory bundles it, with a warning.
func TestNodeBoundLibraryComesFromTheNode(t *testing.T) {
	cli := clitest.CLI(t)
	dir := t.TempDir()
	app := appDirOutsideTmp(t)
	lib, bin := filepath.Join(app, "lib"), filepath.Join(app, "bin")
	for _, d := range []string{lib, bin} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cc := func(out, src string, args ...string) {
		t.Helper()
		c := filepath.Join(dir, filepath.Base(out)+".c")
		if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		argv := append([]string{"-O1", "-Wl,--no-as-needed", "-o", out, c}, args...)
		if o, err := exec.Command("gcc", argv...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", argv, err, o)
		}
	}
	link := func(target, name string) {
		t.Helper()
		os.Remove(filepath.Join(lib, name))
		if err := os.Symlink(target, filepath.Join(lib, name)); err != nil {
			t.Fatal(err)
		}
	}
	shared := []string{"-shared", "-fPIC"}
	cc(filepath.Join(lib, "libcuda.so.1.100"), `const char *drv(void) { return "driver 100"; }`,
		append(shared, "-Wl,-soname,libcuda.so.1")...)
	link("libcuda.so.1.100", "libcuda.so.1")
	other := func(words string) {
		cc(filepath.Join(lib, "libother.so"), `const char *other(void) { return "`+words+`"; }`, shared...)
	}
	other("app library as built")
	cc(filepath.Join(bin, "app"), `#include <stdio.h>
const char *drv(void); const char *other(void);
int main(void) { printf("%s, %s\n", other(), drv()); return 0; }`,
		filepath.Join(lib, "libother.so"), filepath.Join(lib, "libcuda.so.1"), "-Wl,-rpath,$ORIGIN/../lib")

	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Dir, cmd.Env = dir, clitest.CleanEnv(dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("dlbundle %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	appBin := filepath.Join(bin, "app")
	if out, err := exec.Command(appBin).Output(); err != nil || string(out) != "app library as built, driver 100\n" {
		t.Fatalf("natively: %v %q", err, out)
	}
	run("trace", "-q", "-o", "app.trace", "--", appBin)
	run("build", "-o", "app.dlimg", "app.trace")
	im, err := image.OpenFile(filepath.Join(dir, "app.dlimg"))
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]image.Type{}
	for _, e := range im.Entries() {
		types[e.Path] = e.Type
	}
	im.Close()
	// The link is recorded; the file it names, which no trace shows, is
	// only a name in the directory's listing (external for the shim).
	if ty := types[filepath.Join(lib, "libcuda.so.1")]; ty != image.TypeExternal {
		t.Errorf("libcuda.so.1 is %v in the image, want external (recorded, not bundled)", ty)
	}
	if ty, ok := types[filepath.Join(lib, "libcuda.so.1.100")]; ok && ty != image.TypeExternal {
		t.Errorf("libcuda.so.1.100 is %v in the image, want no entry or external", ty)
	}
	if ty := types[filepath.Join(lib, "libother.so")]; ty != image.TypeRegular {
		t.Fatalf("libother.so is %v in the image, want bundled", ty)
	}

	// --include bundles it anyway, and says what that means.
	out := run("build", "-o", "incl.dlimg", "--include", lib, "app.trace")
	if !strings.Contains(out, "user-space half of a kernel driver and is bundled as --include asks") {
		t.Errorf("build --include %s does not warn about the driver library:\n%s", lib, out)
	}

	// The node's driver changes: a new release's file, the link renamed to
	// it, and a library of the new release that the image never saw.
	cc(filepath.Join(lib, "libnvidia-standin.so.200"), `const char *extra(void) { return "driver 200"; }`, shared...)
	cc(filepath.Join(lib, "libcuda.so.1.200"), `#include <dlfcn.h>
const char *drv(void) {
	void *h = dlopen("libnvidia-standin.so.200", RTLD_NOW);
	if (!h) return dlerror();
	const char *(*f)(void) = (const char *(*)(void))dlsym(h, "extra");
	return f ? f() : "no extra";
}`, append(shared, "-Wl,-soname,libcuda.so.1", "-Wl,-rpath,$ORIGIN", "-ldl")...)
	os.Remove(filepath.Join(lib, "libcuda.so.1.100"))
	link("libcuda.so.1.200", "libcuda.so.1")
	other("app library changed on disk")

	out = run("exec", "--stage-dir", filepath.Join(dir, "stage"), "app.dlimg", "--", appBin)
	if want := "app library as built, driver 200\n"; out != want {
		t.Fatalf("served app printed %q, want %q (the image's own library, the node's driver)", out, want)
	}

}

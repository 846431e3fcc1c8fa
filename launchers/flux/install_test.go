package flux

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// demoImage builds the demo's C app (RUNPATH, dlopen) in dir and its image
// from one native pilot run; it returns the app and the image.
func demoImage(t *testing.T, dir string, env []string, bin string) (app, img string) {
	t.Helper()
	gen, _ := filepath.Abs("../../examples/demo/make-fixture.sh")
	tree := filepath.Join(dir, "app")
	if out, code := run(t, dir, env, gen, tree, "20"); code != 0 {
		t.Fatalf("make-fixture.sh: %s", out)
	}
	app = filepath.Join(tree, "bin/demo-app")
	img = filepath.Join(dir, "app.dlimg")
	if out, code := run(t, dir, env, bin, "trace", "-q", "-o", "pilot.trace", "--", app); code != 0 {
		t.Fatalf("dlbundle trace: %s", out)
	}
	if out, code := run(t, dir, env, bin, "build", "--include", tree, "-o", img, "pilot.trace"); code != 0 {
		t.Fatalf("dlbundle build: %s", out)
	}
	return app, img
}

// TestFluxMakeInstall: inside a flux start --test-size=3 instance whose job
// shell reads its own initrc (the broker attribute conf.shell_initrc, as a
// site's Flux reads <prefix>/etc/flux/shell/initrc.lua), make install,
// given only PREFIX, asks flux where the job shell's lua.d is and puts
// dlbundle.lua there; flux run -o dlbundle=IMAGE, with no userrc, then
// starts every task from the stage with the app's native output; make
// uninstall removes what it put, and the same run is native again.
func TestFluxMakeInstall(t *testing.T) {
	flux := fluxBin(t)
	bin := clitest.CLI(t)
	dir := t.TempDir()
	prefix := filepath.Join(dir, "prefix")
	// The installed dlbundle first in the job's PATH: the plugin runs it.
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("make install builds dlbundle: go is not on PATH")
	}
	// make install builds with this test's Go, its caches and no network.
	goEnv, err := exec.Command(goCmd, "env", "GOCACHE", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	caches := strings.Fields(string(goEnv))
	env := append(clitest.CleanEnv(dir), "PATH="+filepath.Join(prefix, "bin")+":"+filepath.Dir(flux)+":"+filepath.Dir(goCmd)+":/usr/bin:/bin",
		"DLBUNDLE_STAGE_DIR="+filepath.Join(dir, "stage"), "GOCACHE="+caches[0], "GOMODCACHE="+caches[1], "GOPROXY=off", "GOTOOLCHAIN=local")
	app, img := demoImage(t, dir, env, bin)

	shellDir := filepath.Join(dir, "etc", "flux", "shell")
	luad := filepath.Join(shellDir, "lua.d")
	if err := os.MkdirAll(luad, 0o755); err != nil {
		t.Fatal(err)
	}
	initrc, code := run(t, dir, env, flux, "config", "builtin", "shell_initrc")
	if code != 0 {
		t.Fatalf("flux config builtin shell_initrc: %s", initrc)
	}
	b, err := os.ReadFile(strings.TrimSpace(initrc))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(shellDir, "initrc.lua"), string(b))

	root, _ := filepath.Abs("../..")
	mk := "make -C " + root + " --no-print-directory PREFIX=" + prefix + " WITH_SLURM=no"
	served := "flux run -N3 -n3 -o dlbundle=" + img + " "
	script := strings.Join([]string{
		"flux run -N3 -n3 " + app + " > native.out",
		mk + " install > install.out 2>&1 || exit 3",
		"ls " + luad + " > luad-installed",
		served + app + " > served.out 2>&1",
		served + "printenv DLBUNDLE_STAGE > served.stage",
		mk + " uninstall > uninstall.out 2>&1 || exit 4",
		served + "printenv DLBUNDLE_STAGE > uninstalled.stage; true",
	}, "\n")
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return string(b)
	}
	if out, code := run(t, dir, env, flux, "start", "--test-size=3", "-Sconf.shell_initrc="+filepath.Join(shellDir, "initrc.lua"), "sh", "-c", script); code != 0 {
		t.Fatalf("flux start: exit %d (3: make install, 4: make uninstall)\n%s\ninstall:\n%s\nuninstall:\n%s", code, out, read("install.out"), read("uninstall.out"))
	}
	plugin := filepath.Join(luad, "dlbundle.lua")
	if !strings.Contains(read("install.out"), plugin) || strings.TrimSpace(read("luad-installed")) != "dlbundle.lua" {
		t.Errorf("make install: want %s installed and printed; lua.d held %q:\n%s", plugin, read("luad-installed"), read("install.out"))
	}
	native := sortedLines(read("native.out"))
	if strings.Count(native, "checksum") != 3 {
		t.Fatalf("native run: want 3 tasks:\n%s", native)
	}
	if got := sortedLines(read("served.out")); got != native {
		t.Errorf("-o dlbundle with the installed plugin:\n%s\nwant as native:\n%s", got, native)
	}
	if stages := strings.Fields(read("served.stage")); len(stages) != 3 || !strings.HasPrefix(stages[0], filepath.Join(dir, "stage")) {
		t.Errorf("tasks' DLBUNDLE_STAGE with the installed plugin: %v, want 3 in the stage dir", stages)
	}
	if s := strings.TrimSpace(read("uninstalled.stage")); s != "" {
		t.Errorf("after make uninstall the tasks still got DLBUNDLE_STAGE %q: the plugin is still loaded", s)
	}
	if left, _ := os.ReadDir(luad); len(left) != 0 {
		t.Errorf("make uninstall left %v in %s:\n%s", left, luad, read("uninstall.out"))
	}
	if _, err := os.Stat(prefix); err == nil {
		t.Errorf("make uninstall left %s:\n%s", prefix, read("uninstall.out"))
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

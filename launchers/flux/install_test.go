package flux

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
	"github.com/dlbundle/dlbundle/internal/slowfs"
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
	if !strings.Contains(read("install.out"), plugin) || strings.TrimSpace(read("luad-installed")) != "dlbundle.lua\ndlbundle_ldso.so" {
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

// TestFluxBcastReadsImageOnce: flux run -N3 -n6 -o dlbundle=IMAGE under
// flux start --test-size=3 opens the image once per job shell (3: the
// count works); with -o dlbundle-bcast it is opened once per job (flux
// archive create in the first shell; the others extract the broker's copy),
// every task still starts from a stage with the app's native output, and
// no node-local copy is left behind.
func TestFluxBcastReadsImageOnce(t *testing.T) {
	flux := fluxBin(t)
	bin := clitest.CLI(t)
	plugin, _ := filepath.Abs("dlbundle.lua")
	dir := t.TempDir()
	env := append(clitest.CleanEnv(dir), "PATH="+filepath.Dir(flux)+":/usr/bin:/bin")
	app, img := demoImage(t, dir, env, bin)
	// The instance's three brokers share this host's file system, where
	// real nodes have a stage dir each: every job shell's dlbundle stages
	// in a directory of its own below the job's stage dir.
	wrapper := filepath.Join(dir, "dlbundle-per-node")
	write(t, wrapper, "#!/bin/sh\nDLBUNDLE_STAGE_DIR=\"$DLBUNDLE_STAGE_DIR/node-$$\" exec "+bin+" \"$@\"\n")
	os.Chmod(wrapper, 0o755)
	env = append(env, "DLBUNDLE="+wrapper)
	// The image on a FUSE file system that counts the opens it serves
	// (internal/slowfs), as the shared file system of a cluster.
	src, mnt := filepath.Join(dir, "shared.src"), filepath.Join(dir, "shared")
	for _, d := range []string{src, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(img); err != nil {
		t.Fatal(err)
	} else {
		write(t, filepath.Join(src, "app.dlimg"), string(b))
	}
	fsys, err := slowfs.Mount(src, mnt, slowfs.Costs{})
	if err != nil {
		t.Skipf("no FUSE here: %v", err)
	}
	t.Cleanup(func() { fsys.Unmount() })
	img = filepath.Join(mnt, "app.dlimg")
	copies := func() []string { m, _ := filepath.Glob("/tmp/dlbundle-bcast.*"); return m }
	before := len(copies())
	opens := func() int { n := int(fsys.Stats().Open); fsys.Reset(); return n }
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return string(b)
	}
	job := func(name string, opts ...string) int {
		t.Helper()
		// A stage dir of the job's own: every node stages anew.
		script := "t0=$(date +%s%N); flux run -N3 -n6 " + strings.Join(opts, " ") + " --env=DLBUNDLE_STAGE_DIR=" + filepath.Join(dir, "stage-"+name) +
			" sh -c 'echo stage=$DLBUNDLE_STAGE; exec " + app + "' > " + name + ".out 2>&1; rc=$?; echo $(( ($(date +%s%N) - t0) / 1000000 )) > " + name + ".ms; exit $rc"
		opens()
		if out, code := run(t, dir, env, flux, "start", "--test-size=3", "sh", "-c", script); code != 0 {
			t.Fatalf("%s: exit %d\n%s\n%s", name, code, out, read(name+".out"))
		}
		n := opens()
		t.Logf("%s: image opened %d times; flux run to its last rank's exit %s ms", name, n, strings.TrimSpace(read(name+".ms")))
		return n
	}
	native := job("native")
	if native != 0 {
		t.Fatalf("a native job opened the image %d times", native)
	}
	var nativeLines []string
	for _, l := range strings.Split(strings.TrimSpace(read("native.out")), "\n") {
		if !strings.HasPrefix(l, "stage=") {
			nativeLines = append(nativeLines, l)
		}
	}
	want := sortedLines(strings.Join(nativeLines, "\n"))
	if strings.Count(want, "checksum") != 6 {
		t.Fatalf("native job: want 6 tasks:\n%s", want)
	}
	plain := job("plain", "-o userrc="+plugin, "-o dlbundle="+img)
	bcast := job("bcast", "-o userrc="+plugin, "-o dlbundle="+img, "-o dlbundle-bcast")
	if plain < 3 {
		t.Fatalf("without -o dlbundle-bcast the image was opened %d times; want one per node (3): the count cannot fail", plain)
	}
	if bcast != 1 {
		t.Errorf("-o dlbundle-bcast: the image was opened %d times in the job, want 1", bcast)
	}
	for _, name := range []string{"plain", "bcast"} {
		var out, stages []string
		for _, l := range strings.Split(strings.TrimSpace(read(name+".out")), "\n") {
			if s, ok := strings.CutPrefix(l, "stage="); ok {
				stages = append(stages, s)
			} else {
				out = append(out, l)
			}
		}
		if got := sortedLines(strings.Join(out, "\n")); got != want {
			t.Errorf("%s: tasks printed\n%s\nwant as native\n%s", name, got, want)
		}
		if len(stages) != 6 || !strings.HasPrefix(stages[0], filepath.Join(dir, "stage-"+name)) {
			t.Errorf("%s: tasks' DLBUNDLE_STAGE %v, want 6 in the job's stage dir", name, stages)
		}
	}
	if n := len(copies()); n != before {
		t.Errorf("node-local copies left in /tmp: %v", copies())
	}
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/clitest"
	"github.com/dlbundle/dlbundle/node"
)

// foldRunner runs commands in dir with env, failing the test on an error.
func foldRunner(t *testing.T, dir string, env []string) func(name string, args ...string) string {
	return func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
}

// foldAdvice is the build --from command lines a report printed.
func foldAdvice(t *testing.T, text string) [][]string {
	t.Helper()
	var cmds [][]string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "dlbundle build -o ") && strings.Contains(l, " --from ") && !strings.Contains(l, "--include") {
			cmds = append(cmds, strings.Fields(l)[1:])
		}
	}
	if len(cmds) == 0 {
		t.Fatalf("the report advises no build --from:\n%s", text)
	}
	return cmds
}

// appCalls are the file calls of an strace log from the app's execve (a
// path in stage) on, on the original trees (clitest.OriginalCalls).
func appCalls(t *testing.T, log, stage string) (calls, libOpens []string) {
	t.Helper()
	inStage := func(p string) bool { return strings.HasPrefix(p, stage+"/") }
	return clitest.OriginalCalls(t, log, inStage, inStage)
}

// An Open MPI program piloted at 1 rank and run at 3 under a real mpirun:
// its ranks load what the pilot's did not (hwloc's plugins, which pull
// libxml2, libicu, libX11 and more, then are dlclose'd). One fold, exactly
// as `dlbundle report` prints it, and the next run at 3 ranks opens no
// library on the original trees (strace, the kernel's record, per rank).
// Neither build warns that a directory "has changed" (nothing changed).
func TestFoldClosesMPIProgramAtWidth(t *testing.T) {
	for _, p := range []string{"/usr/bin/mpirun", "/usr/bin/mpicc", "/usr/bin/strace"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is needed (make deps)", p)
		}
	}
	cli := clitest.CLI(t)
	app := appDirOutsideTmp(t)
	env := append(clitest.CleanEnv(app), "OMPI_MCA_plm_rsh_agent=false", "OMPI_MCA_btl=self,tcp",
		"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	run := foldRunner(t, app, env)
	src := clitest.MPIHello
	if err := os.WriteFile(filepath.Join(app, "hello.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	run("mpicc", "-o", "hello", "hello.c")
	mpirun := []string{"--allow-run-as-root", "--oversubscribe"}
	run("mpirun", append(mpirun, "-np", "1", cli, "trace", "-q", "--", "./hello")...)
	out := run(cli, "build", "-o", "app.dlimg")
	if strings.Contains(out, "has changed") {
		t.Errorf("the first build warns of a change nobody made:\n%s", out)
	}
	// the stage and the logs elsewhere: the app's directory changes only
	// by what dlbundle writes (the image)
	logs := t.TempDir()
	stage := filepath.Join(logs, "stage")
	job := func(tag string) (calls, libs [][]string) {
		t.Helper()
		wrapper := filepath.Join(logs, "rank-"+tag+".sh")
		script := "#!/bin/sh\nexec strace -f -qq -e signal=none -e trace=%file -o \"" + logs + "/" + tag + ".$OMPI_COMM_WORLD_RANK\" \"$@\"\n"
		if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		out := run("mpirun", append(mpirun, "-np", "3", wrapper, cli, "exec", "--stage-dir", stage, "app.dlimg", "--", "./hello")...)
		for _, r := range []string{"0", "1", "2"} {
			if !strings.Contains(out, "hello "+r+" of 3") {
				t.Fatalf("job %s printed:\n%s", tag, out)
			}
			c, l := appCalls(t, filepath.Join(logs, tag+"."+r), stage)
			calls, libs = append(calls, c), append(libs, l)
		}
		return calls, libs
	}
	callsBefore, libsBefore := job("before")
	n := 0
	for _, l := range libsBefore {
		n += len(l)
	}
	if n == 0 {
		t.Fatalf("no rank opened a library from outside the image before the fold: the test cannot tell anything")
	}
	advice := foldAdvice(t, run(cli, "report", "--stage-dir", stage))
	if len(advice) != 1 {
		t.Fatalf("one image, %d fold commands: %v", len(advice), advice)
	}
	out = run(cli, advice[0]...)
	if strings.Contains(out, "has changed") {
		t.Errorf("the fold warns of a change nobody made:\n%s", out)
	}
	callsAfter, libsAfter := job("after")
	for r := range libsAfter {
		t.Logf("rank %d: %d file calls on the original trees (%d library opens) before the fold, %d (%d) after",
			r, len(callsBefore[r]), len(libsBefore[r]), len(callsAfter[r]), len(libsAfter[r]))
		if len(libsAfter[r]) > 0 {
			t.Errorf("rank %d still opens %d libraries on the original trees after one fold:\n%s", r, len(libsAfter[r]), strings.Join(libsAfter[r], "\n"))
		}
	}
}

// A library directory the run adds (LD_LIBRARY_PATH, as Flux or a module
// sets it) that the pilot never had: one fold as printed, and the next run
// searches it from the image (no call on it) and loads from the stage the
// libraries it found elsewhere (libxml2 and what it pulls in).
func TestFoldClosesLibraryPathAddedAtRun(t *testing.T) {
	cli := clitest.CLI(t)
	app := appDirOutsideTmp(t)
	libdir := filepath.Join(app, "lib")
	if err := os.Mkdir(libdir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Nothing the app loads is there (as in Flux's lib/flux): ld.so
	// searches it for every library, in vain, before ld.so.cache.
	if err := os.WriteFile(filepath.Join(libdir, "README"), []byte("not a library\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := clitest.CleanEnv(app)
	run := foldRunner(t, app, env)
	prog := "import ctypes; ctypes.CDLL('libxml2.so.2'); print('ok')"
	run(cli, "trace", "-q", "--", "/usr/bin/python3", "-c", "import ctypes")
	run(cli, "build", "-o", "app.dlimg")
	stage := filepath.Join(app, "stage")
	withLLP := foldRunner(t, app, append(env, "LD_LIBRARY_PATH="+libdir))
	job := func(tag string) (calls, libs []string) {
		log := filepath.Join(app, tag+".strace")
		out := withLLP("strace", "-f", "-qq", "-e", "signal=none", "-e", "trace=%file", "-o", log,
			cli, "exec", "--stage-dir", stage, "app.dlimg", "--", "/usr/bin/python3", "-c", prog)
		if !strings.Contains(out, "ok") {
			t.Fatalf("app printed %q", out)
		}
		return appCalls(t, log, stage)
	}
	calls, _ := job("before")
	inLib := 0
	for _, l := range calls {
		if strings.Contains(l, `"`+libdir+"/") {
			inLib++
		}
	}
	if inLib == 0 {
		t.Fatalf("the run made no call in %s before the fold: the test cannot tell anything\n%s", libdir, strings.Join(calls, "\n"))
	}
	advice := foldAdvice(t, run(cli, "report", "--stage-dir", stage))
	run(cli, advice[0]...)
	calls, libs := job("after")
	var left []string
	for _, l := range calls {
		if strings.Contains(l, `"`+libdir) {
			left = append(left, l)
		}
	}
	if len(left) > 0 || len(libs) > 0 {
		t.Errorf("after one fold the run still makes %d calls in %s and opens %d libraries outside the stage:\n%s",
			len(left), libdir, len(libs), strings.Join(append(left, libs...), "\n"))
	}
}

// Records of runs from two images: `dlbundle report` with no file prints
// one fold command per image, and each works as printed.
func TestReportOfTwoImagesPrintsTwoFolds(t *testing.T) {
	cli := clitest.CLI(t)
	app := appDirOutsideTmp(t)
	run := foldRunner(t, app, clitest.CleanEnv(app))
	stage := filepath.Join(app, "stage")
	for _, name := range []string{"a", "b"} {
		sub := filepath.Join(app, name)
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		in := foldRunner(t, sub, clitest.CleanEnv(app))
		in(cli, "trace", "-q", "--", "/usr/bin/python3", "-c", "import json")
		in(cli, "build", "-o", name+".dlimg")
		in(cli, "exec", "--stage-dir", stage, name+".dlimg", "--", "/usr/bin/python3", "-c", "import decimal")
	}
	text := run(cli, "report", "--stage-dir", stage)
	advice := foldAdvice(t, text)
	if len(advice) != 2 {
		t.Fatalf("records of 2 images, %d fold commands:\n%s", len(advice), text)
	}
	for i, a := range advice {
		if !strings.Contains(strings.Join(a, " "), []string{"a.dlimg", "b.dlimg"}[i]) {
			t.Errorf("fold %d does not name its image: %v", i, a)
		}
		run(cli, a...)
	}
}

// A fold rebuilds the image at its path; the next exec stages the new
// content and removes the old image's stage, which no process uses: the
// node holds one stage per image path.
func TestFoldKeepsOneStagePerImagePath(t *testing.T) {
	cli := clitest.CLI(t)
	app := appDirOutsideTmp(t)
	run := foldRunner(t, app, clitest.CleanEnv(app))
	stage := filepath.Join(t.TempDir(), "stage")
	run(cli, "trace", "-q", "--", "/usr/bin/python3", "-c", "import json")
	run(cli, "build", "-o", "app.dlimg")
	run(cli, "exec", "--stage-dir", stage, "app.dlimg", "--", "/usr/bin/python3", "-c", "import decimal")
	stages := func() []string {
		s, _ := filepath.Glob(filepath.Join(stage, "sha256-*"))
		return s
	}
	if n := len(stages()); n != 1 {
		t.Fatalf("%d stages after the first exec: %v", n, stages())
	}
	first := stages()[0]
	advice := foldAdvice(t, run(cli, "report", "--stage-dir", stage))
	run(cli, advice[0]...)
	// gc's rule keeps a stage used within its grace (2 s: a rank may be
	// on its way to exec from it); this is no timing assertion, it lets
	// that grace pass.
	time.Sleep(node.MinGrace + 500*time.Millisecond)
	run(cli, "exec", "--stage-dir", stage, "app.dlimg", "--", "/usr/bin/python3", "-c", "import decimal")
	now := stages()
	if len(now) != 1 || now[0] == first {
		t.Errorf("stages after a fold and an exec: %v (first: %s), want only the new image's", now, first)
	}
}

// A program a served process starts that the image lacks is folded in as a
// program, with its interpreter (here a #! script whose interpreter, tail, the
// image lacks too; tail, unlike python3, looks nothing up that would name
// it): the next run finds both in the image.
func TestFoldBundlesProgramsARunStarted(t *testing.T) {
	cli := clitest.CLI(t)
	app := appDirOutsideTmp(t)
	tool := filepath.Join(app, "tool")
	if err := os.WriteFile(tool, []byte("#!/usr/bin/tail -n1\ntool ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := foldRunner(t, app, clitest.CleanEnv(app))
	stage := filepath.Join(t.TempDir(), "stage")
	run(cli, "trace", "-q", "--", "/bin/sh", "-c", "/bin/true")
	run(cli, "build", "-o", "app.dlimg")
	if out := run(cli, "exec", "--stage-dir", stage, "app.dlimg", "--", "/bin/sh", "-c", tool); !strings.Contains(out, "tool ran") {
		t.Fatalf("tool printed %q", out)
	}
	im, err := image.OpenFile(filepath.Join(app, "app.dlimg"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := im.Lookup("/usr/bin/tail"); ok {
		t.Fatal("the image holds tail before the fold: the test cannot tell anything")
	}
	im.Close()
	advice := foldAdvice(t, run(cli, "report", "--stage-dir", stage))
	run(cli, advice[0]...)
	im, err = image.OpenFile(filepath.Join(app, "app.dlimg"))
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	if e, ok := im.Lookup(tool); !ok || e.Type != image.TypeRegular {
		t.Errorf("the fold does not bundle %s, which the run started", tool)
	}
	if _, ok := im.Lookup("/usr/bin/tail"); !ok {
		t.Errorf("the fold does not bundle /usr/bin/tail, the interpreter of %s", tool)
	}
}

package flux

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// TestFluxFoldClosesMPIProgram: the MPI hello piloted at 1 rank (a
// singleton, no launcher), run at 3 ranks on 3 brokers under flux run -o
// dlbundle=IMAGE, whose tasks get LD_LIBRARY_PATH=<flux>/lib/flux and load
// Open MPI's Flux PMI component and Flux's libpmi.so from there, which the
// pilot never did. `dlbundle report` of the node's records prints one fold;
// run as printed, the next run at 3 makes no file call on the original
// trees in any rank: no library open, no search of lib/flux (strace).
func TestFluxFoldClosesMPIProgram(t *testing.T) {
	flux := fluxBin(t)
	for _, tool := range []string{"strace", "mpicc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (make deps installs it)", tool)
		}
	}
	bin := clitest.CLI(t)
	plugin, err := filepath.Abs("dlbundle.lua")
	if err != nil {
		t.Fatal(err)
	}
	// Not under /tmp or /var/tmp: the count leaves /tmp out (node-local),
	// build leaves both out by default, and the app's own directory (and
	// HOME, where Open MPI looks for its settings) is part of the original
	// trees.
	dir, err := os.MkdirTemp("/var/lib", "dlbundle-flux-fold-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	app := filepath.Join(dir, "app")
	if err := os.Mkdir(app, 0o755); err != nil {
		t.Fatal(err)
	}
	// The logs and the stage elsewhere: the app's directory and HOME
	// change only by what dlbundle writes (the trace, the image).
	logs := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.c"), []byte(clitest.MPIHello), 0o644); err != nil {
		t.Fatal(err)
	}
	hello := filepath.Join(app, "hello")
	env := append(clitest.CleanEnv(dir), "PATH="+filepath.Dir(flux)+":/usr/bin:/bin", "OMPI_MCA_btl=self,tcp")
	if out, code := run(t, dir, env, "mpicc", "-o", hello, filepath.Join(dir, "hello.c")); code != 0 {
		t.Fatalf("mpicc: %s", out)
	}
	if out, code := run(t, app, env, bin, "trace", "-q", "-o", filepath.Join(dir, "pilot.trace"), "--", hello); code != 0 || !strings.Contains(out, "hello 0 of 1") {
		t.Fatalf("the 1-rank pilot: exit %d\n%s", code, out)
	}
	img := filepath.Join(dir, "hello.dlimg")
	if out, code := run(t, dir, env, bin, "build", "-o", img, filepath.Join(dir, "pilot.trace")); code != 0 {
		t.Fatalf("build: %s", out)
	}
	stage := filepath.Join(logs, "stage")
	env = append(env, "DLBUNDLE="+bin, "DLBUNDLE_STAGE_DIR="+stage)
	job := func(tag string) (calls, libs [][]string) {
		t.Helper()
		wrapper := filepath.Join(logs, "strace-"+tag+".sh")
		script := fmt.Sprintf("#!/bin/sh\nexec strace -f --seccomp-bpf -qq -e signal=none -e trace=%%file -o \"%s/%s.$FLUX_TASK_RANK\" \"$@\"\n", logs, tag)
		if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		out, code := run(t, app, env, flux, "start", "--test-size=3", "flux", "run", "-o", "userrc="+plugin, "-o", "dlbundle="+img, "-N3", "-n3", wrapper, hello)
		for r := 0; r < 3; r++ {
			if code != 0 || !strings.Contains(out, fmt.Sprintf("hello %d of 3", r)) {
				t.Fatalf("flux run -o dlbundle -N3 -n3 (%s): exit %d\n%s", tag, code, out)
			}
			c, l := clitest.OriginalCalls(t, filepath.Join(logs, fmt.Sprintf("%s.%d", tag, r)), clitest.EndsIn("hello"), clitest.InAStage)
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
		for r, c := range callsBefore {
			t.Logf("task %d, before: %d calls on the original trees:\n%s", r, len(c), strings.Join(c, "\n"))
		}
		t.Fatal("no task opened a library from outside the image before the fold: the test cannot tell anything")
	}
	rep, code := run(t, dir, env, bin, "report", "--stage-dir", stage)
	var fold []string
	for _, l := range strings.Split(rep, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "dlbundle build -o "+img+" --from "+img+" ") && !strings.Contains(l, " --include ") {
			if fold != nil {
				t.Fatalf("the report prints more than one fold:\n%s", rep)
			}
			fold = strings.Fields(l)[1:]
		}
	}
	if code != 0 || fold == nil {
		t.Fatalf("dlbundle report: exit %d, no fold into %s:\n%s", code, img, rep)
	}
	out, code := run(t, dir, env, bin, fold...)
	if code != 0 {
		t.Fatalf("the fold as printed: exit %d\n%s", code, out)
	}
	// Nothing here changed since the pilot; /var/lib itself may have (other
	// tests make their directories there meanwhile).
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "has changed") {
			t.Logf("the fold says: %s", l)
		}
		if strings.Contains(l, "has changed") && !strings.Contains(l, "warning: /var/lib has changed") {
			t.Errorf("the fold warns of a change nobody made:\n%s", l)
		}
	}
	callsAfter, libsAfter := job("after")
	for r := range callsAfter {
		t.Logf("task %d: %d file calls on the original trees (%d library opens) before the fold, %d (%d) after",
			r, len(callsBefore[r]), len(libsBefore[r]), len(callsAfter[r]), len(libsAfter[r]))
		if len(callsAfter[r]) > 0 {
			t.Errorf("task %d still makes %d file calls on the original trees after one fold (%d library opens):\n%s",
				r, len(callsAfter[r]), len(libsAfter[r]), strings.Join(callsAfter[r], "\n"))
		}
	}
}

package loader

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

// The preload build is chosen once, at staging, and recorded in the stage
// (STAGE/shim/preload, docs/loader.md); a warm exec uses the record. A stage
// without it (written by an older dlbundle), or with a record that names
// no shim object, gets the build detected from the libc, as before.
func TestExecUsesPreloadRecordedAtStaging(t *testing.T) {
	p := clitest.NewProbeImage(t)
	stageDir := filepath.Join(p.Work, "stage")
	env := clitest.CleanEnv(p.Work)
	// /usr/bin/env is not bundled: it runs natively, with the shim, and
	// shows the environment exec gave it.
	ldPreload := func() string {
		t.Helper()
		out, stderr, _, state := clitest.RunCLI(t, env, "exec", "--stage-dir", stageDir, p.Image, "--", "/usr/bin/env")
		if !state.Success() {
			t.Fatalf("dlbundle exec -- env: %v\n%s%s", state, out, stderr)
		}
		return clitest.Field(out, "LD_PRELOAD")
	}
	got := ldPreload() // stages
	stages, _ := filepath.Glob(filepath.Join(stageDir, "sha256-*"))
	if len(stages) != 1 {
		t.Fatalf("stages in %s: %v, want one", stageDir, stages)
	}
	stage := stages[0]
	record := filepath.Join(stage, stagefmt.ShimDir, stagefmt.PreloadChoice)
	recorded, err := os.Readlink(record)
	if err != nil {
		t.Fatalf("staging recorded no preload build: %v", err)
	}
	if want := stagefmt.DetectPreload(stage); recorded != want {
		t.Errorf("recorded preload build %q, detected %q", recorded, want)
	}
	if want := filepath.Join(stage, stagefmt.ShimDir, recorded); got != want {
		t.Errorf("LD_PRELOAD=%s, want the recorded build %s", got, want)
	}

	// The record is what a warm exec uses: point it at the other build
	// (both load on glibc 2.34 and later) and exec follows it.
	other := stagefmt.PreloadObject
	if recorded == stagefmt.PreloadObject {
		other = stagefmt.Preload234Object
	}
	replace := func(target string) {
		t.Helper()
		if err := os.Remove(record); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if target != "" {
			if err := os.Symlink(target, record); err != nil {
				t.Fatal(err)
			}
		}
	}
	replace(other)
	if got, want := ldPreload(), filepath.Join(stage, stagefmt.ShimDir, other); got != want {
		t.Errorf("with the record naming %s: LD_PRELOAD=%s, want %s", other, got, want)
	}
	// The app runs from the stage with the other build too.
	out, stderr, _, state := clitest.RunCLI(t, env, "exec", "--stage-dir", stageDir, p.Image, "--", p.Original, "exit7")
	if state.ExitCode() != 7 || clitest.Field(out, "exe") != p.Original {
		t.Errorf("probe with %s: status %v\nstdout: %s\nstderr: %s", other, state, out, stderr)
	}

	// A stage of an older dlbundle: no record; and a record that names
	// anything but a preload build is not followed.
	for _, target := range []string{"", "../../../../tmp/evil.so", "/usr/lib/x86_64-linux-gnu/libc.so.6", stagefmt.AuditObject} {
		replace(target)
		if got, want := ldPreload(), filepath.Join(stage, stagefmt.ShimDir, recorded); got != want {
			t.Errorf("record %q: LD_PRELOAD=%s, want the detected build %s", target, got, want)
		}
	}
	replace("")
	out, stderr, _, state = clitest.RunCLI(t, env, "exec", "--stage-dir", stageDir, p.Image, "--", p.Original, "exit7")
	if state.ExitCode() != 7 || clitest.Field(out, "exe") != p.Original {
		t.Errorf("probe on a stage without the record: status %v\nstdout: %s\nstderr: %s", state, out, stderr)
	}
	// An older stage may lack preload-2.34.so too.
	if err := os.Remove(filepath.Join(stage, stagefmt.ShimDir, stagefmt.Preload234Object)); err != nil {
		t.Fatal(err)
	}
	if got, want := ldPreload(), filepath.Join(stage, stagefmt.ShimDir, stagefmt.PreloadObject); got != want {
		t.Errorf("stage with preload.so only and no record: LD_PRELOAD=%s, want %s", got, want)
	}
}

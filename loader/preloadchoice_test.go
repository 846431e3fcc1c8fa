package loader

import (
	"os"
	"path/filepath"
	"testing"
)

// The preload build is chosen once, at staging, and recorded in the stage
// (STAGE/shim/preload, docs/loader.md); a warm exec uses the record. A stage
// without it (written by an older dlbundle), or with a record that names
// no shim object, gets the build detected from the libc, as before.
func TestExecUsesPreloadRecordedAtStaging(t *testing.T) {
	p := newProbeImage(t)
	stageDir := filepath.Join(p.work, "stage")
	env := cleanEnv(p.work)
	// /usr/bin/env is not bundled: it runs natively, with the shim, and
	// shows the environment exec gave it.
	ldPreload := func() string {
		t.Helper()
		out, stderr, _, state := runCLI(t, env, "exec", "--stage-dir", stageDir, p.image, "--", "/usr/bin/env")
		if !state.Success() {
			t.Fatalf("dlbundle exec -- env: %v\n%s%s", state, out, stderr)
		}
		return field(out, "LD_PRELOAD")
	}
	got := ldPreload() // stages
	stages, _ := filepath.Glob(filepath.Join(stageDir, "sha256-*"))
	if len(stages) != 1 {
		t.Fatalf("stages in %s: %v, want one", stageDir, stages)
	}
	stage := stages[0]
	record := filepath.Join(stage, stageShimDir, shimPreloadChoice)
	recorded, err := os.Readlink(record)
	if err != nil {
		t.Fatalf("staging recorded no preload build: %v", err)
	}
	if want := detectPreload(stage); recorded != want {
		t.Errorf("recorded preload build %q, detected %q", recorded, want)
	}
	if want := filepath.Join(stage, stageShimDir, recorded); got != want {
		t.Errorf("LD_PRELOAD=%s, want the recorded build %s", got, want)
	}

	// The record is what a warm exec uses: point it at the other build
	// (both load on glibc 2.34 and later) and exec follows it.
	other := shimPreload
	if recorded == shimPreload {
		other = shimPreload234
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
	if got, want := ldPreload(), filepath.Join(stage, stageShimDir, other); got != want {
		t.Errorf("with the record naming %s: LD_PRELOAD=%s, want %s", other, got, want)
	}
	// The app runs from the stage with the other build too.
	out, stderr, _, state := runCLI(t, env, "exec", "--stage-dir", stageDir, p.image, "--", p.original, "exit7")
	if state.ExitCode() != 7 || field(out, "exe") != p.original {
		t.Errorf("probe with %s: status %v\nstdout: %s\nstderr: %s", other, state, out, stderr)
	}

	// A stage of an older dlbundle: no record; and a record that names
	// anything but a preload build is not followed.
	for _, target := range []string{"", "../../../../tmp/evil.so", "/usr/lib/x86_64-linux-gnu/libc.so.6", shimAuditName} {
		replace(target)
		if got, want := ldPreload(), filepath.Join(stage, stageShimDir, recorded); got != want {
			t.Errorf("record %q: LD_PRELOAD=%s, want the detected build %s", target, got, want)
		}
	}
	replace("")
	out, stderr, _, state = runCLI(t, env, "exec", "--stage-dir", stageDir, p.image, "--", p.original, "exit7")
	if state.ExitCode() != 7 || field(out, "exe") != p.original {
		t.Errorf("probe on a stage without the record: status %v\nstdout: %s\nstderr: %s", state, out, stderr)
	}
	// An older stage may lack preload-2.34.so too.
	if err := os.Remove(filepath.Join(stage, stageShimDir, shimPreload234)); err != nil {
		t.Fatal(err)
	}
	if got, want := ldPreload(), filepath.Join(stage, stageShimDir, shimPreload); got != want {
		t.Errorf("stage with preload.so only and no record: LD_PRELOAD=%s, want %s", got, want)
	}
}

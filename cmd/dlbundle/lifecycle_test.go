package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/node"
)

// TestStageLsGcVerbs: stage stages once ("already staged" the second time),
// ls lists the stage, gc removes it when no process uses it (after the
// grace time), and --consume is refused outside a batch job.
func TestStageLsGcVerbs(t *testing.T) {
	bin := buildCLI(t)
	img, _ := imageOfTree(t)
	stage := filepath.Join(t.TempDir(), "stages-%U")
	run := func(env []string, args ...string) (string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		out, err := cmd.CombinedOutput()
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	if out, code := run(nil, "stage", "--stage-dir", stage, img); code != 0 || !strings.HasPrefix(out, "staged ") {
		t.Fatalf("stage: exit %d: %s", code, out)
	}
	if out, code := run(nil, "stage", "--stage-dir", stage, img); code != 0 || !strings.HasPrefix(out, "already staged ") {
		t.Fatalf("second stage: exit %d: %s", code, out)
	}
	// The pattern was expanded (%U), not created literally.
	if _, err := os.Stat(filepath.Join(filepath.Dir(stage), "stages-"+itoa(os.Getuid()))); err != nil {
		t.Errorf("stage dir pattern: %v", err)
	}
	out, code := run([]string{"DLBUNDLE_STAGE_DIR=" + stage}, "ls")
	if code != 0 || !strings.Contains(out, "1 stages") || !strings.Contains(out, "sha256-") {
		t.Fatalf("ls: exit %d: %s", code, out)
	}
	if out, _ := run(nil, "gc", "--stage-dir", stage); !strings.Contains(out, "removed 0 stages") {
		t.Errorf("gc within the grace time removed the fresh stage: %s", out)
	}
	time.Sleep(node.MinGrace) // gc never removes a stage used more recently, even with --grace 0s
	if out, code := run(nil, "gc", "--stage-dir", stage, "--grace", "0s"); code != 0 || !strings.Contains(out, "removed 1 stages") {
		t.Errorf("gc: exit %d: %s", code, out)
	}
	if out, _ := run(nil, "ls", "--stage-dir", stage); !strings.Contains(out, "0 stages") {
		t.Errorf("ls after gc: %s", out)
	}
	if out, code := run(nil, "stage", "--consume", "--stage-dir", stage, img); code == 0 || !strings.Contains(out, "batch job") {
		t.Errorf("--consume outside a job: exit %d: %s", code, out)
	}
	if _, err := os.Stat(img); err != nil {
		t.Errorf("--consume outside a job removed the image: %v", err)
	}
}

// Regression: `dlbundle ls` panicked on a directory named sha256-x in
// the stage dir (it printed the first 16 bytes of every name).
func TestLsIgnoresForeignStageName(t *testing.T) {
	bin := buildCLI(t)
	stage := filepath.Join(t.TempDir(), "stages")
	if err := os.Mkdir(stage, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(stage, "sha256-x"), 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "ls", "--stage-dir", stage).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "0 stages") {
		t.Errorf("ls: %v\n%s", err, out)
	}
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// dlbundle env run by the Slurm plugin (DLBUNDLE_LAUNCHER=slurm) words its
// failure for srun's users: srun's option as the one hint, no usage line of
// a command they never typed; run by hand it keeps its own.
func TestEnvMessagesForLauncher(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such.dlimg")
	run := func(env ...string) string {
		cmd := exec.Command(clitest.CLI(t), "env", "--format=env0", "--stage-dir", filepath.Join(t.TempDir(), "s"), "--", missing)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("env of a missing image succeeded:\n%s", out)
		}
		return string(out)
	}
	out := run("DLBUNDLE_LAUNCHER=slurm")
	if strings.Contains(out, "usage:") || strings.Contains(out, "use --fallback") ||
		!strings.Contains(out, "srun --dlbundle-fallback") || !strings.Contains(out, "no-such.dlimg") {
		t.Errorf("under the Slurm plugin: %q; want the image named, srun's hint alone, no usage", out)
	}
	if out := run(); !strings.Contains(out, "usage: dlbundle env") || strings.Contains(out, "srun") {
		t.Errorf("by hand: %q; want env's own usage line", out)
	}
}

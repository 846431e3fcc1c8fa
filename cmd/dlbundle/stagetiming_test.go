package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStageTimingLines: with DLBUNDLE_STAGE_TIMING=1, exec prints where a
// cold stage's time went (its phases, the decode workers' sums, the clock
// line the first-rank benchmark reads) before the app's own output, and on
// a warm stage only what it did; without the variable it prints nothing.
func TestStageTimingLines(t *testing.T) {
	bin := buildCLI(t)
	img, _ := imageOfTree(t)
	stage := filepath.Join(t.TempDir(), "stages")
	run := func(timing bool) string {
		cmd := exec.Command(bin, "exec", "--stage-dir", stage, img, "--", "/bin/echo", "app says hi")
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		if timing {
			cmd.Env = append(cmd.Env, "DLBUNDLE_STAGE_TIMING=1")
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("exec: %v\n%s", err, out)
		}
		return string(out)
	}
	cold := run(true)
	for _, want := range []string{
		"dlbundle-timing: phase image: footer and TOC read, digest, decoded ",
		"dlbundle-timing: phase extract: mkdirs ",
		"dlbundle-timing: sum workers: decode (zstd) ",
		"dlbundle-timing: sum workers: write (pwrite) ",
		"dlbundle-timing: phase ensure stage (all) ",
		"dlbundle-timing: clock ",
	} {
		if !strings.Contains(cold, want) {
			t.Errorf("cold exec's output lacks %q:\n%s", want, cold)
		}
	}
	if i, j := strings.Index(cold, "dlbundle-timing: clock "), strings.Index(cold, "app says hi"); i < 0 || j < i {
		t.Errorf("the timing lines do not come before the app's output:\n%s", cold)
	}
	warm := run(true)
	if !strings.Contains(warm, "dlbundle-timing: phase alias lookup ") || strings.Contains(warm, "decode (zstd)") {
		t.Errorf("warm exec: want the alias lookup and no extraction:\n%s", warm)
	}
	if quiet := run(false); strings.Contains(quiet, "dlbundle-timing") || !strings.Contains(quiet, "app says hi") {
		t.Errorf("without DLBUNDLE_STAGE_TIMING: %s", quiet)
	}
}

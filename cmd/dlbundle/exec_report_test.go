package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An unwritable --report path is an error before anything runs: the shim
// writes reports at exit, where a failure could be told to nobody.
func TestExecUnwritableReportFailsFirst(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	c := &ExecCmd{
		Image: filepath.Join(dir, "app.dlimg"), // need not exist: checked first
		StageFlags: StageFlags{StageDir: filepath.Join(dir, "stage"),
			Report: filepath.Join(dir, "no-such-dir", "report.jsonl")},
		Command: []string{"/bin/sh", "-c", "touch " + marker},
	}
	err := c.Run()
	if err == nil || !strings.Contains(err.Error(), "--report") || !strings.Contains(err.Error(), "writable") {
		t.Fatalf("Run = %v, want an error about the unwritable --report path", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the app ran")
	}
	if _, err := os.Stat(c.StageDir); err == nil {
		t.Error("staging started before the --report check")
	}
}

package abspath

import (
	"path/filepath"
	"testing"
)

// TestAbsJoinsTheKernelsCwd: a relative path is joined to getcwd's answer,
// not $PWD's (which a job's environment may carry stale), and an absolute
// one is only cleaned.
func TestAbsJoinsTheKernelsCwd(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("PWD", "/somewhere/else")
	got, err := Abs("a/../b")
	if want := filepath.Join(dir, "b"); err != nil || got != want {
		t.Errorf("Abs(a/../b) = %q, %v; want %q", got, err, want)
	}
	if got, err := Abs("/x//y/./z/.."); err != nil || got != "/x/y" {
		t.Errorf("Abs(/x//y/./z/..) = %q, %v; want /x/y", got, err)
	}
}

package loader

import "testing"

// A process whose executable runs from the stage reports the executable's
// original path, not the staged copy /proc/self/exe names.
func TestReportExeIsTheOriginalPath(t *testing.T) {
	f := newReportFixture(t)
	rs, ws, stderr := f.exec(t, "exit")
	if !ws.Exited() || ws.ExitStatus() != 0 || len(rs) != 1 {
		t.Fatalf("app ended %v with %d report lines (stderr %q); want exit 0 and 1 line", ws, len(rs), stderr)
	}
	if rs[0].Exe != f.probe {
		t.Errorf("exe = %q, want the original %s", rs[0].Exe, f.probe)
	}
}

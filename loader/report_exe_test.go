package loader

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/dlbundle/dlbundle/report"
)

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

// The report's exe is the program as the process was started (AT_EXECFN),
// made absolute, with no /proc access: the staged copy started by a
// relative path (as a launcher without dlbundle exec may) reports the
// original path, and a #! script reports itself, where /proc/self/exe
// names its interpreter (the staged probe: the check can fail).
func TestReportExeIsThePathStarted(t *testing.T) {
	f := newReportFixture(t)
	file := filepath.Join(t.TempDir(), "report.jsonl")
	env, stageDir := launcherlessEnv(t, f.work, "--stage-dir", filepath.Join(f.work, "stage"), "--report", file, f.image)
	staged := filepath.Join(stageDir, "root") + f.probe
	runIn(t, filepath.Dir(staged), env, "./"+filepath.Base(staged))
	script := filepath.Join(f.work, "run-probe")
	if err := os.WriteFile(script, []byte("#!"+staged+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	runIn(t, t.TempDir(), env, script)

	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	rs, bad, err := report.ReadReports(bytes.NewReader(b))
	if err != nil || bad != 0 || len(rs) != 2 {
		t.Fatalf("report %q: %d lines, %d bad, %v; want 2", b, len(rs), bad, err)
	}
	if rs[0].Exe != f.probe {
		t.Errorf("started as ./%s in its staged directory: exe = %q, want the original %s", filepath.Base(staged), rs[0].Exe, f.probe)
	}
	if rs[1].Exe != script {
		t.Errorf("a #! script: exe = %q, want the script %s (not its interpreter)", rs[1].Exe, script)
	}
}

package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// The report and debug-log paths exec hands the shim go through the one
// rule: uid 1001 makes a 0777 directory in a sticky world-writable one (as
// /tmp/reports would be); uid 1002's `exec --report /tmp/reports/r.jsonl`
// and DLBUNDLE_DEBUG_DIR=/tmp/reports created its files there, where uid
// 1001 can read them (the paths the app looked up) or swap them. Both are
// refused before staging and the app does not run (by exec and by env);
// the same paths in a directory uid 1002 made there work.
func TestReportAndDebugPathsFollowTheRule(t *testing.T) {
	needRoot(t)
	p := clitest.NewProbeImage(t)
	makePublic(t, p.Work)
	top := publicDir(t)
	cli := publicCLI(t, top)
	tmp := stickyDir(t, top, "tmp")
	mkdirAs := func(uid uint32, name string) string {
		d := filepath.Join(tmp, name)
		if out, code := runAs(t, uid, nil, "/bin/mkdir", "-m", "0777", d); code != 0 {
			t.Fatalf("mkdir %s as %d: %s", d, uid, out)
		}
		return d
	}
	theirs, mine := mkdirAs(attackerUID, "reports"), mkdirAs(victimUID, "mine")
	home := filepath.Join(top, "victim")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(home, victimUID, victimUID)
	stage := filepath.Join(home, "stage")
	for _, c := range []struct {
		name string
		env  []string
		args []string
		made string
	}{
		{"--report", nil, []string{"--report", filepath.Join(theirs, "r.jsonl")}, filepath.Join(theirs, "r.jsonl")},
		{"DLBUNDLE_DEBUG_DIR", []string{"DLBUNDLE_DEBUG_DIR=" + theirs}, []string{"--debug"}, theirs},
	} {
		args := append(append([]string{cli, "exec", "--stage-dir", stage}, c.args...), p.Image, "--", p.Original)
		out, code := runAs(t, victimUID, append(clitest.CleanEnv(home), c.env...), args...)
		if code == 0 || strings.Contains(out, "exe=") || !strings.Contains(out, "owned by uid 1001") ||
			!strings.Contains(out, "choose a directory of yours") {
			t.Errorf("%s in uid 1001's directory in a sticky one: exit %d; want a refusal naming uid 1001's directory, and the app not run:\n%s", c.name, code, out)
		}
		if ents, _ := os.ReadDir(theirs); len(ents) != 0 {
			t.Errorf("%s: uid 1002 wrote %d files in uid 1001's directory (%s)", c.name, len(ents), ents[0].Name())
		}
	}
	// dlbundle env (launcher plugins) checks the same paths.
	for _, c := range [][]string{{"--report", filepath.Join(theirs, "r.jsonl")}, {"--debug"}} {
		args := append(append([]string{cli, "env", "--stage-dir", stage}, c...), p.Image)
		out, code := runAs(t, victimUID, append(clitest.CleanEnv(home), "DLBUNDLE_DEBUG_DIR="+theirs), args...)
		if code == 0 || strings.Contains(out, "DLBUNDLE_STAGE") || !strings.Contains(out, "owned by uid 1001") {
			t.Errorf("env %s with uid 1001's directory: exit %d; want a refusal and no variables:\n%s", c[0], code, out)
		}
	}
	report := filepath.Join(mine, "r.jsonl")
	out, code := runAs(t, victimUID, append(clitest.CleanEnv(home), "DLBUNDLE_DEBUG_DIR="+mine), cli, "exec", "--stage-dir", stage, "--debug", "--report", report, p.Image, "--",
		"/bin/sh", "-c", "ls / >/dev/null && echo ran")
	if code != 0 || !strings.Contains(out, "ran") {
		t.Fatalf("--report and DLBUNDLE_DEBUG_DIR in uid 1002's own directory: exit %d:\n%s", code, out)
	}
	if st, err := os.Stat(report); err != nil || st.Size() == 0 {
		t.Errorf("no report written to %s: %v", report, err)
	}
	if logs, _ := filepath.Glob(filepath.Join(mine, "*.log")); len(logs) == 0 {
		t.Errorf("no debug log written to %s", mine)
	}
}

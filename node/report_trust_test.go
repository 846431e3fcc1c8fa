package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
	"golang.org/x/sys/unix"
)

// A record exec would write: one process that loaded a library from
// outside the image (so report advises a fold).
const plantedRecord = `{"pid":7,"exe":"/bin/app","outside":["/opt/attacker/lib.so"]}` + "\n"

// hostileNote is the attacker's .image note: shell text that runs when a
// fold command holding it in double quotes is eval'ed, and a control byte
// that once made report quote it that way.
func hostileNote(pwned string) string {
	return "$(id>" + pwned + ";printf /home/victim/app.dlimg;: \x01)\n"
}

func writeOwned(t *testing.T, p, content string, mode os.FileMode, uid int) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}

func mkdirOwned(t *testing.T, p string, mode os.FileMode, uid int) {
	t.Helper()
	if err := os.Mkdir(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// TestReportRefusesAttackersRecords plays the red team's report attack with
// real users: the attacker squats the victim's default stage-dir name in a
// sticky shared directory, with records and a hostile .image note; the
// victim's `dlbundle report --json` must not read them (the stage dir is
// found as staging finds it), and in the victim's own stage dir a records
// dir others can write, a record of another user's and a FIFO note are
// skipped with a warning naming them, never opened, never hanging.
func TestReportRefusesAttackersRecords(t *testing.T) {
	needRoot(t)
	base := publicDir(t)
	cli := publicCLI(t, base)
	shm := stickyDir(t, base, "shm")
	pwned := filepath.Join(base, "pwned")
	env := clitest.CleanEnv(base)

	// The squat: /shm/dlbundle-1002 made by the attacker.
	squat := filepath.Join(shm, "dlbundle-1002")
	mkdirOwned(t, squat, 0o755, attackerUID)
	mkdirOwned(t, filepath.Join(squat, "records"), 0o755, attackerUID)
	writeOwned(t, filepath.Join(squat, "records", "run.report"), plantedRecord, 0o644, attackerUID)
	writeOwned(t, filepath.Join(squat, "records", "run.image"), hostileNote(pwned), 0o644, attackerUID)

	out, code := runAs(t, victimUID, env, cli, "report", "--json", "--stage-dir", squat)
	if code == 0 || strings.Contains(out, "/opt/attacker") || strings.Contains(out, "app.dlimg") {
		t.Errorf("victim's report of the squatted stage dir (exit %d) read the attacker's records:\n%s", code, out)
	}
	if !strings.Contains(out, "1001") {
		t.Errorf("the message does not name the squatter:\n%s", out)
	}

	// The victim's own stage dir, its records dir left writable by others.
	own := filepath.Join(shm, "v")
	mkdirOwned(t, own, 0o700, victimUID)
	recs := filepath.Join(own, "records")
	mkdirOwned(t, recs, 0o777, victimUID)
	writeOwned(t, filepath.Join(recs, "run.report"), plantedRecord, 0o600, victimUID)
	out, code = runAs(t, victimUID, env, cli, "report", "--json", "--stage-dir", own)
	if code == 0 || strings.Contains(out, "/opt/attacker") || !strings.Contains(out, "skipped the records in "+recs) {
		t.Errorf("report of a records dir others can write (exit %d): want it skipped with a warning naming it:\n%s", code, out)
	}

	// Made private: a record of the attacker's in it is refused by owner.
	if err := os.Chmod(recs, 0o700); err != nil {
		t.Fatal(err)
	}
	writeOwned(t, filepath.Join(recs, "run.report"), plantedRecord, 0o644, attackerUID)
	out, code = runAs(t, victimUID, env, cli, "report", "--json", "--stage-dir", own)
	if code == 0 || !strings.Contains(out, "owned by uid 1001, not by uid 1002") {
		t.Errorf("report of a record the attacker owns (exit %d): want a refusal naming the owner:\n%s", code, out)
	}

	// The victim's own record, and a FIFO where its note would be: the
	// report is given (no hang: runAs would not return), the note is not
	// opened and the advice names no image from it.
	writeOwned(t, filepath.Join(recs, "run.report"), plantedRecord, 0o600, victimUID)
	fifo := filepath.Join(recs, "run.image")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Lchown(fifo, victimUID, victimUID)
	out, code = runAs(t, victimUID, env, cli, "report", "--json", "--stage-dir", own)
	if code != 0 || !strings.Contains(out, "not a regular file") || !strings.Contains(out, `"fold_argv": [`) {
		t.Errorf("report with a FIFO note (exit %d): want the report, the note refused as not a regular file, fold_argv given:\n%s", code, out)
	}

	// A hostile note of the victim's own (written by a confused script):
	// the advice holds no shell text from it, and nothing ran.
	os.Remove(fifo)
	writeOwned(t, fifo, hostileNote(pwned), 0o600, victimUID)
	out, code = runAs(t, victimUID, env, cli, "report", "--stage-dir", own)
	if code != 0 || strings.Contains(out, "dlbundle build") || !strings.Contains(out, "no command given") {
		t.Errorf("report text with a control byte in the noted image (exit %d): want no command:\n%s", code, out)
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Fatalf("%s exists: something ran the note's text", pwned)
	}
}

package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// pwnedImage writes into dir the image an attacker plants: a program
// printing "PWNED" and its uid, bundled at original.
func pwnedImage(t *testing.T, dir, original string) string {
	t.Helper()
	img := filepath.Join(dir, "pwned.dlimg")
	clitest.PwnedImage(t, dir, img, original)
	return img
}

// Regression: after `stage --consume` removed a job's node-local copy,
// every later launch of the job opened whatever was at the freed name (the
// record was consulted only on ENOENT). The record is now looked up first and
// the path is never opened again inside the job: neither an image uid 1001
// plants there nor uid 1001's symlink to another image of the victim's own
// (which the owner check alone would accept) is read; the launch runs the
// consumed image. A second `stage --consume` in the job leaves the new file
// alone and says so.
func TestConsumedPathNeverReopenedInItsJob(t *testing.T) {
	needRoot(t)
	p := clitest.NewProbeImage(t)
	makePublic(t, p.Work)
	top := publicDir(t)
	cli := publicCLI(t, top)
	tmp := stickyDir(t, top, "tmp")
	pwned := pwnedImage(t, top, p.Original)
	victimDir := filepath.Join(top, "victim")
	if err := os.Mkdir(victimDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(victimDir, victimUID, victimUID); err != nil {
		t.Fatal(err)
	}
	victimOther := filepath.Join(victimDir, "other.dlimg")
	local := filepath.Join(tmp, "dlbundle-42.dlimg")
	for _, argv := range [][]string{{"/bin/cp", p.Image, local}, {"/bin/cp", pwned, victimOther}} {
		if out, code := runAs(t, victimUID, nil, argv...); code != 0 {
			t.Fatalf("%v: %s", argv, out)
		}
	}
	stage := filepath.Join(victimDir, "stage")
	env := func(step string) []string {
		return append(clitest.CleanEnv(victimDir), "SLURM_JOB_ID=42", "SLURM_STEP_ID="+step)
	}
	if out, code := runAs(t, victimUID, env("0"), cli, "stage", "--consume", "--stage-dir", stage, local); code != 0 {
		t.Fatalf("stage --consume: exit %d\n%s", code, out)
	}
	if _, err := os.Lstat(local); err == nil {
		t.Fatal("--consume left the copy")
	}
	for i, plant := range [][]string{{"/bin/cp", pwned, local}, {"/bin/ln", "-sf", victimOther, local}} {
		os.Remove(local)
		if out, code := runAs(t, attackerUID, nil, plant...); code != 0 {
			t.Fatalf("%v as uid 1001: %s", plant, out)
		}
		out, code := runAs(t, victimUID, env(string(rune('1'+i))), cli, "exec", "--stage-dir", stage, local, "--", p.Original)
		if code != 0 || strings.Contains(out, "PWNED") || !strings.Contains(out, "exe="+p.Original) {
			t.Errorf("after %v: exit %d; want the consumed image run, not the file now at the path:\n%s", plant, code, out)
		}
	}
	out, code := runAs(t, victimUID, env("3"), cli, "stage", "--consume", "--stage-dir", stage, local)
	if _, err := os.Lstat(local); code != 0 || err != nil || !strings.Contains(out, "was consumed earlier in this job") {
		t.Errorf("a second stage --consume of the path: exit %d, file left: %v; want it left alone and a warning:\n%s", code, err == nil, out)
	}
}

// gc forgot a running job's consumed record: removing a stage removed every
// alias to it, the record among them, and the job's next step opened the
// freed path again (where uid 1001 had re-created the directory). Another
// job's epilog (gc --job 89 --keep 0) now keeps the stage and the record of
// job 90, whose next step runs the consumed image and not the file planted at
// the path; job 90's own epilog removes the record, and the next gc the
// stage. The epilog also removes the job's failure markers.
func TestConsumedRecordOutlivesGCWhileItsJobRuns(t *testing.T) {
	needRoot(t)
	p := clitest.NewProbeImage(t)
	makePublic(t, p.Work)
	top := publicDir(t)
	cli := publicCLI(t, top)
	pwned := pwnedImage(t, top, p.Original)
	victimDir := filepath.Join(top, "victim")
	if err := os.Mkdir(victimDir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(victimDir, victimUID, victimUID)
	// The sbcast copy in a directory of the victim's that the attacker can
	// write too (the group's, say): the trust rule alone would accept what
	// is planted there.
	copies := filepath.Join(victimDir, "copies")
	os.Mkdir(copies, 0o770)
	os.Chown(copies, victimUID, attackerUID)
	os.Chmod(copies, 0o770)
	local := filepath.Join(copies, "app.dlimg")
	if out, code := runAs(t, victimUID, nil, "/bin/cp", p.Image, local); code != 0 {
		t.Fatalf("cp: %s", out)
	}
	stage := filepath.Join(victimDir, "stage")
	job := func(id, step string) []string {
		return append(clitest.CleanEnv(victimDir), "SLURM_JOB_ID="+id, "SLURM_STEP_ID="+step)
	}
	if out, code := runAs(t, victimUID, job("90", "0"), cli, "stage", "--consume", "--stage-dir", stage, local); code != 0 {
		t.Fatalf("stage --consume: exit %d\n%s", code, out)
	}
	// A failure of job 90 leaves a marker (a missing image).
	runAs(t, victimUID, job("90", "1"), cli, "exec", "--stage-dir", stage, filepath.Join(victimDir, "missing.dlimg"), "--", p.Original)
	if m, _ := filepath.Glob(filepath.Join(stage, "failed.*")); len(m) == 0 {
		t.Fatal("no failure marker was written: the test cannot check gc --job removes it")
	}
	time.Sleep(MinGrace + 100*time.Millisecond)
	if out, code := runAs(t, victimUID, job("89", "0"), cli, "gc", "--stage-dir", stage, "--job", "89", "--keep", "0", "--grace", "0s"); code != 0 {
		t.Fatalf("gc --job 89: exit %d\n%s", code, out)
	}
	if out, code := runAs(t, attackerUID, nil, "/bin/cp", pwned, local); code != 0 {
		t.Fatalf("the attacker's cp: %s", out)
	}
	out, code := runAs(t, victimUID, job("90", "2"), cli, "exec", "--stage-dir", stage, local, "--", p.Original)
	if code != 0 || strings.Contains(out, "PWNED") || !strings.Contains(out, "exe="+p.Original) {
		t.Errorf("job 90's step after another job's gc: exit %d; want the consumed image run:\n%s", code, out)
	}
	if out, code := runAs(t, victimUID, job("90", "3"), cli, "gc", "--stage-dir", stage, "--job", "90", "--keep", "0", "--grace", "0s"); code != 0 {
		t.Fatalf("gc --job 90: exit %d\n%s", code, out)
	}
	if m, _ := filepath.Glob(filepath.Join(stage, "failed.*")); len(m) != 0 {
		t.Errorf("gc --job 90 left the job's failure markers: %v", m)
	}
	if a, _ := filepath.Glob(filepath.Join(stage, aliasDirName, "*consumed*")); len(a) != 0 {
		t.Errorf("gc --job 90 left the job's consumed record: %v", a)
	}
	time.Sleep(MinGrace + 100*time.Millisecond)
	runAs(t, victimUID, job("91", "0"), cli, "gc", "--stage-dir", stage, "--keep", "0", "--grace", "0s")
	if s, _ := filepath.Glob(filepath.Join(stage, "sha256-*")); len(s) != 0 {
		t.Errorf("after job 90 ended, gc kept its stage: %v", s)
	}
}

// A job's broadcast record (--dlbundle-bcast) survives plain gc, which
// removes dangling aliases (it names no stage), and goes with its job's
// gc --job; another job's record is its own.
func TestBcastRecordLivesWithItsJob(t *testing.T) {
	dir := t.TempDir()
	dest := "/tmp/dlbundle-bcast-0.7-0123456789abcdef.dlimg"
	if Broadcasted(dir, "7", dest) {
		t.Fatal("a record before any copy")
	}
	unlock, err := LockBroadcast(dir, "7")
	if err != nil {
		t.Fatal(err)
	}
	if err := RecordBroadcast(dir, "7", dest); err != nil {
		t.Fatal(err)
	}
	unlock()
	if !Broadcasted(dir, "7", dest) || Broadcasted(dir, "8", dest) || Broadcasted(dir, "7", dest+"x") {
		t.Fatal("the record answers for its job and copy only")
	}
	if _, err := GC(context.Background(), dir, GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if !Broadcasted(dir, "7", dest) {
		t.Fatal("plain gc removed the job's broadcast record: its next step would copy the image again")
	}
	if _, err := GC(context.Background(), dir, GCOptions{Job: "7"}); err != nil {
		t.Fatal(err)
	}
	if Broadcasted(dir, "7", dest) {
		t.Fatal("gc --job kept the finished job's broadcast record")
	}
	if left, _ := os.ReadDir(filepath.Join(dir, aliasDirName)); len(left) != 0 {
		t.Fatalf("gc --job left %v", left)
	}
}

// gc --job removes the job's copies sbcast left in /tmp that are the
// caller's own regular files, and nothing else: not another job's, not a
// link, not another user's file under the name.
func TestRemoveBcastCopiesOwnOnly(t *testing.T) {
	needRoot(t)
	job := fmt.Sprintf("t%d", time.Now().UnixNano())
	pre := filepath.Join(BcastCopyDir, BcastCopyPrefix(os.Getuid(), job))
	mine, other, link, others := pre+"aaaa.dlimg", filepath.Join(BcastCopyDir, BcastCopyPrefix(os.Getuid(), job+"9")+"aaaa.dlimg"), pre+"bbbb.dlimg", pre+"cccc.dlimg"
	for _, f := range []string{mine, other, others} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(f) })
	}
	if err := os.Chown(others, 1001, 1001); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mine, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(link) })
	n, err := RemoveBcastCopies(job)
	if err != nil || n != 1 {
		t.Fatalf("RemoveBcastCopies: %d, %v; want 1 removed", n, err)
	}
	for f, want := range map[string]bool{mine: false, other: true, link: true, others: true} {
		if _, err := os.Lstat(f); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", f, err == nil, want)
		}
	}
}

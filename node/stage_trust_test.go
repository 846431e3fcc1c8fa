package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// No other user's file is ever staged or run: an image path is walked by
// package trustpath's rule, which trusts nothing another user made in a
// directory every user can write (a file, a link, or a directory whoever
// owns what lies below it). Uid 1001 plants images in a sticky
// world-writable directory (as /tmp): at the name a job expects, through a
// symlink to one in its own directory, and in a directory it made first at
// the name a victim's job script uses (mkdir -p then succeeds on it).
// Neither uid 1002 nor root (a Prolog's `stage`) runs or stages them; the
// same image reached in 1001's own directory, and 1002's own image in the
// shared directory, are staged.
func TestStageRefusesImagePlantedByOtherUser(t *testing.T) {
	needRoot(t)
	p := clitest.NewProbeImage(t)
	makePublic(t, p.Work)
	top := publicDir(t)
	cli := publicCLI(t, top)
	tmp := stickyDir(t, top, "tmp")
	mkdirOwned := func(name string, uid int) string {
		d := filepath.Join(top, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
		return d
	}
	attackerDir := mkdirOwned("attacker", attackerUID)
	victimDir := mkdirOwned("victim", victimUID)
	planted := filepath.Join(tmp, "dlbundle-42.dlimg")
	own := filepath.Join(attackerDir, "app.dlimg")
	link := filepath.Join(tmp, "linked.dlimg")
	mine := filepath.Join(tmp, "mine.dlimg")
	jobs := filepath.Join(tmp, "victim-jobs")
	for _, c := range []struct {
		uid  uint32
		argv []string
	}{
		{attackerUID, []string{"/bin/cp", p.Image, planted}},
		{attackerUID, []string{"/bin/cp", p.Image, own}},
		{attackerUID, []string{"/bin/ln", "-s", own, link}},
		{victimUID, []string{"/bin/cp", p.Image, mine}},
		// The directory a victim's job script uses, made first (mode 0755).
		{attackerUID, []string{"/bin/mkdir", "-m", "0755", jobs}},
		{attackerUID, []string{"/bin/cp", p.Image, filepath.Join(jobs, "app.dlimg")}},
	} {
		if out, code := runAs(t, c.uid, nil, c.argv...); code != 0 {
			t.Fatalf("%v: %s", c.argv, out)
		}
	}
	// The victim's job script: mkdir -p succeeds (the directory exists), cp
	// fails (it is not the victim's), exec follows.
	if out, code := runAs(t, victimUID, nil, "/bin/mkdir", "-p", jobs); code != 0 {
		t.Fatalf("mkdir -p %s: %s", jobs, out)
	}
	if _, code := runAs(t, victimUID, nil, "/bin/cp", p.Image, jobs+"/"); code == 0 {
		t.Fatalf("uid 1002 could write into uid 1001's %s: the attack's premise is wrong", jobs)
	}
	env := append(clitest.CleanEnv(victimDir), "SLURM_JOB_ID=42")
	n := 0
	exec := func(uid uint32, img string) (string, int) {
		n++
		stage := filepath.Join(victimDir, fmt.Sprintf("stage%d", n))
		if uid == 0 {
			stage = filepath.Join(top, fmt.Sprintf("root-stage%d", n))
		}
		return runAs(t, uid, env, cli, "exec", "--stage-dir", stage, img, "--", p.Original)
	}
	for _, c := range []struct {
		name, img, want string
		uid             uint32
	}{
		{"uid 1001's file in the shared dir, as uid 1002", planted, "owned by uid 1001 and lies in " + tmp, victimUID},
		{"uid 1001's file in the shared dir, as root", planted, "owned by uid 1001 and lies in " + tmp, 0},
		{"uid 1001's link in the shared dir, as uid 1002", link, "a symbolic link of uid 1001 in " + tmp, victimUID},
		{"uid 1001's link in the shared dir, as root", link, "a symbolic link of uid 1001 in " + tmp, 0},
		{"uid 1001's directory in the shared dir, as uid 1002", filepath.Join(jobs, "app.dlimg"), jobs + ", owned by uid 1001 and lies in " + tmp, victimUID},
		{"uid 1001's directory in the shared dir, as root", filepath.Join(jobs, "app.dlimg"), jobs + ", owned by uid 1001 and lies in " + tmp, 0},
	} {
		out, code := exec(c.uid, c.img)
		if code != 1 || strings.Contains(out, "exe=") || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d; want a refusal saying %q, and the app not run:\n%s", c.name, code, c.want, out)
		}
	}
	for _, c := range []struct {
		name, img string
		uid       uint32
	}{
		{"uid 1001's image in its own directory, as uid 1002", own, victimUID},
		{"uid 1002's own image in the shared dir", mine, victimUID},
	} {
		if out, code := exec(c.uid, c.img); code != 0 || !strings.Contains(out, "exe="+p.Original) {
			t.Errorf("%s: exit %d; want it staged and run:\n%s", c.name, code, out)
		}
	}
	// `dlbundle stage` (a Prolog) checks the same way.
	for _, img := range []string{planted, filepath.Join(jobs, "app.dlimg")} {
		out, code := runAs(t, 0, env, cli, "stage", "--stage-dir", filepath.Join(top, "prolog-stage"), img)
		if code != 1 || !strings.Contains(out, "owned by uid 1001") {
			t.Errorf("stage as root of uid 1001's planted image %s: exit %d:\n%s", img, code, out)
		}
	}
}

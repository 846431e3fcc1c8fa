package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// TestGatherRefusesSquatAndLinks plays the Epilog attack with real users.
// The attacker (1001) makes job 77's directory first in the shared sticky
// gather dir, with a link at the destination name pointing to the victim's
// ~/.bashrc. The victim's (1002) `report --gather` refuses the squatted job
// dir and writes nothing through the link; the example epilog.sh run as
// root (for a job of root's) refuses the squat too. A job dir the victim
// made (the next job) is filled with the record, a link left in it by
// nobody else, and the copy is the victim's own, mode 0600.
func TestGatherRefusesSquatAndLinks(t *testing.T) {
	needRoot(t)
	base := publicDir(t)
	cli := publicCLI(t, base)
	shared := stickyDir(t, base, "records")
	home := userDir(t, base, "home", victimUID)
	bashrc := filepath.Join(home, ".bashrc")
	writeOwned(t, bashrc, "# victim's\n", 0o644, victimUID)

	// The victim's stage dir and one record of job 77 and of job 78.
	stage := filepath.Join(home, "stage")
	mkdirOwned(t, stage, 0o700, victimUID)
	mkdirOwned(t, filepath.Join(stage, "records"), 0o700, victimUID)
	for _, job := range []string{"77", "78"} {
		writeOwned(t, filepath.Join(stage, "records", "slurm-"+job+".report"), plantedRecord, 0o600, victimUID)
	}

	// The squat: shared/77 by the attacker, a link at the destination.
	squat := filepath.Join(shared, "77")
	mkdirOwned(t, squat, 0o777, attackerUID)
	link := filepath.Join(squat, "n1.slurm-77.report")
	if err := os.Symlink(bashrc, link); err != nil {
		t.Fatal(err)
	}
	os.Lchown(link, attackerUID, attackerUID)

	env := clitest.CleanEnv(home)
	out, code := runAs(t, victimUID, env, cli, "report", "--stage-dir", stage, "--gather", shared, "--job", "77", "--node", "n1")
	if code == 0 || !strings.Contains(out, "owned by uid 1001") {
		t.Errorf("victim's gather into the attacker's job dir: exit %d, want a refusal naming the owner:\n%s", code, out)
	}
	if b, _ := os.ReadFile(bashrc); string(b) != "# victim's\n" {
		t.Fatalf("the victim's ~/.bashrc was written through the link: %q", b)
	}

	// The example Epilog, as root, for a job of root's (runuser needs a
	// user name): the squatted job dir is refused, nothing written.
	epilog, err := filepath.Abs("../examples/jobs/epilog.sh")
	if err != nil {
		t.Fatal(err)
	}
	rootStage := filepath.Join(base, "rootstage")
	mkdirOwned(t, rootStage, 0o700, 0)
	mkdirOwned(t, filepath.Join(rootStage, "records"), 0o700, 0)
	writeOwned(t, filepath.Join(rootStage, "records", "slurm-77.report"), plantedRecord, 0o600, 0)
	cmd := exec.Command("/bin/sh", epilog)
	cmd.Env = append(clitest.CleanEnv(base), "DLBUNDLE="+cli, "DLBUNDLE_STAGE_DIR="+rootStage, "DLBUNDLE_RECORDS_TO="+shared,
		"SLURM_JOB_ID=77", "SLURM_JOB_UID=0", "SLURM_JOB_USER=root", "SLURMD_NODENAME=n1")
	eout, _ := cmd.CombinedOutput()
	if !strings.Contains(string(eout), "gathering the job's records failed") {
		t.Errorf("epilog as root into a squatted job dir: want the gather refused:\n%s", eout)
	}
	if b, _ := os.ReadFile(bashrc); string(b) != "# victim's\n" {
		t.Fatalf("the epilog wrote the victim's ~/.bashrc through the link: %q", b)
	}

	// Job 78: the victim's own job dir, made by the verb.
	out, code = runAs(t, victimUID, env, cli, "report", "--stage-dir", stage, "--gather", shared, "--job", "78", "--node", "n1")
	if code != 0 {
		t.Fatalf("victim's gather of job 78: exit %d:\n%s", code, out)
	}
	got := filepath.Join(shared, "78", "n1.slurm-78.report")
	st, err := os.Lstat(got)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Fatalf("gathered %s: %v %v, want a regular file, mode 0600", got, st, err)
	}
	if b, _ := os.ReadFile(got); string(b) != plantedRecord {
		t.Errorf("gathered %q, want the record", b)
	}
}

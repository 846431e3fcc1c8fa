package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/internal/clitest"
	"golang.org/x/sys/unix"
)

// The example job scripts need a user with a name (runuser -u
// "$SLURM_JOB_USER"): the victim here is nobody, which every Debian node
// has; the attacker is uid 1001, named by nobody.
const (
	namedVictim     = "nobody"
	namedVictimUID  = 65534
	namedVictimGID  = 65534
	exampleDeadline = 90 * time.Second
)

// hostileFiles is what the victim owns that the attacker aims at: each
// file's content and identity, checked unchanged after every script.
type hostileFiles struct {
	paths []string
	was   map[string]string
}

func (h *hostileFiles) add(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	writeOwned(t, p, content, mode, namedVictimUID)
	h.paths = append(h.paths, p)
	h.was[p] = identity(t, p)
}

func identity(t *testing.T, p string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("ino=%d nlink=%d mode=%o uid=%d %q", st.Ino, st.Nlink, st.Mode, st.Uid, b)
}

// unchanged fails if any of the victim's files was written, replaced,
// chmod'ed or given away, after the step named what.
func (h *hostileFiles) unchanged(t *testing.T, what string) {
	t.Helper()
	for _, p := range h.paths {
		// The attacker's hard links add to nlink: compare what the victim
		// had before the plant (the plant happens before was is taken).
		if got := identity(t, p); got != h.was[p] {
			t.Errorf("%s changed the victim's %s:\n was %s\n now %s", what, p, h.was[p], got)
		}
	}
}

// runBounded runs argv as uid (0: root) with exactly env (Slurm gives its
// scripts no PATH) and fails the test if it has not ended by the deadline:
// a script that opens a FIFO the attacker planted hangs, and that is the
// failure, not a test that never ends.
func runBounded(t *testing.T, uid uint32, env []string, argv ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), exampleDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}
	}
	// The whole process group goes at the deadline (runuser's child too).
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s did not end within %v (hung on something the attacker planted?):\n%s", strings.Join(argv, " "), exampleDeadline, out)
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

func exampleScript(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "examples", "jobs", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// plantLink makes a symbolic link of the attacker's at p.
func plantLink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(p, attackerUID, attackerUID); err != nil {
		t.Fatal(err)
	}
}

// plantFIFO makes a FIFO of the attacker's at p, which every user may
// open: an open for reading or writing waits for the other end forever.
func plantFIFO(t *testing.T, p string) {
	t.Helper()
	if err := unix.Mkfifo(p, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o666)
	if err := os.Lchown(p, attackerUID, attackerUID); err != nil {
		t.Fatal(err)
	}
}

// plantHardLink makes a hard link to the victim's file at p (root makes it
// for the attacker, as a node without protected_hardlinks lets them).
func plantHardLink(t *testing.T, victims, p string) {
	t.Helper()
	if err := os.Link(victims, p); err != nil {
		t.Fatal(err)
	}
}

// TestExampleScriptsSurviveHostileCoUser runs every example job script as
// Slurm runs it (Prolog and Epilog as root with SLURM_* variables and no
// PATH, the TaskProlog and the sbcast job script as the job's user) for a
// victim's job, after the attacker (uid 1001) planted, at every path the
// scripts and the verbs they start use: the victim's stage dir name taken
// first, with links into the victim's home, FIFOs and hard links to the
// victim's files in it; the job's gather directory taken, and a link and
// a FIFO at its name; a FIFO and a link at the image path a job names in a
// shared directory; /tmp names made of the public job id. No script may
// write, replace or disclose a victim's file, hang, or go on without
// saying what it refused and why.
//
// /dev/shm is a sticky directory of the test's (the scripts take the
// stage dir from DLBUNDLE_STAGE_DIR=<it>/dlbundle-%U, the default's
// form), so that the test leaves the node's own alone.
func TestExampleScriptsSurviveHostileCoUser(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("runuser"); err != nil {
		t.Skip("the example Prolog and Epilog use runuser (util-linux)")
	}
	p := clitest.NewProbeImage(t)
	makePublic(t, p.Work)
	base := publicDir(t)
	cli := publicCLI(t, base)
	shm := stickyDir(t, base, "shm")
	shared := stickyDir(t, base, "records")
	tmp := stickyDir(t, base, "tmp")
	home := userDir(t, base, "home", namedVictimUID)
	os.Chmod(home, 0o700)
	victim := &hostileFiles{was: map[string]string{}}
	bashrc := filepath.Join(home, ".bashrc")
	secret := filepath.Join(home, "secret")
	victim.add(t, bashrc, "# victim's\n", 0o644)
	victim.add(t, secret, "victim's secret\n", 0o600)
	img := filepath.Join(home, "app.dlimg")
	b, err := os.ReadFile(p.Image)
	if err != nil {
		t.Fatal(err)
	}
	writeOwned(t, img, string(b), 0o644, namedVictimUID)

	const job = "4711"
	stagePattern := filepath.Join(shm, "dlbundle-%U")
	stageDir := filepath.Join(shm, fmt.Sprintf("dlbundle-%d", namedVictimUID))
	slurm := func(extra ...string) []string {
		return append([]string{"DLBUNDLE=" + cli, "DLBUNDLE_STAGE_DIR=" + stagePattern,
			"SLURM_JOB_ID=" + job, "SLURM_JOB_USER=" + namedVictim,
			fmt.Sprintf("SLURM_JOB_UID=%d", namedVictimUID), fmt.Sprintf("SLURM_JOB_GID=%d", namedVictimGID),
			"SLURMD_NODENAME=n1"}, extra...)
	}

	// The squat: the victim's stage dir name, made first by the attacker,
	// open to all, with what a careless staging, gather or gc would
	// follow, open or remove: links into the victim's home at the stage,
	// lock, records and alias names, a FIFO as the lock, a record and a
	// hard link to the victim's secret as another.
	mkdirOwned(t, stageDir, 0o777, attackerUID)
	plantFIFO(t, filepath.Join(stageDir, ".lock"))
	plantLink(t, home, filepath.Join(stageDir, "sha256-"+strings.Repeat("a", 64)))
	mkdirOwned(t, filepath.Join(stageDir, "records"), 0o777, attackerUID)
	plantFIFO(t, filepath.Join(stageDir, "records", "slurm-"+job+".report"))
	plantHardLink(t, secret, filepath.Join(stageDir, "records", "slurm-"+job+".1.report"))
	plantLink(t, bashrc, filepath.Join(stageDir, "records", "slurm-"+job+".image"))
	mkdirOwned(t, filepath.Join(stageDir, "by-path"), 0o777, attackerUID)
	mkdirOwned(t, filepath.Join(stageDir, "jobs"), 0o777, attackerUID)
	plantLink(t, home, filepath.Join(stageDir, "jobs", job))
	// The job's gather directory: a link to the victim's home at its name
	// (gather would write the record into the home), and the next job's a
	// FIFO.
	plantLink(t, home, filepath.Join(shared, job))
	plantFIFO(t, filepath.Join(shared, "4712"))
	// A shared image path a job may name (dlbundle:/scratch/app.dlimg): a
	// FIFO, and a link to the victim's secret.
	plantFIFO(t, filepath.Join(tmp, "app.dlimg"))
	plantLink(t, secret, filepath.Join(tmp, "secret.dlimg"))
	victim.was[secret] = identity(t, secret) // with the attacker's hard link
	squatWas := stageListing(t, stageDir)

	// Prolog (root): a job naming the attacker's FIFO, then its link, then
	// the victim's own image, which is staged elsewhere than the squat.
	for _, c := range []struct{ image, want string }{
		{filepath.Join(tmp, "app.dlimg"), "uid 1001"},
		{filepath.Join(tmp, "secret.dlimg"), "uid 1001"},
		{img, "uid 1001"},
	} {
		out, code := runBounded(t, 0, slurm("SLURM_JOB_COMMENT=dlbundle:"+c.image), "/bin/sh", exampleScript(t, "prolog.sh"))
		if code != 0 {
			t.Errorf("prolog.sh for %s: exit %d (a Prolog's failure drains the node):\n%s", c.image, code, out)
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("prolog.sh for %s: want a message naming the attacker (%s):\n%s", c.image, c.want, out)
		}
		if strings.Contains(out, "victim's secret") {
			t.Errorf("prolog.sh for %s disclosed the victim's secret:\n%s", c.image, out)
		}
		victim.unchanged(t, "prolog.sh for "+c.image)
	}

	// The Prolog's other form (its comment): root's own `dlbundle stage`
	// in a Prolog stages for SLURM_JOB_UID, with no fallback: the squat is
	// refused, naming the squatter, and so are the attacker's FIFO and
	// link; nothing of the squat is used.
	// link; nothing of the squat is used. In a stage dir of its own (not
	// squatted) the image FIFO and link are refused by the image's walk.
	for _, c := range []struct{ stageDir, image, want string }{
		{stagePattern, img, "owned by uid 1001 (squatted)"},
		{filepath.Join(shm, "own-%U"), filepath.Join(tmp, "app.dlimg"), "owned by uid 1001"},
		{filepath.Join(shm, "own-%U"), filepath.Join(tmp, "secret.dlimg"), "symbolic link of uid 1001"},
	} {
		env := slurm("SLURM_SCRIPT_CONTEXT=prolog_slurmd", "PATH=/usr/bin:/bin", "DLBUNDLE_STAGE_DIR="+c.stageDir)
		out, code := runBounded(t, 0, env, cli, "stage", "--quiet", c.image)
		if code == 0 || !strings.Contains(out, c.want) || strings.Contains(out, "victim's secret") {
			t.Errorf("root's stage of %s into %s in a Prolog, for the victim: exit %d; want a refusal saying %q:\n%s", c.image, c.stageDir, code, c.want, out)
		}
		victim.unchanged(t, "root's stage in a Prolog of "+c.image)
	}

	// TaskProlog (the victim, in the task's environment): the stage dir
	// line only, and the victim's exec with it finds the Prolog's stage
	// (not the squat) and runs.
	out, code := runBounded(t, namedVictimUID, clitest.CleanEnv(home), "/bin/sh", exampleScript(t, "taskprolog.sh"))
	if code != 0 || out != "export DLBUNDLE_STAGE_DIR=/dev/shm/dlbundle-%U\n" {
		t.Errorf("taskprolog.sh: exit %d, printed %q; want the one export line", code, out)
	}
	out, code = runBounded(t, namedVictimUID, slurm("HOME="+home, "PATH=/usr/bin:/bin"), cli, "exec", img, "--", p.Original)
	// (The squat is said once per node and launch, by the process that
	// stages: here the Prolog.)
	if code != 0 || !strings.Contains(out, "exe="+p.Original) {
		t.Errorf("the victim's rank with the squatted stage dir: exit %d; want it run from the Prolog's stage:\n%s", code, out)
	}
	victim.unchanged(t, "the victim's rank")
	// The next job's rank, for a record of job 4712 to gather.
	if out, code := runBounded(t, namedVictimUID, slurm("HOME="+home, "PATH=/usr/bin:/bin", "SLURM_JOB_ID=4712"), cli, "exec", img, "--", p.Original); code != 0 {
		t.Errorf("the victim's rank of job 4712: exit %d:\n%s", code, out)
	}

	// sbcast job script (the victim): the attacker planted the old,
	// guessable names in /tmp. srun and sbcast are stand-ins that run the
	// step on this one node (the script's own commands, mkdir, stage,
	// rmdir and exec, are what is tested); the job's /tmp is the test's.
	work := userDir(t, base, "work", namedVictimUID)
	bin := filepath.Join(base, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	stub := map[string]string{
		// srun [options] cmd...: the step's one task, here, with the
		// step's variables.
		"srun": "#!/bin/bash\nwhile [[ $1 == -* ]]; do shift; done\n" +
			"step=$(cat $SLURM_STEPS 2>/dev/null || echo 0); echo $((step+1)) >$SLURM_STEPS\n" +
			"SLURM_STEP_ID=$step SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_NTASKS=1 exec \"$@\"\n",
		// sbcast --force SRC DST: the copy slurmd writes as the user.
		"sbcast": "#!/bin/bash\n[[ $1 == --force ]] && shift\nexec cp -- \"$1\" \"$2\"\n",
	}
	for n, s := range stub {
		if err := os.WriteFile(filepath.Join(bin, n), []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sbatch, err := os.ReadFile(exampleScript(t, "sbcast.sbatch"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sbatch), "/tmp/dlbundle-$SLURM_JOB_ID") {
		t.Fatalf("sbcast.sbatch no longer makes its directory at /tmp/dlbundle-$SLURM_JOB_ID.<random>; update the test")
	}
	script := filepath.Join(base, "sbcast.sbatch")
	if err := os.WriteFile(script, []byte(strings.ReplaceAll(string(sbatch), "/tmp/", tmp+"/")), 0o755); err != nil {
		t.Fatal(err)
	}
	plantLink(t, bashrc, filepath.Join(tmp, "dlbundle-"+job+".dlimg"))
	mkdirOwned(t, filepath.Join(tmp, "dlbundle-"+job), 0o777, attackerUID)
	plantFIFO(t, filepath.Join(tmp, "dlbundle-"+job+".fifo"))
	out, code = runBounded(t, namedVictimUID, slurm("HOME="+home, "PATH="+bin+":/usr/bin:/bin", "USER="+namedVictim,
		"SLURM_JOB_NUM_NODES=1", "SLURM_STEPS="+filepath.Join(work, "steps"), "IMAGE="+img, "APP="+p.Original), "/bin/bash", script)
	if code != 0 || !strings.Contains(out, "exe=") || !strings.Contains(out, "uid 1001") {
		t.Errorf("sbcast.sbatch with the attacker's names in /tmp and the squat: exit %d; want the ranks run from a stage of the victim's, warning of uid 1001:\n%s", code, out)
	}
	victim.unchanged(t, "sbcast.sbatch")

	// Epilog (root): gather into the shared records dir whose job name is
	// the attacker's link, then gc the job; nothing followed, nothing
	// opened of the squat's, the refusal said.
	out, code = runBounded(t, 0, slurm("DLBUNDLE_RECORDS_TO="+shared), "/bin/sh", exampleScript(t, "epilog.sh"))
	if code != 0 {
		t.Errorf("epilog.sh: exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "gathering the job's records failed") || !strings.Contains(out, filepath.Join(shared, job)) {
		t.Errorf("epilog.sh with a link at the job's gather dir: want the gather refused, naming it:\n%s", out)
	}
	victim.unchanged(t, "epilog.sh")
	if ents, _ := os.ReadDir(home); len(ents) != 3 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the victim's home holds %v after the epilog; want only .bashrc, secret, app.dlimg", names)
	}
	// The next job's gather dir is a FIFO: refused, no hang.
	out, _ = runBounded(t, 0, slurm("DLBUNDLE_RECORDS_TO="+shared, "SLURM_JOB_ID=4712"), "/bin/sh", exampleScript(t, "epilog.sh"))
	if !strings.Contains(out, "gathering the job's records failed") || !strings.Contains(out, filepath.Join(shared, "4712")) {
		t.Errorf("epilog.sh with a FIFO at the job's gather dir: want the gather refused, naming it:\n%s", out)
	}
	victim.unchanged(t, "epilog.sh of job 4712")
	if got := stageListing(t, stageDir); got != squatWas {
		t.Errorf("the scripts changed the attacker's squat (so they used it):\n%s", lineDiffs(squatWas, got))
	}
}

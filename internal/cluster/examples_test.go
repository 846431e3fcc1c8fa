package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// mpiTestEnv is what Open MPI needs on this test machine, not in a user's
// job: the tests run as root, and the fake nodes share one host (btl tcp over
// loopback; no shared-memory transport across their private /dev/shm).
var mpiTestEnv = []string{"OMPI_MCA_btl=self,tcp", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"}

// mpiRanks wants each of the ranks 0..n-1 exactly once in the probe's lines.
func mpiRanks(t *testing.T, out string, n int) {
	t.Helper()
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "version=") {
			got = append(got, fields(l)["rank"])
		}
	}
	sort.Strings(got)
	var want []string
	for r := 0; r < n; r++ {
		want = append(want, fmt.Sprint(r))
	}
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ranks %v reported, want each of 0..%d once:\n%s", got, n-1, out)
	}
}

// TestOpenMPIExample runs examples/jobs/openmpi.sh unchanged as a batch job
// on 3 nodes x 2 slots: mpirun takes the nodes from the allocation; every
// rank reports once, two per node, from the stage; each node stages once (the
// image's metadata operations are exactly 3 x those of one rank on one node)
// and keeps one stage; an app that exits 7 fails the job with exit code 7.
func TestOpenMPIExample(t *testing.T) {
	p := newProbe(t, "openmpi")
	img := p.image[1]
	sfs.Reset()
	ranks(t, srun(t, "-N1", "-n1", "-w", "node1", dlb, "exec", "--stage-dir", "/dev/shm/t-openmpi-one", img, "--", p.original), 1, 1, p)
	perNode := imageOps(img)
	if perNode == 0 {
		t.Fatal("one rank on one node made no operation on the image; the count cannot work")
	}

	env := append([]string{"DLBUNDLE=" + dlb, "IMAGE=" + img, "DLBUNDLE_STAGE_DIR=/dev/shm/t-openmpi"}, mpiTestEnv...)
	sfs.Reset()
	out, _ := example(t, "openmpi.sh", append(env, "APP="+p.original+" ok"), "-N3", "--ntasks-per-node=2")
	nodes := ranks(t, out, 6, 1, p)
	mpiRanks(t, out, 6)
	for _, n := range shared.Nodes {
		if nodes[n] != 2 {
			t.Errorf("ranks per node %v, want 2 on each of %v", nodes, shared.Nodes)
			break
		}
	}
	if ops := imageOps(img); ops != 3*perNode {
		t.Errorf("3 nodes x 2 ranks made %d metadata operations on the image; want 3 x %d: one staging per node", ops, perNode)
	}
	for _, n := range shared.Nodes {
		if s := stagesOn(t, n, "/dev/shm/t-openmpi"); len(s) != 1 {
			t.Errorf("%s has stages %v, want exactly one", n, s)
		}
	}

	out, job, state, exit := exampleStatus(t, "openmpi.sh", append(env, "APP="+p.original+" exit7"), "-N3", "--ntasks-per-node=2")
	if state != "FAILED" || exit != "7:0" {
		t.Errorf("job %s with an app that exits 7: state %q exit code %q, want FAILED 7:0:\n%s", job, state, exit, out)
	}
}

// TestPBSExample runs examples/jobs/pbs.sh unchanged, but NOT under PBS (there
// is none here): on this host, in the environment a PBS job gives its script
// (PBS_JOBID, PBS_O_WORKDIR, PBS_NODEFILE: three slots on localhost), with
// Debian's Open MPI mpiexec, which is built without PBS support and so is
// given the node file as its default hostfile, as such a site would. It shows
// that the script's lines work: the ranks start from one stage in the
// script's DLBUNDLE_STAGE_DIR, aliased under the PBS job id, and the
// script's exit status is the app's. Not shown: mpiexec under a PBS server,
// several nodes.
func TestPBSExample(t *testing.T) {
	p := newProbe(t, "pbs")
	script, err := filepath.Abs(filepath.Join("..", "..", "examples", "jobs", "pbs.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	nodefile := filepath.Join(dir, "nodefile")
	if err := os.WriteFile(nodefile, []byte("localhost\nlocalhost\nlocalhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stage := filepath.Join(dir, "stage")
	run := func(arg string) result {
		cmd := exec.Command("bash", script)
		cmd.Dir = "/"
		cmd.Env = append([]string{
			"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "USER=root",
			"PBS_ENVIRONMENT=PBS_BATCH", "PBS_JOBID=4242.pbs-server", "PBS_O_WORKDIR=" + dir, "PBS_NODEFILE=" + nodefile,
			"OMPI_MCA_orte_default_hostfile=" + nodefile,
			"DLBUNDLE=" + dlb, "IMAGE=" + p.image[1], "APP=" + p.original + " " + arg, "DLBUNDLE_STAGE_DIR=" + stage,
		}, mpiTestEnv...)
		return runCmd(t, cmd)
	}
	r := run("ok")
	if r.code != 0 {
		t.Fatalf("pbs.sh: exit %d\n%s", r.code, r.out)
	}
	ranks(t, r.out, 3, 1, p)
	mpiRanks(t, r.out, 3)
	stages, _ := filepath.Glob(filepath.Join(stage, "sha256-*"))
	if len(stages) != 1 {
		t.Errorf("stages %v in the script's stage dir, want exactly one", stages)
	}
	aliases, _ := filepath.Glob(filepath.Join(stage, "by-path", "*4242.pbs-server*"))
	if len(aliases) == 0 {
		all, _ := filepath.Glob(filepath.Join(stage, "by-path", "*"))
		t.Errorf("no alias keyed by PBS_JOBID; aliases: %v", all)
	}
	if r := run("exit7"); r.code != 7 {
		t.Errorf("pbs.sh with an app that exits 7: exit %d\n%s", r.code, r.out)
	}
}

// TestOpenMPIEnvExample runs examples/jobs/openmpi-env.sh unchanged as a
// batch job on 3 nodes x 2 slots with the demo's C app (RUNPATH, dlopen):
// the script stages once per node, passes env's variables with mpirun -x,
// and every rank (under strace, which inherits them) starts from the
// stage, makes no call on a path the image decides and prints what it
// prints natively. With NP=4 the app runs 4 ranks and staging still one
// process per node.
func TestOpenMPIEnvExample(t *testing.T) {
	argv := demoApp(t)
	work, img, decides := pilotImage(t, "openmpi-env", argv)
	wrapper := filepath.Join(work, "strace-rank.sh")
	write(t, wrapper, fmt.Sprintf(rankStrace, filepath.Join(work, "strace")))
	os.Chmod(wrapper, 0o755)
	env := append([]string{"DLBUNDLE=" + dlb, "IMAGE=" + img, "DLBUNDLE_STAGE_DIR=/dev/shm/t-openmpi-env"}, mpiTestEnv...)
	native := srun(t, "-N3", "--ntasks-per-node=2", argv[0])
	plain, _ := example(t, "openmpi-env.sh", append(env, "APP="+argv[0]), "-N3", "--ntasks-per-node=2")
	traced, _ := example(t, "openmpi-env.sh", append(env, "APP="+wrapper+" "+argv[0]), "-N3", "--ntasks-per-node=2")
	for _, out := range []string{plain, traced} {
		if got, want := sortLines(out), sortLines(native); got != want || strings.Count(out, "checksum") != 6 {
			t.Errorf("ranks printed\n%s\nwant as native\n%s", got, want)
		}
	}
	rankCalls(t, filepath.Join(work, "strace"), "rank.", 6, decides)
	// NP is the app's rank count only: staging stays one process per node
	// (an -np 4 there is more than --map-by ppr:1:node can place on 3 nodes).
	four, _ := example(t, "openmpi-env.sh", append(env, "APP="+argv[0], "NP=4"), "-N3", "--ntasks-per-node=2")
	if n := strings.Count(four, "checksum"); n != 4 {
		t.Errorf("NP=4: %d ranks printed, want 4:\n%s", n, four)
	}
	for _, l := range strings.Split(strings.TrimSpace(four), "\n") {
		if !strings.Contains(native, l) {
			t.Errorf("NP=4: rank printed %q, not a line of the native run:\n%s", l, native)
		}
	}
	for _, n := range shared.Nodes {
		if s := stagesOn(t, n, "/dev/shm/t-openmpi-env"); len(s) != 1 {
			t.Errorf("%s has stages %v, want exactly one", n, s)
		}
	}
}

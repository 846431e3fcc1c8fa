package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/image"
)

// The probe prints what a rank sees: the image version it runs from, its
// node, its rank under mpirun, its /proc/self/exe (the original path under dlbundle: a path that
// does not exist on this machine) and the rank variables of its launcher.
const probeSource = `#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static const char *env(const char *k) { const char *v = getenv(k); return v ? v : "-"; }
int main(int argc, char **argv) {
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	exe[n < 0 ? 0 : n] = 0;
	printf("version=%d node=%s rank=%s exe=%s staged=%s arg=%s\n", VERSION, env("SLURMD_NODENAME"),
	       env("OMPI_COMM_WORLD_RANK"), exe, getenv("DLBUNDLE_STAGE") ? "yes" : "no", argc > 1 ? argv[1] : "-");
	fflush(stdout);
	if (argc > 1 && !strcmp(argv[1], "kill")) raise(SIGTERM);
	if (argc > 1 && !strcmp(argv[1], "exit7")) return 7;
	return 0;
}
`

// probe is a program bundled at original (absent from this machine) in
// images of two versions; native are the same programs on the file system.
type probe struct {
	original string
	native   [3]string // by version (1, 2)
	image    [3]string // in Shared, by version
}

// newProbe compiles the probe in two versions and writes their images into
// the shared file system.
func newProbe(t *testing.T, name string) *probe {
	t.Helper()
	var r [6]byte
	rand.Read(r[:])
	p := &probe{original: "/opt/dlbundle-cluster-" + hex.EncodeToString(r[:]) + "/bin/probe"}
	src := filepath.Join(shared.Dir, "src", name)
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	c := filepath.Join(src, "probe.c")
	if err := os.WriteFile(c, []byte(probeSource), 0o644); err != nil {
		t.Fatal(err)
	}
	for v := 1; v <= 2; v++ {
		p.native[v] = filepath.Join(src, fmt.Sprintf("probe%d", v))
		if out, err := exec.Command("gcc", "-O1", fmt.Sprintf("-DVERSION=%d", v), "-o", p.native[v], c).CombinedOutput(); err != nil {
			t.Fatalf("gcc: %v\n%s", err, out)
		}
		st, err := os.Stat(p.native[v])
		if err != nil {
			t.Fatal(err)
		}
		p.image[v] = filepath.Join(shared.Shared, fmt.Sprintf("%s-v%d.dlimg", name, v))
		f, err := os.Create(p.image[v])
		if err != nil {
			t.Fatal(err)
		}
		_, err = image.Write(f, []image.Entry{{
			Path: p.original, Type: image.TypeRegular, Mode: 0o100755, Size: st.Size(),
			MtimeNS: st.ModTime().UnixNano(), Kind: image.KindELFExec, SourcePath: p.native[v],
		}}, image.WriteOptions{})
		if err == nil {
			err = f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// result is a finished command: combined output and exit status.
type result struct {
	out  string
	code int
}

func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("%s: %v", cmd.Args, err)
	}
	return result{string(out), cmd.ProcessState.ExitCode()}
}

// srun runs srun with args and wants it to succeed.
func srun(t *testing.T, args ...string) string {
	t.Helper()
	r := runCmd(t, shared.Command("srun", args...))
	if r.code != 0 {
		t.Fatalf("srun %s: exit %d\n%s", strings.Join(args, " "), r.code, r.out)
	}
	return r.out
}

// ranks parses the probe's lines: version and exe per line, nodes seen.
func ranks(t *testing.T, out string, want int, version int, p *probe) map[string]int {
	t.Helper()
	nodes := map[string]int{}
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "version=") {
			continue
		}
		n++
		f := fields(l)
		if f["version"] != fmt.Sprint(version) || f["exe"] != p.original || f["staged"] != "yes" {
			t.Errorf("rank ran %q; want version=%d from the stage (exe=%s)", l, version, p.original)
		}
		nodes[f["node"]]++
	}
	if n != want {
		t.Errorf("%d ranks reported, want %d:\n%s", n, want, out)
	}
	return nodes
}

func fields(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	return m
}

// imageOps is the number of metadata operations on one file of the shared
// file system since the last Reset.
func imageOps(path string) uint64 {
	rel := "/" + strings.TrimPrefix(path, shared.Shared+"/")
	for _, pc := range sfs.TopPaths(1 << 20) {
		if pc.Path == rel {
			return pc.Count
		}
	}
	return 0
}

// stagesOn lists the published stages in dir on node.
func stagesOn(t *testing.T, node, dir string) []string {
	t.Helper()
	out, _ := shared.OnNode(node, "sh", "-c", "cd "+dir+" 2>/dev/null && ls -d sha256-* 2>/dev/null").Output()
	return strings.Fields(string(out))
}

// TestSrunOneStagingPerNode: 3 nodes x 4 ranks started by srun run from the
// stage; each node stages once and reads the image once: the image's
// metadata operations and bytes on the shared file system are exactly three
// times those of one rank on one node (later ranks touch nothing).
func TestSrunOneStagingPerNode(t *testing.T) {
	p := newProbe(t, "srun")
	img := p.image[1]
	sfs.Reset()
	out := srun(t, "-N1", "-n1", "-w", "node1", dlb, "exec", "--stage-dir", "/dev/shm/t-srun-one", img, "--", p.original)
	ranks(t, out, 1, 1, p)
	perNodeOps, perNodeBytes := imageOps(img), sfs.Stats().BytesRead
	if perNodeOps == 0 || perNodeBytes == 0 {
		t.Fatalf("one rank on one node: %d ops and %d bytes on the image; the count cannot work", perNodeOps, perNodeBytes)
	}

	sfs.Reset()
	out = srun(t, "-N3", "--ntasks-per-node=4", dlb, "exec", "--stage-dir", "/dev/shm/t-srun", img, "--", p.original)
	nodes := ranks(t, out, 12, 1, p)
	if len(nodes) != 3 {
		t.Errorf("ranks ran on %v, want 3 nodes", nodes)
	}
	// Operations are exact; bytes at most three times one node's, because the
	// fake nodes share one page cache (a node may read pages another just
	// fetched).
	if ops, bytes := imageOps(img), sfs.Stats().BytesRead; ops != 3*perNodeOps || bytes > 3*perNodeBytes || bytes < perNodeBytes {
		t.Errorf("3 nodes x 4 ranks: %d metadata ops and %d bytes on the image; want 3 x %d ops and 1-3 x %d bytes: one read per node",
			ops, bytes, perNodeOps, perNodeBytes)
	}
	for _, n := range shared.Nodes {
		if s := stagesOn(t, n, "/dev/shm/t-srun"); len(s) != 1 {
			t.Errorf("%s has stages %v, want exactly one", n, s)
		}
	}
}

// TestSrunPMIx: srun --mpi=pmix starts the ranks (PMIx server in slurmstepd).
func TestSrunPMIx(t *testing.T) {
	p := newProbe(t, "pmix")
	out := srun(t, "--mpi=pmix", "-N3", "--ntasks-per-node=2", dlb, "exec", "--stage-dir", "/dev/shm/t-pmix", p.image[1], "--", p.original)
	ranks(t, out, 6, 1, p)
	for _, n := range shared.Nodes {
		if s := stagesOn(t, n, "/dev/shm/t-pmix"); len(s) != 1 {
			t.Errorf("%s has stages %v, want exactly one", n, s)
		}
	}
}

// TestExitCodesAndSignalsAsNative: srun reports the same status for the app
// under dlbundle exec as for the app itself.
func TestExitCodesAndSignalsAsNative(t *testing.T) {
	p := newProbe(t, "exit")
	for _, arg := range []string{"exit7", "kill", "ok"} {
		native := runCmd(t, shared.Command("srun", "-N2", "-n2", p.native[1], arg))
		bundled := runCmd(t, shared.Command("srun", "-N2", "-n2", dlb, "exec", "--stage-dir", "/dev/shm/t-exit", p.image[1], "--", p.original, arg))
		if native.code != bundled.code {
			t.Errorf("%s: srun exit %d under dlbundle, %d natively\nnative:\n%s\nbundled:\n%s", arg, bundled.code, native.code, native.out, bundled.out)
		}
		if arg != "ok" && native.code == 0 {
			t.Errorf("%s: native run exited 0; the comparison cannot work", arg)
		}
	}
}

// batch submits script (run by bash) with sbatch args and waits until it has
// written its last line; it returns the job's output.
func batch(t *testing.T, script string, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	_ = dir
	name := strings.ReplaceAll(t.Name(), "/", "_")
	file := filepath.Join(shared.Shared, name+".sh")
	out := filepath.Join(shared.Shared, name+".out")
	os.Remove(out)
	body := "#!/bin/bash\nset -u\nexport OMPI_MCA_btl=self,tcp OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n" +
		script + "\necho batch-done\n"
	if err := os.WriteFile(file, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	r := runCmd(t, shared.Command("sbatch", append(append([]string{"--parsable", "-o", out}, args...), file)...))
	if r.code != 0 {
		t.Fatalf("sbatch: %s", r.out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(out)
		if strings.Contains(string(b), "batch-done") {
			return string(b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := os.ReadFile(out)
	t.Fatalf("batch job %s did not finish within 60 s:\n%s\n%s", strings.TrimSpace(r.out), b, shared.Logs())
	return ""
}

// versions returns the version= of every probe line, in order.
func versions(out string) string {
	var v []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "version=") {
			v = append(v, fields(l)["version"])
		}
	}
	return strings.Join(v, "")
}

// TestJobStepsImageRebuiltBetween: two srun steps of one job with the image
// replaced in between: the second step runs the new image.
func TestJobStepsImageRebuiltBetween(t *testing.T) {
	p := newProbe(t, "steps")
	img := filepath.Join(shared.Shared, "steps.dlimg")
	run := fmt.Sprintf("srun -N3 --ntasks-per-node=2 %s exec --stage-dir /dev/shm/t-steps %s -- %s | sort\n", dlb, img, p.original)
	out := batch(t, fmt.Sprintf("cp %s %s\n%scp %s %s.new && mv %s.new %s\n%s", p.image[1], img, run, p.image[2], img, img, img, run), "-N3", "--ntasks-per-node=2")
	if v := versions(out); v != "111111222222" {
		t.Errorf("versions %q, want six 1 then six 2:\n%s", v, out)
	}
}

// TestMpirunInSbatchImageReplaced: two mpirun launches in one batch job with
// the image replaced in between: the second runs the new image on every
// node. (Debian's Open MPI 4.1 under Slurm 22.05 starts each launch's daemons
// as a job step and passes that SLURM_STEP_ID to its ranks, so here the old
// key passed too; TestJobIDNearestLauncher in loader covers ranks that
// inherit the batch step's SLURM_JOB_ID alone.)
func TestMpirunInSbatchImageReplaced(t *testing.T) {
	p := newProbe(t, "mpirun")
	img := filepath.Join(shared.Shared, "mpirun.dlimg")
	run := fmt.Sprintf("mpirun -np 6 --map-by ppr:2:node %s exec --stage-dir /dev/shm/t-mpirun %s -- %s | sort\n", dlb, img, p.original)
	out := batch(t, fmt.Sprintf("cp %s %s\n%scp %s %s.new && mv %s.new %s\n%s", p.image[1], img, run, p.image[2], img, img, img, run), "-N3", "--ntasks-per-node=2")
	if v := versions(out); v != "111111222222" {
		t.Errorf("versions %q, want six 1 then six 2:\n%s", v, out)
	}
	nodes := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "version=") {
			nodes[fields(l)["node"]] = true
		}
	}
	if len(nodes) != 3 {
		t.Errorf("mpirun ranks ran on %v, want 3 nodes", nodes)
	}
	// Each node staged the new version (the versions above say so); the
	// old stage is retired by the new one's staging once no process has
	// used it for node.MinGrace (one stage per image path), so whether it
	// is still there depends on how fast the second launch followed the
	// first: one or two, never more.
	for _, n := range shared.Nodes {
		if s := stagesOn(t, n, "/dev/shm/t-mpirun"); len(s) < 1 || len(s) > 2 {
			t.Errorf("%s has stages %v, want the new version's and at most the old one", n, s)
		}
	}
}

// TestJobArray: every task of an array job runs from its node's stage.
func TestJobArray(t *testing.T) {
	p := newProbe(t, "array")
	name := "array"
	out := filepath.Join(shared.Shared, name+".%a.out")
	script := filepath.Join(shared.Shared, name+".sh")
	body := fmt.Sprintf("#!/bin/sh\nsrun %s exec --stage-dir /dev/shm/t-array %s -- %s task$SLURM_ARRAY_TASK_ID\necho batch-done\n", dlb, p.image[1], p.original)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	if r := runCmd(t, shared.Command("sbatch", "--array=1-3", "-N1", "-n1", "-o", out, script)); r.code != 0 {
		t.Fatalf("sbatch: %s", r.out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for task := 1; task <= 3; task++ {
		f := filepath.Join(shared.Shared, fmt.Sprintf("%s.%d.out", name, task))
		for {
			b, _ := os.ReadFile(f)
			if strings.Contains(string(b), "batch-done") {
				ranks(t, string(b), 1, 1, p)
				if !strings.Contains(string(b), fmt.Sprintf("arg=task%d", task)) {
					t.Errorf("array task %d:\n%s", task, b)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("array task %d did not finish:\n%s", task, b)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// TestMultiProg: srun --multi-prog gives ranks different command lines, each
// through dlbundle exec.
func TestMultiProg(t *testing.T) {
	p := newProbe(t, "multiprog")
	conf := filepath.Join(shared.Shared, "multiprog.conf")
	line := func(ranks, arg string) string {
		return fmt.Sprintf("%s %s exec --stage-dir /dev/shm/t-multiprog %s -- %s %s\n", ranks, dlb, p.image[1], p.original, arg)
	}
	if err := os.WriteFile(conf, []byte(line("0", "leader")+line("1-5", "worker")), 0o644); err != nil {
		t.Fatal(err)
	}
	out := srun(t, "-N3", "--ntasks-per-node=2", "--multi-prog", conf)
	ranks(t, out, 6, 1, p)
	if strings.Count(out, "arg=leader") != 1 || strings.Count(out, "arg=worker") != 5 {
		t.Errorf("multi-prog arguments:\n%s", out)
	}
}

// TestHetJob: a heterogeneous job (two components) runs from the stages.
func TestHetJob(t *testing.T) {
	p := newProbe(t, "het")
	exe := []string{dlb, "exec", "--stage-dir", "/dev/shm/t-het", p.image[1], "--", p.original}
	args := append(append(append([]string{"-N1", "-n1"}, append(exe, "comp0")...), ":", "-N2", "-n4"), append(exe, "comp1")...)
	out := srun(t, args...)
	ranks(t, out, 5, 1, p)
	if strings.Count(out, "arg=comp0") != 1 || strings.Count(out, "arg=comp1") != 4 {
		t.Errorf("het job components:\n%s", out)
	}
}

// TestPilotUnderEachLauncherMerged: pilot runs traced under srun and under
// mpirun inside sbatch write one trace per rank (mpirun's ranks used to all
// write T.0: the inherited SLURM_PROCID won); the traces merge into one image
// that runs.
func TestPilotUnderEachLauncherMerged(t *testing.T) {
	p := newProbe(t, "pilot")
	dir := filepath.Join(shared.Shared, "pilot")
	os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	srun(t, "-N2", "--ntasks-per-node=1", dlb, "trace", "-q", "-o", filepath.Join(dir, "srun.trace"), "--", p.native[1])
	// Both mpirun ranks on the batch node: both inherit SLURM_PROCID=0.
	batch(t, fmt.Sprintf("mpirun -np 2 %s trace -q -o %s -- %s\n", dlb, filepath.Join(dir, "mpi.trace"), p.native[1]), "-N1", "-n2")
	var got []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		got = append(got, e.Name())
	}
	sort.Strings(got)
	if strings.Join(got, " ") != "mpi.trace.0 mpi.trace.1 srun.trace.0 srun.trace.1" {
		t.Fatalf("trace files %v, want one per rank and launcher", got)
	}
	img := filepath.Join(shared.Shared, "pilot.dlimg")
	args := []string{"build", "-o", img}
	for _, g := range got {
		args = append(args, filepath.Join(dir, g))
	}
	if out, err := exec.Command(dlb, args...).CombinedOutput(); err != nil {
		t.Fatalf("build from the merged traces: %v\n%s", err, out)
	}
	out := srun(t, "-N2", "--ntasks-per-node=1", dlb, "exec", "--stage-dir", "/dev/shm/t-pilot", img, "--", p.native[1])
	if strings.Count(out, "staged=yes") != 2 || strings.Count(out, "exe="+p.native[1]) != 2 {
		t.Errorf("the image built from the merged pilots did not run from the stage:\n%s", out)
	}
}

// TestTraceOfLauncherRefused: `dlbundle trace -- srun ...` would trace srun
// only; it fails and names the recipe.
func TestTraceOfLauncherRefused(t *testing.T) {
	p := newProbe(t, "refuse")
	r := runCmd(t, shared.Command(dlb, "trace", "-o", filepath.Join(shared.Shared, "refused.trace"), "--", "srun", "-n", "2", p.native[1]))
	if r.code == 0 || !strings.Contains(r.out, "srun -n 2 dlbundle trace -- "+p.native[1]) {
		t.Errorf("exit %d:\n%s", r.code, r.out)
	}
	if _, err := os.Stat(filepath.Join(shared.Shared, "refused.trace")); err == nil {
		t.Error("a trace was written")
	}
}

// TestPrologEpilogTaskProlog runs examples/jobs/{prolog,epilog,taskprolog}.sh
// as the cluster's Prolog, Epilog and TaskProlog: a job that names its image
// in --comment finds it staged on every node before its first step; the
// tasks get DLBUNDLE_STAGE_DIR from the TaskProlog; when the job ends, the
// Epilog removes the job's aliases and keeps the stage (within --keep).
func TestPrologEpilogTaskProlog(t *testing.T) {
	p := newProbe(t, "prolog")
	out := batch(t, fmt.Sprintf(`srun -n3 --ntasks-per-node=1 sh -c 'echo "pre $SLURMD_NODENAME $(ls -d /dev/shm/dlbundle-0/sha256-* | wc -l) dir=$DLBUNDLE_STAGE_DIR"'
srun --ntasks-per-node=2 %s exec %s -- %s
echo job=$SLURM_JOB_ID`, dlb, p.image[1], p.original), "-N3", "--ntasks-per-node=2", "--comment=dlbundle:"+p.image[1])
	if strings.Count(out, " 1 dir=/dev/shm/dlbundle-%U") != 3 {
		t.Errorf("want the image staged by the Prolog on all 3 nodes before the first step, and the TaskProlog's stage dir:\n%s", out)
	}
	ranks(t, out, 6, 1, p)
	job := ""
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "job="); ok {
			job = v
		}
	}
	// The Epilog runs when the job has ended on each node.
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range shared.Nodes {
		for {
			aliases, _ := shared.OnNode(n, "sh", "-c", "ls /dev/shm/dlbundle-0/by-path/ 2>/dev/null").Output()
			if !strings.Contains(string(aliases), "job-"+job+".") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the Epilog left the aliases of job %s: %s", n, job, aliases)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if s := stagesOn(t, n, "/dev/shm/dlbundle-0"); len(s) != 1 {
			t.Errorf("%s: stages %v after the Epilog; want the one stage kept (--keep 4G)", n, s)
		}
	}
}

// example runs examples/jobs/NAME with sbatch (its #SBATCH lines are
// overridden by args), exporting env, waits for the job to end, wants it to
// have completed, and returns its output and job id.
func example(t *testing.T, name string, env []string, args ...string) (out, job string) {
	t.Helper()
	out, job, state, _ := exampleStatus(t, name, env, args...)
	if state != "COMPLETED" && state != "" {
		t.Fatalf("job %s (%s) ended %s:\n%s", job, name, state, out)
	}
	return out, job
}

// exampleStatus is example for a job that may fail: it returns the job's
// final state and exit code as slurmctld reports them ("" and "" if the job
// record was purged before it was seen ended).
func exampleStatus(t *testing.T, name string, env []string, args ...string) (out, job, state, exit string) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "..", "examples", "jobs", name))
	if err != nil {
		t.Fatal(err)
	}
	outFile := filepath.Join(shared.Shared, strings.ReplaceAll(t.Name(), "/", "_")+".out")
	os.Remove(outFile)
	cmd := shared.Command("sbatch", append(append([]string{"--parsable", "-o", outFile, "--export=ALL"}, args...), script)...)
	cmd.Env = append(cmd.Env, env...)
	r := runCmd(t, cmd)
	if r.code != 0 {
		t.Fatalf("sbatch %s: %s", name, r.out)
	}
	job = strings.TrimSpace(r.out)
	deadline := time.Now().Add(60 * time.Second)
	for {
		info, _ := shared.Command("scontrol", "-o", "show", "job", job).Output()
		f := fields(string(info))
		state, exit = f["JobState"], f["ExitCode"]
		switch state {
		case "", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY":
			b, _ := os.ReadFile(outFile)
			return string(b), job, state, exit
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s (%s) did not end within 60 s (%s)", job, name, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSlurmExample runs examples/jobs/slurm.sbatch: every rank starts from
// its node's stage and the report finds nothing missing.
func TestSlurmExample(t *testing.T) {
	p := newProbe(t, "example")
	out, _ := example(t, "slurm.sbatch", []string{"DLBUNDLE=" + dlb, "IMAGE=" + p.image[1], "APP=" + p.original + " ok"}, "-N3", "--ntasks-per-node=2")
	ranks(t, out, 6, 1, p)
}

// TestSbcastExample runs examples/jobs/sbcast.sbatch: the image reaches the
// nodes by sbcast (one read of the shared file system for the whole job), a
// first step stages it and removes the node-local copy (--consume: one copy
// per node), and the ranks of the next step, naming the copy's path, run from
// the stage.
func TestSbcastExample(t *testing.T) {
	p := newProbe(t, "sbcast")
	st, err := os.Stat(p.image[1])
	if err != nil {
		t.Fatal(err)
	}
	sfs.Reset()
	out, job := example(t, "sbcast.sbatch", []string{"DLBUNDLE=" + dlb, "IMAGE=" + p.image[1], "APP=" + p.original}, "-N3", "--ntasks-per-node=2")
	ranks(t, out, 6, 1, p)
	if b := sfs.Stats().BytesRead; b == 0 || b > uint64(st.Size())*3/2 {
		t.Errorf("the job read %d bytes of the shared file system; want one read of the %d-byte image in all", b, st.Size())
	}
	for _, n := range shared.Nodes {
		// The copy went into a private per-job directory, removed with it.
		if left, _ := shared.OnNode(n, "sh", "-c", "ls -d /tmp/dlbundle-"+job+".* 2>/dev/null").Output(); len(left) != 0 {
			t.Errorf("%s keeps the sbcast copy or its directory next to the stage: %s", n, left)
		}
	}
}

package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/internal/clitest"
)

// srunRankStraceJob runs one task under strace, its log named after the
// task's rank; the first task says its job id. The task gets the plugin's
// variables, so sh and strace run with the shim too: their own lookups
// are in the node's records, but not in the log (strace logs the app).
const srunRankStraceJob = `#!/bin/sh
[ "$SLURM_PROCID" = 0 ] && echo "job=$SLURM_JOB_ID"
exec strace -f --seccomp-bpf -qq -e signal=none -e trace=%%file -o "%s.$SLURM_PROCID" "$@"
`

// TestSpankFoldClosesMPIProgram: the MPI hello piloted at 1 rank (a
// singleton, no launcher), run at 3 ranks on 3 nodes under srun --mpi=pmix
// --dlbundle; the
// records the ranks left on each node are gathered as the Epilog does,
// `dlbundle report` of them prints one fold, which is run as printed; the
// next run at 3 opens no library and makes no file call on the original
// trees in any rank, but for PMIx's per-step files in slurmd's spool
// (strace: the kernel's record).
func TestSpankFoldClosesMPIProgram(t *testing.T) {
	needSpank(t)
	work := filepath.Join(shared.Shared, fmt.Sprintf("mpifold-%d", time.Now().UnixNano()))
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	// The wrappers and logs: a directory the pilot never looks at, so the
	// image decides nothing in it (in work, the pilot's listing would hide
	// files made after it).
	logs := work + "-logs"
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(shared.Dir, "mpifold-src")
	os.MkdirAll(src, 0o755)
	write(t, filepath.Join(src, "hello.c"), clitest.MPIHello)
	hello := filepath.Join(work, "hello")
	compile(t, "mpicc", "-O1", "-o", hello, filepath.Join(src, "hello.c"))
	stage := "/dev/shm/t-spank-mpifold"
	srunEnv := func(args ...string) result {
		t.Helper()
		cmd := shared.Command("srun", append([]string{"--mpi=pmix"}, args...)...)
		cmd.Env = append(cmd.Env, append(mpiTestEnv, "DLBUNDLE_STAGE_DIR="+stage)...)
		return runCmd(t, cmd)
	}
	// The pilot as a user runs it first, with no launcher: one rank, an
	// Open MPI singleton. Under srun --mpi=pmix each rank also loads
	// Open MPI's PMIx client side, which the singleton never did. (A pilot
	// under srun -n1 loads all that the 3 ranks load here.)
	pilot := shared.Command(dlb, "trace", "-q", "-o", filepath.Join(work, "pilot.trace"), "--", hello)
	pilot.Env = append(pilot.Env, mpiTestEnv...)
	if r := runCmd(t, pilot); r.code != 0 || !strings.Contains(r.out, "hello 0 of 1") {
		t.Fatalf("the 1-rank pilot: exit %d\n%s", r.code, r.out)
	}
	traces, _ := filepath.Glob(filepath.Join(work, "pilot.trace*"))
	img := filepath.Join(work, "hello.dlimg")
	// --include: the cluster's "shared file system" lies below /var/tmp,
	// which build leaves out by default (node-local scratch).
	if r := runCmd(t, shared.Command(dlb, append([]string{"build", "--include", shared.Shared, "-o", img}, traces...)...)); r.code != 0 {
		t.Fatalf("build: %s", r.out)
	}
	run := func(tag string) (job string, calls, libs [][]string) {
		t.Helper()
		wrapper := filepath.Join(logs, "strace-"+tag+".sh")
		write(t, wrapper, fmt.Sprintf(srunRankStraceJob, filepath.Join(logs, tag)))
		os.Chmod(wrapper, 0o755)
		r := srunEnv("-N3", "--ntasks-per-node=1", "--dlbundle="+img, wrapper, hello)
		for rank := 0; rank < 3; rank++ {
			if r.code != 0 || !strings.Contains(r.out, fmt.Sprintf("hello %d of 3", rank)) {
				t.Fatalf("srun --dlbundle, 3 ranks (%s): exit %d\n%s\n%s", tag, r.code, r.out, shared.Logs())
			}
			c, l := clitest.OriginalCalls(t, filepath.Join(logs, fmt.Sprintf("%s.%d", tag, rank)), clitest.EndsIn("hello"), clitest.InAStage)
			calls, libs = append(calls, c), append(libs, l)
		}
		m := regexp.MustCompile(`job=(\d+)`).FindStringSubmatch(r.out)
		if m == nil {
			t.Fatalf("the first task did not say its job:\n%s", r.out)
		}
		return m[1], calls, libs
	}
	job, callsBefore, libsBefore := run("before")
	n := 0
	for _, l := range libsBefore {
		n += len(l)
	}
	if n == 0 {
		for r, c := range callsBefore {
			t.Logf("rank %d, before: %d calls on the original trees:\n%s", r, len(c), strings.Join(c, "\n"))
		}
		t.Fatal("no rank opened a library from outside the image before the fold: the test cannot tell anything")
	}
	// Each node's records of the job, gathered as the Epilog does.
	gathered := filepath.Join(logs, "records")
	for _, node := range shared.Nodes {
		cmd := shared.OnNode(node, dlb, "report", "--gather", gathered, "--job", job, "--node", node)
		cmd.Env = append(os.Environ(), "DLBUNDLE_STAGE_DIR="+stage)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: report --gather: %v\n%s", node, err, out)
		}
	}
	reports, _ := filepath.Glob(filepath.Join(gathered, job, "*.report"))
	rep := runCmd(t, shared.Command(dlb, append([]string{"report"}, reports...)...))
	if rep.code != 0 {
		t.Fatalf("report of the gathered records: exit %d\n%s", rep.code, rep.out)
	}
	var fold []string
	for _, l := range strings.Split(rep.out, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "dlbundle build -o "+img+" --from "+img+" ") {
			fold = strings.Fields(l)[1:]
		}
	}
	if fold == nil {
		t.Fatalf("the report of the gathered records prints no fold into %s:\n%s", img, rep.out)
	}
	if r := runCmd(t, shared.Command(dlb, fold...)); r.code != 0 || strings.Contains(r.out, "has changed") {
		t.Fatalf("the fold as printed: exit %d\n%s", r.code, r.out)
	}
	_, callsAfter, libsAfter := run("after")
	for r := range libsAfter {
		t.Logf("rank %d: %d file calls on the original trees (%d library opens) before the fold, %d (%d) after",
			r, len(callsBefore[r]), len(libsBefore[r]), len(callsAfter[r]), len(libsAfter[r]))
		// What is left is PMIx's per-step shared memory in slurmd's
		// spool: the node's own runtime files, each step's new.
		var other []string
		for _, c := range callsAfter[r] {
			if !strings.Contains(c, `"`+filepath.Join(shared.Dir, "spool")+"/") {
				other = append(other, c)
			}
		}
		if len(other) > 0 {
			t.Errorf("rank %d still makes %d file calls on the original trees after one fold (other than PMIx's files in slurmd's spool):\n%s", r, len(other), strings.Join(other, "\n"))
		}
		if len(libsAfter[r]) > 0 {
			t.Errorf("rank %d still opens %d libraries on the original trees after one fold:\n%s", r, len(libsAfter[r]), strings.Join(libsAfter[r], "\n"))
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/clitest"
	"golang.org/x/sys/unix"
)

// rankApp: every rank imports json; the ranks other than 0 also import
// decimal, which a 1-process pilot (rank 0's path) never takes.
const rankApp = `import os, json
if os.environ.get("OMPI_COMM_WORLD_RANK", "0") != "0":
    import decimal
    print("rank", os.environ["OMPI_COMM_WORLD_RANK"], decimal.Decimal("1.5") * 2)
else:
    print("rank 0", json.dumps([1]))
`

// decimalCalls matches the file calls on the decimal module's files, in an
// strace log: what the 1-rank pilot missed.
var decimalCalls = regexp.MustCompile(`(?m)^.*"/usr/lib/python3[.0-9]*/(__pycache__/)?(decimal|_pydecimal|numbers)[.c].*$`)

// A job at 2 ranks under Open MPI's mpirun whose rank 1 takes paths its
// 1-process pilot did not: the reports of one run are folded in with one
// `build --from`, and the next run of the same job makes no call on those
// paths (strace, the kernel's record, on every rank).
func TestBuildFromReportsFoldsWhatRanksLacked(t *testing.T) {
	for _, p := range []string{"/usr/bin/mpirun", "/usr/bin/strace", "/usr/bin/python3"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is needed (make deps)", p)
		}
	}
	cli := clitest.CLI(t)
	dir := t.TempDir()
	env := append(clitest.CleanEnv(dir), "OMPI_MCA_plm_rsh_agent=false")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	app := []string{"/usr/bin/python3", "-c", rankApp}
	mpirun := []string{"--allow-run-as-root", "--oversubscribe", "-np", "2"}
	run(cli, append([]string{"trace", "-q", "--"}, app...)...)
	run(cli, "build", "-o", "app.dlimg")

	// The job at 2 ranks, each under strace, with a report.
	job := func(tag string) []string {
		t.Helper()
		wrapper := filepath.Join(dir, "rank-"+tag+".sh")
		script := "#!/bin/sh\nexec strace -f -qq -e signal=none -e trace=%file -o \"" + dir + "/" + tag + ".$OMPI_COMM_WORLD_RANK\" \"$@\"\n"
		if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		args := append(append([]string{}, mpirun...), wrapper, cli, "exec", "--stage-dir", filepath.Join(dir, "stage"),
			"--report", filepath.Join(dir, tag+".report"), "app.dlimg", "--")
		out := run("mpirun", append(args, app...)...)
		if !strings.Contains(out, "rank 1 3.0") || !strings.Contains(out, "rank 0 [1]") {
			t.Fatalf("job %s printed:\n%s", tag, out)
		}
		var logs []string
		for _, r := range []string{"0", "1"} {
			b, err := os.ReadFile(filepath.Join(dir, tag+"."+r))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), "execve(") {
				t.Fatalf("strace log of rank %s holds no execve: not a log of the rank", r)
			}
			logs = append(logs, string(b))
		}
		return logs
	}
	before := job("before")
	if calls := decimalCalls.FindAllString(before[1], -1); len(calls) == 0 {
		t.Fatalf("rank 1 made no call on the decimal module before the fold: the test cannot tell anything\n%s", before[1])
	}
	out := run(cli, "build", "-o", "app.dlimg", "--from", "app.dlimg", "before.report")
	if !strings.Contains(out, "from image "+filepath.Join(dir, "app.dlimg")+" and 1 report file(s)") {
		t.Errorf("build --from summary does not name its inputs:\n%s", out)
	}
	after := job("after")
	for r, log := range after {
		if calls := decimalCalls.FindAllString(log, -1); len(calls) > 0 {
			t.Errorf("rank %d still made %d calls on paths the report named, e.g.\n%s", r, len(calls), strings.Join(calls[:min(len(calls), 5)], "\n"))
		}
	}
}

// Two pilots in one directory (other inputs): the second writes
// dlbundle.2.trace beside the first, and `build` with no trace named holds
// what either loaded.
func TestSecondPilotKeepsTheFirst(t *testing.T) {
	cli := clitest.CLI(t)
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Dir, cmd.Env = dir, clitest.CleanEnv(dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("dlbundle %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("trace", "-q", "--", "/usr/bin/python3", "-c", "import json")
	first, err := os.ReadFile(filepath.Join(dir, "dlbundle.trace"))
	if err != nil {
		t.Fatal(err)
	}
	run("trace", "-q", "--", "/usr/bin/python3", "-c", "import decimal")
	if again, err := os.ReadFile(filepath.Join(dir, "dlbundle.trace")); err != nil || string(again) != string(first) {
		t.Fatalf("the second pilot changed ./dlbundle.trace (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "dlbundle.2.trace")); err != nil {
		t.Fatalf("the second pilot wrote no ./dlbundle.2.trace: %v", err)
	}
	out := run("build", "-o", "app.dlimg")
	if !strings.Contains(out, "from 2 trace(s)") {
		t.Errorf("build did not use both pilots:\n%s", out)
	}
	im, err := image.OpenFile(filepath.Join(dir, "app.dlimg"))
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	for _, p := range []string{"/usr/lib/python3.11/json/__init__.py", "/usr/lib/python3.11/decimal.py"} {
		if e, ok := im.Lookup(p); !ok || e.Type != image.TypeRegular {
			t.Errorf("the image does not bundle %s (one pilot's file)", p)
		}
	}
}

// Every exec without --report leaves its processes' records beside the
// stage, one file per run; `dlbundle report` with no file reads them, names
// a relative path by the directory the process was in at the time, and
// prints a build --from that works as printed (run here).
func TestExecLeavesNodeRecordsReportReadsThem(t *testing.T) {
	cli := clitest.CLI(t)
	dir := t.TempDir()
	app := appDirOutsideTmp(t)
	// A data file the pilot never reads, in a directory of its own (the
	// image holds the app's directory listing, not this one's).
	if err := os.Mkdir(filepath.Join(app, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"main.py": "print('main')\n", "data/later.dat": "data\n"} {
		if err := os.WriteFile(filepath.Join(app, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := clitest.CleanEnv(dir)
	run := func(wantExit int, args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != wantExit {
			t.Fatalf("dlbundle %s: exit %d, want %d\n%s", strings.Join(args, " "), code, wantExit, out)
		}
		return string(out)
	}
	run(0, "trace", "-q", "--", "/usr/bin/python3", filepath.Join(app, "main.py"))
	run(0, "build", "-o", "app.dlimg")
	// The run reads the data file by a relative name after a chdir.
	stage := filepath.Join(dir, "stage")
	prog := "import os; os.chdir('" + app + "/data'); print(open('later.dat').read().strip())"
	// Two commands, the first run twice: lone execs of one image and
	// command add to one record (a loop of them evicts no job's records).
	for _, p := range []string{prog, prog + "; pass", prog} {
		if out := run(0, "exec", "--stage-dir", stage, "app.dlimg", "--", "/usr/bin/python3", "-c", p); !strings.Contains(out, "data") {
			t.Fatalf("app printed %q", out)
		}
	}
	recs, _ := filepath.Glob(filepath.Join(stage, "records", "*.report"))
	if len(recs) != 2 {
		t.Fatalf("records %v: want one per image and command (2)", recs)
	}
	text := run(0, "report", "--stage-dir", stage)
	later := filepath.Join(app, "data", "later.dat")
	if !strings.Contains(text, "2 runs:") || !strings.Contains(text, "  "+later+"\n") {
		t.Fatalf("report of the node's records does not keep 2 runs apart or name %s:\n%s", later, text)
	}
	// With no --stage-dir, report finds the records where the Slurm plugin
	// stages for the site: plugstack.conf's stage_dir=, through an include.
	etc := filepath.Join(dir, "etc")
	if err := os.MkdirAll(filepath.Join(etc, "plugstack.conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"slurm.conf":                     "ClusterName=test\n",
		"plugstack.conf":                 "include plugstack.conf.d/*.conf\n",
		"plugstack.conf.d/dlbundle.conf": "# the site's line\nrequired /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_dlbundle.so dlbundle=/usr/local/bin/dlbundle stage_dir=" + stage + "\n",
	} {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env = append(env, "SLURM_CONF="+filepath.Join(etc, "slurm.conf"))
	if site := run(0, "report"); site != text {
		t.Errorf("report with the site's stage_dir= in plugstack.conf:\n%s\nwant as with --stage-dir:\n%s", site, text)
	}
	i := strings.Index(text, "dlbundle build -o ")
	if i < 0 {
		t.Fatalf("no build --from advice:\n%s", text)
	}
	advice := strings.Fields(strings.SplitN(text[i:], "\n", 2)[0])
	out := run(0, advice[1:]...)
	if !strings.Contains(out, "report file(s)") {
		t.Errorf("build --from as advised:\n%s", out)
	}
	im, err := image.OpenFile(filepath.Join(dir, "app.dlimg"))
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	if e, ok := im.Lookup(later); !ok || e.Type != image.TypeRegular {
		t.Errorf("the folded image does not bundle %s", later)
	}

	// Traces and reports mixed, without --from: the pilot's files and what
	// the runs lacked.
	run(0, append([]string{"build", "-o", "mixed.dlimg", "dlbundle.trace"}, recs...)...)
	mixed, err := image.OpenFile(filepath.Join(dir, "mixed.dlimg"))
	if err != nil {
		t.Fatal(err)
	}
	defer mixed.Close()
	for _, p := range []string{later, filepath.Join(app, "main.py")} {
		if e, ok := mixed.Lookup(p); !ok || e.Type != image.TypeRegular {
			t.Errorf("the image of a trace and reports does not bundle %s", p)
		}
	}

	// A trace is not a report: exit 2, naming what it is.
	if msg := run(2, "report", "dlbundle.trace"); !strings.Contains(msg, "is a pilot's trace") {
		t.Errorf("report of a trace: %s", msg)
	}
}

// Inside an allocation (SLURM_JOB_ID set, no step: an salloc shell or a
// batch script calling exec directly), an image rebuilt at the same path is
// served new at the next exec, never from the older stage.
func TestExecInAllocationServesARebuiltImage(t *testing.T) {
	cli := clitest.CLI(t)
	dir := t.TempDir()
	app := appDirOutsideTmp(t)
	script := filepath.Join(app, "app.sh")
	env := append(clitest.CleanEnv(dir), "SLURM_JOB_ID=4242", "SLURM_JOB_NODELIST=localhost")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("dlbundle %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	stage := filepath.Join(dir, "stage")
	for _, v := range []string{"first", "second"} {
		if err := os.WriteFile(script, []byte("#!/bin/sh\necho "+v+" build\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		run("trace", "-q", "-o", v+".trace", "--", script)
		run("build", "-o", "app.dlimg", v+".trace")
		// the app's file changes after the build: only the stage can say "first"/"second"
		if err := os.WriteFile(script, []byte("#!/bin/sh\necho the original file\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if out := run("exec", "--stage-dir", stage, "app.dlimg", "--", script); strings.TrimSpace(out) != v+" build" {
			t.Fatalf("exec after the %s build printed %q, want %q", v, out, v+" build")
		}
	}
}

// An Open MPI program traced without mpirun (a singleton) leaves no daemon
// and no session files behind, and the note gives the recipe for a pilot
// traced as a rank.
func TestTraceMPISingletonLeavesNothing(t *testing.T) {
	if _, err := exec.LookPath("mpicc"); err != nil {
		t.Fatal("mpicc is needed (make deps: libopenmpi-dev)")
	}
	cli := clitest.CLI(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "hello.c")
	if err := os.WriteFile(src, []byte(`#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) { int r; MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &r); printf("rank %d\n", r); MPI_Finalize(); return 0; }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "hello")
	if out, err := exec.Command("mpicc", "-o", app, src).CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}
	tmp := filepath.Join(dir, "tmp") // Open MPI's session directory goes below $TMPDIR
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cli, "trace", "--", app)
	cmd.Dir, cmd.Env = dir, append(clitest.CleanEnv(dir), "TMPDIR="+tmp, "OMPI_MCA_plm_rsh_agent=false")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "rank 0") {
		t.Fatalf("trace of the MPI program: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "outlived the app") {
		t.Errorf("a process outlived the pilot:\n%s", out)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "ompi.*")); len(left) > 0 {
		t.Errorf("session files left behind: %v", left)
	}
	if !strings.Contains(string(out), "mpirun -np 1 dlbundle trace -- "+app) {
		t.Errorf("no recipe for a pilot traced as a rank:\n%s", out)
	}
	tr, err := os.ReadFile(filepath.Join(dir, "dlbundle.trace"))
	if err != nil || strings.Contains(string(tr), `/orted"`) {
		t.Errorf("the pilot's trace records a daemon or is missing (%v)", err)
	}

	// -o a FIFO with a reader: the trace goes to the reader, and the note
	// is not looked for by opening the FIFO again (that open would wait
	// for a writer forever).
	fifo := filepath.Join(dir, "trace.fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := os.ReadFile(fifo)
		got <- b
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd = exec.CommandContext(ctx, cli, "trace", "-o", fifo, "--", app)
	cmd.Dir, cmd.Env = dir, append(clitest.CleanEnv(dir), "TMPDIR="+tmp, "OMPI_MCA_plm_rsh_agent=false")
	out, err = cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("trace -o FIFO did not end (it opened the FIFO again to read the trace back):\n%s", out)
	}
	if err != nil || !strings.Contains(string(out), "rank 0") {
		t.Fatalf("trace -o FIFO of the MPI program: %v\n%s", err, out)
	}
	if b := <-got; !strings.Contains(string(b), "dlbundle-trace") {
		t.Errorf("the FIFO's reader got %d bytes, not the trace", len(b))
	}
}

// The Epilog example gathers the job's records from the node (and only the
// job's) into DLBUNDLE_RECORDS_TO/<job>/, where report and build --from read
// them.
func TestEpilogGathersTheJobsRecords(t *testing.T) {
	cli := clitest.CLI(t)
	dir := t.TempDir()
	epilog, err := filepath.Abs("../../examples/jobs/epilog.sh")
	if err != nil {
		t.Fatal(err)
	}
	run := func(env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	base := clitest.CleanEnv(dir)
	run(base, cli, "trace", "-q", "--", "/usr/bin/python3", "-c", "import json")
	run(base, cli, "build", "-o", "app.dlimg")
	stagePattern := filepath.Join(dir, "stage-%u")
	uid := strconv.Itoa(os.Getuid())
	for _, job := range [][]string{{"SLURM_JOB_ID=77", "SLURM_STEP_ID=0"}, {"SLURM_JOB_ID=77"}, {"SLURM_JOB_ID=78", "SLURM_STEP_ID=0"}} {
		env := append(append(append([]string{}, base...), job...), "DLBUNDLE_STAGE_DIR="+stagePattern)
		run(env, cli, "exec", "app.dlimg", "--", "/usr/bin/python3", "-c", "import json, decimal")
	}
	shared := filepath.Join(dir, "shared") // as /tmp: sticky, every user may create in it
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	run(append(base, "DLBUNDLE="+cli, "DLBUNDLE_STAGE_DIR="+stagePattern, "DLBUNDLE_RECORDS_TO="+shared,
		"SLURM_JOB_ID=77", "SLURM_JOB_UID="+uid, "SLURM_JOB_USER="+me.Username, "SLURMD_NODENAME=n1"), "/bin/sh", epilog)
	all, _ := filepath.Glob(filepath.Join(shared, "*", "*"))
	want := []string{filepath.Join(shared, "77", "n1.slurm-77.0.image"), filepath.Join(shared, "77", "n1.slurm-77.0.report"),
		filepath.Join(shared, "77", "n1.slurm-77.image"), filepath.Join(shared, "77", "n1.slurm-77.report")}
	if strings.Join(all, " ") != strings.Join(want, " ") {
		t.Fatalf("gathered %v, want %v (job 77's two runs with the notes naming their image, not job 78's)", all, want)
	}
	got, _ := filepath.Glob(filepath.Join(shared, "*", "*.report"))
	text := run(base, cli, append([]string{"report"}, got...)...)
	if !strings.Contains(text, "2 runs:") || !strings.Contains(text, "/usr/lib/python3.11/decimal.py") || !strings.Contains(text, "--from") {
		t.Errorf("report of the gathered records:\n%s", text)
	}
	// The fold names the runs' image (the gathered notes), and works as
	// printed.
	advice := foldAdvice(t, text)
	if img := filepath.Join(dir, "app.dlimg"); len(advice) != 1 || advice[0][2] != img {
		t.Fatalf("the report of the gathered records advises %v; want one fold into %s", advice, img)
	}
	run(base, cli, advice[0]...)
}

// exec says before the app starts, once per launch, that the command is
// not in the image, and that the stage went to a disk because /dev/shm is
// read-only; silent for a command the image holds (a bare name found along
// PATH) and for later ranks on a warm stage.
func TestExecWarnsOnceBeforeStart(t *testing.T) {
	cli := clitest.CLI(t)
	dir := t.TempDir()
	env := clitest.CleanEnv(dir)
	run := func(env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(env, cli, "trace", "-q", "--", "/usr/bin/python3", "-c", "pass")
	run(env, cli, "build", "-o", "app.dlimg")
	stage := filepath.Join(dir, "stage")
	notIn := "/bin/true is not in app.dlimg"
	if out := run(env, cli, "exec", "--stage-dir", stage, "app.dlimg", "--", "/bin/true"); !strings.Contains(out, notIn) {
		t.Errorf("no warning for a command the image does not hold:\n%s", out)
	}
	if out := run(append(env, "OMPI_COMM_WORLD_RANK=1"), cli, "exec", "--stage-dir", stage, "app.dlimg", "--", "/bin/true"); strings.Contains(out, "warning") {
		t.Errorf("rank 1 on a warm stage warned (every rank would):\n%s", out)
	}
	if out := run(env, cli, "exec", "--stage-dir", stage, "app.dlimg", "--", "python3", "-c", "print('ok')"); strings.TrimSpace(out) != "ok" {
		t.Errorf("python3 (in the image, found along PATH) got a warning or failed:\n%s", out)
	}
	// A read-only /dev/shm, in a mount namespace of its own.
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare (util-linux) is needed")
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	out := run(append(env, "TMPDIR="+tmp), "unshare", "-m", "/bin/sh", "-c",
		`mount -t tmpfs -o ro tmpfs /dev/shm && exec "$0" exec app.dlimg -- /usr/bin/python3 -c "print('ok')"`, cli)
	if !strings.Contains(out, "/dev/shm is not a writable tmpfs here") || !strings.Contains(out, filepath.Join(tmp, "dlbundle-")) {
		t.Errorf("no warning that the stage went to %s:\n%s", tmp, out)
	}
}

// A C program whose only file lookups are ld.so's library search (answered
// by the audit module, which the preload never sees): the report counts the
// libraries loaded from the stage as answered, not 0, and not the shim's
// own objects.
func TestReportCountsLibrariesTheAuditModuleFound(t *testing.T) {
	cli := clitest.CLI(t)
	dir := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Dir, cmd.Env = dir, clitest.CleanEnv(dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("dlbundle %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("trace", "-q", "--", "/bin/true")
	run("build", "-o", "app.dlimg")
	report := filepath.Join(dir, "run.report")
	run("exec", "--stage-dir", filepath.Join(dir, "stage"), "--report", report, "app.dlimg", "--", "/bin/true")
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ Answered, Missing, Passed int }
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	// /bin/true needs libc.so.6 alone (Debian): one library from the stage
	if r.Answered != 1 || r.Passed != 0 {
		t.Errorf("report %s: want answered 1 (libc.so.6, found through the audit module), passed 0", b)
	}
}

// A data file the pilot only stat'd, larger than 2 MiB, is external: the
// report tells it as left on the file system by a rule (not as unseen by
// the pilot), with a way that exists to change it; folding the report in
// bundles it, and so does --stat-only-max.
func TestReportTellsRuleFromUnseen(t *testing.T) {
	cli := clitest.CLI(t)
	dir := t.TempDir()
	app := appDirOutsideTmp(t)
	big := filepath.Join(app, "big.dat")
	if err := os.WriteFile(big, make([]byte, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Dir, cmd.Env = dir, clitest.CleanEnv(dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("dlbundle %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("trace", "-q", "--", "/usr/bin/python3", "-c", "import os; os.stat('"+big+"')")
	out := run("build", "-o", "app.dlimg")
	if !strings.Contains(out, "--stat-only-max") {
		t.Errorf("build summary does not name --stat-only-max for the large stat'd file:\n%s", out)
	}
	run("exec", "--stage-dir", filepath.Join(dir, "stage"), "--report", filepath.Join(dir, "run.report"), "app.dlimg", "--",
		"/usr/bin/python3", "-c", "print(len(open('"+big+"', 'rb').read()))")
	text := run("report", "--image", "app.dlimg", "run.report")
	rule, lacks := strings.Index(text, "a rule left on the file system"), strings.Index(text, "the image lacks")
	if rule < 0 || !strings.Contains(text[rule:], big) || (lacks >= 0 && strings.Contains(text[lacks:], big)) {
		t.Fatalf("report does not tell %s as left out by a rule:\n%s", big, text)
	}
	run("build", "-o", "folded.dlimg", "--from", "app.dlimg", "run.report")
	run("build", "-o", "max.dlimg", "--stat-only-max", "4194304")
	for _, name := range []string{"folded.dlimg", "max.dlimg"} {
		im, err := image.OpenFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if e, ok := im.Lookup(big); !ok || e.Type != image.TypeRegular {
			t.Errorf("%s does not bundle %s", name, big)
		}
		im.Close()
	}
}

// A run's record is bounded: past DLBUNDLE_RECORD_MAX bytes the shim
// appends no more lines (a job of a million short processes cannot fill
// the node's tmpfs); an explicit --report is not bounded.
func TestNodeRecordIsBounded(t *testing.T) {
	cli := clitest.CLI(t)
	dir := t.TempDir()
	env := append(clitest.CleanEnv(dir), "DLBUNDLE_RECORD_MAX=600", "DLBUNDLE_RUN=bounded")
	run := func(env []string, args ...string) {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("dlbundle %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run(env, "trace", "-q", "--", "/bin/sh", "-c", "/bin/true")
	run(env, "build", "-o", "app.dlimg")
	stage := filepath.Join(dir, "stage")
	record := filepath.Join(stage, "records", "bounded.report")
	// Processes the image served entirely have nothing to record.
	run(env, "exec", "--stage-dir", stage, "app.dlimg", "--", "/bin/sh", "-c", "/bin/true; /bin/true")
	if b, err := os.ReadFile(record); err != nil || len(b) != 0 {
		t.Errorf("record after a run the image served entirely: %q (%v), want an empty file", b, err)
	}
	// each exec: sh looks up a path the image does not hold (a line of
	// ~200 bytes); its children, served entirely, add none
	for i := 0; i < 4; i++ {
		run(env, "exec", "--stage-dir", stage, "app.dlimg", "--", "/bin/sh", "-c", "[ -e ./not-in-the-image ]; /bin/true; /bin/true")
	}
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(string(b), "\n")
	if lines < 2 || len(b) > 600+1024 {
		t.Errorf("record of %d bytes, %d lines: want some lines and no line started past 600 bytes", len(b), lines)
	}
	report := filepath.Join(dir, "explicit.report")
	for i := 0; i < 4; i++ {
		run(env, "exec", "--stage-dir", stage, "--report", report, "app.dlimg", "--", "/bin/sh", "-c", "/bin/true; /bin/true")
	}
	if b, _ := os.ReadFile(report); strings.Count(string(b), "\n") != 12 {
		t.Errorf("--report file has %d lines, want 12 (3 processes x 4 runs, unbounded)", strings.Count(string(b), "\n"))
	}
}

// The report names every path the run took to the file system: strace (the
// kernel's record) of the same run shows no path outside the stage that the
// report lacks, but for what glibc and ld.so open internally, out of a
// preload's reach (ld.so.cache, locale data, NSS files, the time zone), and
// the report shows no path strace did not see.
func TestReportNamesEveryPathStraceSees(t *testing.T) {
	cli := clitest.CLI(t)
	dir := t.TempDir()
	env := clitest.CleanEnv(dir)
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run(cli, "trace", "-q", "--", "/usr/bin/python3", "-c", "import json")
	run(cli, "build", "-o", "app.dlimg")
	stage, report, log := filepath.Join(dir, "stage"), filepath.Join(dir, "run.report"), filepath.Join(dir, "strace.log")
	// A library directory the run adds (as Flux or a module does), and a
	// library from outside that is dlclose'd with the dependencies it
	// pulled (as hwloc does with its plugins).
	llp := filepath.Join(dir, "llp")
	if err := os.Mkdir(llp, 0o755); err != nil {
		t.Fatal(err)
	}
	env = append(env, "LD_LIBRARY_PATH="+llp)
	run("strace", "-f", "-qq", "-e", "signal=none", "-e", "trace=%file", "-o", log,
		cli, "exec", "--stage-dir", stage, "--report", report, "app.dlimg", "--", "/usr/bin/python3", "-c",
		"import json, decimal, fractions, ctypes, _ctypes; _ctypes.dlclose(ctypes.CDLL('libxml2.so.2')._handle)")
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	reported := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r struct {
			PassedPaths []string `json:"passed_paths"`
			Outside     []string `json:"outside"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		for _, p := range append(r.PassedPaths, r.Outside...) {
			reported[p] = true
		}
	}
	st, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	// the app's calls: from the execve of the app on
	lines := strings.Split(string(st), "\n")
	for i, l := range lines {
		if strings.Contains(l, `execve("`+stage) || strings.Contains(l, `execve("/usr/bin/python3"`) {
			lines = lines[i:]
			break
		}
	}
	call := regexp.MustCompile(`^\d+\s+\w+\((?:AT_FDCWD, )?"([^"]+)"`)
	internal := []string{"/etc/", "/usr/lib/locale/", "/usr/share/locale/locale.alias", "/usr/lib/x86_64-linux-gnu/gconv/", stage + "/", report}
	seen := map[string]bool{}
	var missing []string
	for _, l := range lines {
		m := call.FindStringSubmatch(l)
		if m == nil || m[1] == "/" || strings.HasPrefix(m[1], "/proc/") || strings.HasPrefix(m[1], "/sys/") || strings.HasPrefix(m[1], "/dev/") {
			continue
		}
		p := m[1]
		seen[p] = true
		ok := reported[p]
		for _, pre := range internal {
			ok = ok || strings.HasPrefix(p, pre) || p == pre
		}
		if !ok {
			missing = append(missing, l)
		}
	}
	if len(missing) > 0 {
		t.Errorf("strace shows calls on paths the report does not name:\n%s", strings.Join(missing, "\n"))
	}
	var deps, searched int
	for p := range reported {
		if strings.Contains(p, "/libicuuc.so") || strings.Contains(p, "/liblzma.so") {
			deps++
		}
		if strings.HasPrefix(p, llp+"/") {
			searched++
		}
	}
	if deps < 2 {
		t.Errorf("the report does not name the libraries libxml2 pulled in before its dlclose (libicuuc, liblzma): %v", reported)
	}
	if searched == 0 {
		t.Errorf("the report names no candidate of ld.so's search in LD_LIBRARY_PATH %s: %v", llp, reported)
	}
	if !reported["/usr/lib/python3.11/decimal.py"] {
		t.Errorf("the report does not name decimal.py, which the image lacks: %v", reported)
	}
	for p := range reported {
		if !seen[p] && !strings.HasPrefix(p, "/proc/") && !strings.HasPrefix(p, "/sys/") && !strings.HasPrefix(p, "/dev/") {
			t.Errorf("the report names %s, on which strace saw no call", p)
		}
	}
}

// exec IMAGE -- NAME: PATH's directories that the image holds (the pilot's
// own search went through them) answer the search; no stat of a candidate
// reaches the file system.
func TestExecBareNameResolvedFromImage(t *testing.T) {
	cli := clitest.CLI(t)
	dir := t.TempDir()
	// /usr/local/games, /usr/games, /opt/no-such-dir: directories the pilot
	// reaches only through its own search of the name (dlbundle's, not the
	// app's), one of them missing
	pathDirs := []string{"/usr/local/sbin", "/usr/local/bin", "/usr/local/games", "/usr/games", "/opt/no-such-dir", "/usr/bin", "/bin"}
	env := []string{"PATH=" + strings.Join(pathDirs, ":"), "HOME=" + dir}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(cli, "trace", "-q", "--", "python3", "-c", "pass")
	run(cli, "build", "-o", "app.dlimg")
	log := filepath.Join(dir, "strace.log")
	run("strace", "-f", "-qq", "-e", "signal=none", "-e", "trace=%file", "-o", log,
		cli, "exec", "--stage-dir", filepath.Join(dir, "stage"), "app.dlimg", "--", "python3", "-c", "print('ok')")
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, d := range pathDirs {
			if strings.Contains(l, `"`+d+`/python3"`) {
				calls = append(calls, l)
			}
		}
	}
	if len(calls) > 0 {
		t.Errorf("exec's search for python3 made %d calls on the file system:\n%s", len(calls), strings.Join(calls, "\n"))
	}
}

// appDirOutsideTmp is a directory for a test app's tree, removed after the
// test. Not under /tmp: build's default rules leave /tmp out, as a job's
// scratch, and these tests need the app bundled.
func appDirOutsideTmp(t *testing.T) string {
	t.Helper()
	// In a directory of this test process's own: a pilot lists the app
	// directory's parent, and other packages' tests, run at the same time,
	// make and remove directories in /var/lib (a true "has changed"
	// warning, which the fold tests must not see).
	parent := "/var/lib/dlbundle-test-" + strconv.Itoa(os.Getpid())
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	app, err := os.MkdirTemp(parent, "life-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(app); os.Remove(parent) })
	return app
}

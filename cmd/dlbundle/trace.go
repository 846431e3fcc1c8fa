package main

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/dlbundle/dlbundle/internal/abspath"
	"github.com/dlbundle/dlbundle/internal/trustpath"
	"github.com/dlbundle/dlbundle/squash"
	"github.com/dlbundle/dlbundle/trace"
)

// TraceCmd is the pilot run: it runs the app once under ptrace and records
// every file-system lookup it makes.
type TraceCmd struct {
	Output  string   `short:"o" placeholder:"FILE" help:"Trace file to write (default ./dlbundle.trace, or the first free ./dlbundle.N.trace: pilots accumulate; '.RANK' is appended under a launcher)."`
	Quiet   bool     `short:"q" help:"Do not print the summary at the end."`
	HTML    string   `name:"html" placeholder:"FILE" help:"Also write a page (one self-contained HTML file) that draws the pilot's lookups over time and by directory; 'dlbundle inspect --html' adds the image and reports."`
	Command []string `arg:"" passthrough:"" name:"command" help:"The app and its arguments (put -- before it)."`
}

// Help is shown by `dlbundle trace --help`.
func (c *TraceCmd) Help() string {
	return `Runs CMD once (the pilot run) under ptrace and writes every file lookup it
and its children make - opens, stats, accesses, directory listings, execs,
and the files they create or remove - to a trace (JSON Lines, see
docs/trace-format.md). Only file-related system calls stop the app (a
seccomp filter); everything else runs at full speed.

Run it the way the job runs the app (same modules, environment, input), but
as one process: what the pilot loads is what gets bundled.

  dlbundle trace -- ./myapp --input small.nml
  dlbundle trace -o numpy.trace -- /usr/bin/python3 -c 'import numpy'
  dlbundle trace -q -- ./run.sh            # no summary
  dlbundle trace --html numpy.html -- /usr/bin/python3 -c 'import numpy'

Output: ./dlbundle.trace unless -o is given; when it exists, the first free
./dlbundle.2.trace, ./dlbundle.3.trace ...: a second pilot (other inputs,
another width) never replaces the first, and 'dlbundle build' with no trace
named uses all of them. -o FILE is written under a temporary name next to
FILE and renamed when complete, so an earlier FILE is replaced only by a
complete trace. Under a parallel launcher (OMPI_COMM_WORLD_RANK,
PMIX_RANK, PMI_RANK, FLUX_TASK_RANK or SLURM_PROCID set; the first wins, so
mpirun inside a Slurm job names its own ranks) ".RANK" is appended, so
'srun -n 4 dlbundle trace -- ./app' writes dlbundle.trace.0 ... .3, and
'srun -n 4 dlbundle trace -o capp.trace -- ./app' capp.trace.0 ... .3;
the name given stands for them all: 'dlbundle build -o capp.dlimg capp.trace'.
Put the launcher outside: 'dlbundle trace -- srun ./app' would trace srun
only (the ranks are started by slurmd) and is refused.

An Open MPI program traced without a launcher starts as a "singleton",
which would spawn a daemon (orted) and session files in /tmp that outlive the
pilot: trace runs it isolated (OMPI_MCA_ess_singleton_isolated=1, no daemon,
nothing left behind). Its ranks in a job load more (transports, PMIx); for a
pilot that loads what a rank does, put the launcher outside:
  mpirun -np 1 dlbundle trace -- ./mpi_app
or fold what the job's ranks lacked in later (dlbundle build --from).

The exit status is the app's (128+N if a signal N killed it; 127 if CMD is
not found, 126 if it is not executable). SIGINT and SIGTERM are passed to the
app. Processes still running when the app's main process exits (daemons) are
detached and left running, but their file system calls fail (ENOSYS) from
then on: trace names them by program, to be stopped; what they would load is
not in the trace (fold a run's report in later: dlbundle build --from).
Needs ptrace: not available where kernel.yama.ptrace_scope=3 or in
containers without CAP_SYS_PTRACE.

--html FILE draws where start-up goes, for people: when the app's lookups
happen, which directories it searches and how often in vain, when the large
libraries load. Open it in any browser (no network needed).

Next: dlbundle build -o app.dlimg (every ./dlbundle*.trace), then
      dlbundle inspect --html app.html --trace dlbundle.trace app.dlimg`
}

// Run traces the command and exits with its status.
func (c *TraceCmd) Run() error {
	argv := stripDashDash(c.Command)
	if err := refuseLauncher(argv); err != nil {
		return err
	}
	rank := trace.LauncherRank(os.Getenv)
	out := c.Output
	if out == "" {
		out = squash.NextTrace(".", rank)
	}
	isolated := isolateMPISingleton(rank)
	res, err := trace.Run(trace.Options{Command: argv, Output: out, Quiet: c.Quiet})
	var ce *trace.CommandError
	if errors.As(err, &ce) {
		fmt.Fprintf(os.Stderr, "dlbundle trace: %v\n", ce)
		exitWith(ce.Code)
	}
	if err != nil {
		return err
	}
	if isolated && !c.Quiet {
		noteMPISingleton(res.Output, argv)
	}
	if rank == "0" && !c.Quiet {
		noteRankFiles(out)
	}
	if c.HTML != "" {
		if err := writePage(c.HTML, []string{res.Output}, "", nil, nil); err != nil {
			fmt.Fprintf(os.Stderr, "dlbundle trace: %s was written, but not the page: %v\n", res.Output, err)
			exitWith(max(res.Exit, 1))
		}
	}
	exitWith(res.Exit)
	return nil
}

// noteRankFiles tells, once per launch (rank 0), that every rank wrote its
// own file beside name and that build takes them by name: the user gave
// capp.trace and finds capp.trace.0, capp.trace.1...
func noteRankFiles(name string) {
	fmt.Fprintf(os.Stderr, "dlbundle trace: under a launcher each rank writes its own file, %s.RANK (%s.0, %s.1...); build from them all with: dlbundle build -o app.dlimg %s\n",
		name, name, name, name)
}

// exitWith ends dlbundle with the app's status. It exits here rather than
// returning exitError because kong wraps Run's error (errors.Join), which
// main's type assertion does not see through.
func exitWith(code int) {
	if code != 0 {
		os.Exit(code)
	}
}

// TraceStubCmd is the hidden verb the tracer re-executes: it installs the
// seccomp filter and execs the app (see trace.StubMain).
type TraceStubCmd struct {
	Command []string `arg:"" passthrough:"" name:"command"`
}

// Run returns only if the app could not be exec'd.
func (c *TraceStubCmd) Run() error {
	code, err := trace.StubMain(stripDashDash(c.Command))
	fmt.Fprintf(os.Stderr, "dlbundle trace: %v\n", err)
	exitWith(code)
	return err
}

// isolateMPISingleton: outside a launcher, an Open MPI program (or Python
// importing mpi4py) starts as a singleton, which spawns an orted daemon that
// outlives the pilot (its file calls then fail with ENOSYS, and its session
// files stay in /tmp). Open MPI's isolated singleton mode starts no daemon;
// the variable changes nothing for programs that are not Open MPI
// singletons (ranks under mpirun use another component). It reports whether
// the pilot runs so; a value the user set is kept.
func isolateMPISingleton(rank string) bool {
	const v = "OMPI_MCA_ess_singleton_isolated"
	if rank != "" {
		return false
	}
	if _, set := os.LookupEnv(v); set {
		return false
	}
	os.Setenv(v, "1")
	return true
}

// noteMPISingleton says, when the pilot loaded Open MPI, that it ran as an
// isolated singleton and how to trace it as a rank instead.
func noteMPISingleton(tracePath string, argv []string) {
	// Read back through the rule: -o may name a FIFO or a device (outfile
	// writes those directly), which must not be opened again to read.
	abs, err := abspath.Abs(tracePath)
	if err != nil {
		return
	}
	f, _, err := trustpath.For(trustpath.Shared).OpenFile(abs)
	if err != nil {
		return
	}
	defer f.Close()
	t, err := trace.Read(f, tracePath)
	if err != nil {
		return
	}
	for _, e := range t.Events {
		if e.Op == trace.OpOpen && e.Err == "" && strings.Contains(path.Base(e.Path), "libmpi.so") {
			fmt.Fprintf(os.Stderr, "dlbundle trace: note: %s loaded Open MPI without a launcher: traced as an isolated singleton\n"+
				"(no daemon, no session files left). Its ranks in a job load more (transports, PMIx): to trace\n"+
				"one as a rank, run:  mpirun -np 1 dlbundle trace -- %s\n"+
				"or fold what a job's ranks lacked in afterwards (dlbundle report, then dlbundle build --from).\n",
				argv[0], strings.Join(argv, " "))
			return
		}
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/oneproc"
	"github.com/dlbundle/dlbundle/internal/stagetime"
	"github.com/dlbundle/dlbundle/loader"
	"github.com/dlbundle/dlbundle/node"
)

// ExecCmd stages an image on this node (once per node) and replaces itself
// with the app, the loader shim in its environment.
type ExecCmd struct {
	StageFlags `embed:""`

	Image   string   `arg:"" name:"image" help:"The image: a file (app.dlimg) or oci://REGISTRY/REPO:TAG or oci://REGISTRY/REPO@sha256:DIGEST."`
	Command []string `arg:"" name:"command" passthrough:"" help:"The app and its arguments, after --."`
}

// Help is shown by 'dlbundle exec --help' below the flags.
func (c *ExecCmd) Help() string {
	return `Every rank of a job runs the same command line:

  #!/bin/bash
  #SBATCH --nodes=64 --ntasks-per-node=32
  srun dlbundle exec /lustre/me/app.dlimg -- ./myapp input.nml

The first rank on each node reads the image once and stages it into the stage
dir; the other ranks on that node wait for it, then find the stage through the
job id (SLURM_JOB_ID, PBS_JOBID, FLUX_JOB_ID, LSB_JOBID, Open MPI/PMIx) without
touching the shared file system at all, not even to stat the image. Later jobs
on the node reuse the stage of an unchanged image.

dlbundle then replaces itself with the app (no process stays behind): exit
status, signals and stdin/stdout/stderr are the app's own. A bundled
executable runs from the stage with argv[0] unchanged; a bundled #! script
starts its interpreter as the kernel would, from the stage when bundled.

Outside a batch job each exec stats the image once (to notice a rebuilt image).
See docs/exec.md.`
}

// Run stages, then execs the app. It returns only on failure.
func (c *ExecCmd) Run() error {
	argv := stripDashDash(c.Command)
	if len(argv) == 0 {
		return errors.New("no command to run: dlbundle exec IMAGE -- CMD [ARGS...]")
	}
	if err := c.checkInputs(); err != nil {
		return err
	}
	ctx, stop := notifySignals(true)
	stopT := stagetime.Start("ensure stage (all)")
	staged, err := ensureStage(ctx, "exec", c.ensureRequest())
	stopT()
	if sig := stop(); sig != nil {
		// SIGTERM or SIGINT during staging, even after the stage was
		// published: the app must not start (nor natively: --fallback is
		// for failures, not for a job being cancelled).
		dieBy(sig)
	}
	if err != nil {
		if !c.Fallback {
			return fmt.Errorf("%w (use --fallback to run the app natively when staging fails)", err)
		}
		fmt.Fprintf(os.Stderr, "dlbundle exec: warning: %v; running %s natively (--fallback)\n", err, argv[0])
		return execProgram(loader.Start("", argv, os.Environ(), loader.EnvOptions{}))
	}
	warnBeforeStart(c.StageDir, c.Image, staged, argv)
	report := reportTarget(c.Report, staged.Dir, c.Image, argv) // before os.Environ: it sets DLBUNDLE_RUN
	stopT = stagetime.Start("exec: the app's start (loader.Start)")
	p, err := loader.Start(staged.Dir, argv, os.Environ(), loader.EnvOptions{Report: report, Debug: c.Debug})
	stopT()
	return execProgram(p, err)
}

// ensureRequest is what exec asks of node.Ensure.
func (c *ExecCmd) ensureRequest() node.EnsureRequest {
	req := c.StageFlags.ensureRequest(c.Image)
	req.OnMiss = oneproc.Restore // staging decompresses on every core
	return req
}

// ensureStage finds or makes the node's stage (node.Ensure) with what a
// verb shows the user on the way: progress and waits on a terminal, the
// squatted stage dir's warning, and the stage made.
func ensureStage(ctx context.Context, verb string, req node.EnsureRequest) (*node.Staged, error) {
	tty := isTerminal(os.Stderr)
	bar := newProgress("staging " + req.Image)
	defer bar.finish()
	req.Progress = bar.callback()
	if tty {
		req.OnWait = func(dir string) {
			fmt.Fprintf(os.Stderr, "dlbundle %s: waiting for another process staging into %s\n", verb, dir)
		}
	}
	req.Warn = func(msg string) { fmt.Fprintf(os.Stderr, "dlbundle: warning: %s\n", msg) }
	req.OnMiss = onStageMiss(req.OnMiss)
	s, err := node.Ensure(ctx, req)
	if tty && err == nil && s.Materialized {
		fmt.Fprintf(os.Stderr, "\r\x1b[K%sstaged %s into %s\n", verbPrefix(), req.Image, s.Dir)
	}
	return s, err
}

// notifySignals returns a context that SIGTERM and SIGINT cancel, and stop,
// which returns the signal that came before, if any. signal.NotifyContext
// cannot tell that: its stop cancels the context too.
//
// With toKernel, stop first sets the two signals' disposition in the kernel
// to SIG_DFL (those the process did not inherit ignored), then stops the
// relay: signal.Stop waits until a signal the runtime already caught has
// reached the channel, and every later one kills exec in the kernel, or,
// pending at execve, the app before it runs. Without it, a SIGTERM that
// Go's own handler caught on another thread while this one was in execve
// died with that thread and the app started, never told (seen under load in
// TestExecSIGTERMDuringStagingNeverStartsApp). Go's runtime does not put
// its handler back after that (it believes it still owns the signal), so
// the process must exec or exit after a toKernel stop.
func notifySignals(toKernel bool) (context.Context, func() os.Signal) {
	ctx, cancel := context.WithCancel(context.Background())
	sigc := make(chan os.Signal, 1)
	got := make(chan os.Signal, 1)
	var relayed []os.Signal
	for _, s := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		if !signal.Ignored(s) { // inherited SIG_IGN (nohup, a background job) stays as it is
			relayed = append(relayed, s)
		}
	}
	signal.Notify(sigc, relayed...)
	go func() {
		defer close(got)
		if s, ok := <-sigc; ok {
			got <- s
			cancel()
		}
	}()
	return ctx, func() os.Signal {
		if toKernel {
			for _, s := range relayed {
				kernelDefault(s.(syscall.Signal))
			}
		}
		signal.Stop(sigc) // after Stop, nothing more is sent to sigc: safe to close
		close(sigc)
		s := <-got // the goroutine's answer: the signal, or nil once sigc is closed
		cancel()
		return s
	}
}

// kernelDefault sets sig's disposition to SIG_DFL with rt_sigaction(2)
// behind the Go runtime's back (os/signal can only hand a signal back to the
// runtime's handler). The kernel's struct sigaction is all zeros for
// SIG_DFL, no flags and an empty mask, whatever the architecture's layout.
func kernelDefault(sig syscall.Signal) {
	var act [4]uint64
	unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
}

// dieBy ends this process by sig, with its default action (the exit status
// a job script or srun expects of a cancelled rank).
func dieBy(sig os.Signal) {
	fmt.Fprintf(os.Stderr, "dlbundle exec: %v during staging; not starting the app\n", sig)
	s := sig.(syscall.Signal)
	signal.Reset(s)
	unix.Kill(os.Getpid(), s)
	time.Sleep(time.Second) // the signal is being delivered
	os.Exit(128 + int(s))
}

// execProgram replaces this process with p. If that fails, the exit status
// is a shell's: 127 for a command not found, 126 for one that cannot run.
func execProgram(p *loader.Program, err error) error {
	var se *loader.StartError
	if errors.As(err, &se) {
		fmt.Fprintf(os.Stderr, "dlbundle exec: %v\n", se)
		return exitError{se.Status}
	}
	if err != nil {
		return err
	}
	stagetime.Report(os.Stderr) // DLBUNDLE_STAGE_TIMING=1: the stage's phases, before the app's output
	err = unix.Exec(p.Path, p.Argv, p.Env)
	fmt.Fprintf(os.Stderr, "dlbundle exec: %s: %v\n", p.Argv[0], err)
	if errors.Is(err, unix.ENOENT) {
		return exitError{127}
	}
	return exitError{126}
}

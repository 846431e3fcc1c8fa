package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/internal/oneproc"
	"github.com/dlbundle/dlbundle/loader"
	"github.com/dlbundle/dlbundle/node"
)

// ExecCmd stages an image on this node (once per node) and replaces itself
// with the app, the loader shim in its environment.
type ExecCmd struct {
	StageDir string        `name:"stage-dir" placeholder:"DIR" env:"DLBUNDLE_STAGE_DIR" help:"Node-local directory for staged images (default /dev/shm/dlbundle-<uid> if /dev/shm is a tmpfs, else $${TMPDIR:-/tmp}/dlbundle-<uid>). Must be yours and not group/world-writable."`
	Report   string        `placeholder:"FILE" help:"Every process of the app appends its lookup counts to FILE (sets DLBUNDLE_REPORT); summarise with 'dlbundle report FILE'. Default: the node's records beside the stage, which 'dlbundle report' reads with no file (DLBUNDLE_RECORD=0: none)."`
	Debug    bool          `help:"Log every lookup decision of the shim (sets DLBUNDLE_DEBUG=1)."`
	Fallback bool          `help:"If the image cannot be staged (corrupt, no space, refused stage dir), warn and run the app natively instead of failing."`
	Workers  int           `placeholder:"N" help:"Decompression workers for staging (default: all cores)."`
	Insecure bool          `help:"With an oci:// image: talk plain http to the registry (a lab registry without TLS; localhost and 127.0.0.1 use http anyway)."`
	Timeout  time.Duration `default:"30s" placeholder:"DURATION" help:"With an oci:// image: give up on a registry connection that makes no progress for this long (transient failures are retried 3 times). The ranks waiting on the node get the staging rank's error at once."`

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
	if c.Report != "" {
		if err := checkReportFile(c.Report); err != nil {
			return err
		}
	}
	ctx, stop := notifySignals(true)
	staged, err := c.stage(ctx)
	if sig := stop(); sig != nil {
		// SIGTERM or SIGINT during staging, even after the stage was
		// published: the app must not start (nor natively: --fallback is
		// for failures, not for a job being cancelled).
		dieBy(sig)
	}
	if err != nil {
		if !c.Fallback {
			return fmt.Errorf("%w\n(use --fallback to run the app natively when staging fails)", err)
		}
		fmt.Fprintf(os.Stderr, "dlbundle exec: warning: %v; running %s natively (--fallback)\n", err, argv[0])
		return execApp(argv, findNative, nil, os.Environ())
	}
	warnBeforeStart(c.StageDir, c.Image, staged, argv)
	report := reportTarget(c.Report, staged.Dir, c.Image) // before os.Environ: it sets DLBUNDLE_RUN
	env := loader.ShimEnv(staged.Dir, os.Environ(), loader.EnvOptions{Report: report, Debug: c.Debug})
	return execApp(argv, func(cmd string) (string, error) { return findCommand(staged.Dir, cmd) },
		func(path string) (string, string, bool) { return stagedScript(staged.Dir, path) }, env)
}

// checkReportFile makes sure that the app's processes can append to --report
// FILE (they do it at exit, where nobody could be told that it failed) and
// that exec cannot hang on it: it opens FILE as the shim does (O_APPEND,
// O_NOFOLLOW) but non-blocking, creating it if needed, and wants a regular
// file of the user's own. A FIFO there (a shared path another user chose)
// blocked exec for good; another user's file would get this user's
// reports (what the app looked up) appended for them to read.
func checkReportFile(path string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0o644)
	switch {
	case errors.Is(err, unix.ELOOP):
		// A symlink planted at the path: the shim will not follow it
		// (issue 10) and the app runs, but not in silence.
		fmt.Fprintf(os.Stderr, "dlbundle exec: warning: --report %s is a symbolic link; the shim does not follow it: no report will be written\n", path)
		return nil
	case errors.Is(err, unix.ENXIO): // a FIFO without a reader
		return fmt.Errorf("--report %s is a FIFO; refusing (the app's processes would block on it): choose a regular file", path)
	case err != nil:
		return fmt.Errorf("--report %s: %w; the app's processes could not write their reports there: choose a writable path", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("--report %s: %w", path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("--report %s is not a regular file; refusing (the app's processes would block or fail on it): choose a regular file", path)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("--report %s belongs to uid %d, not to you; refusing to append your processes' reports to another user's file: choose a path of your own", path, st.Uid)
	}
	return nil
}

// stage opens the stage dir and returns the published stage of the image.
func (c *ExecCmd) stage(ctx context.Context) (*node.Staged, error) {
	dir, squat, err := node.OpenStageDirFor(c.StageDir)
	if err != nil {
		return nil, err
	}
	ref, err := node.AbsImageRef(c.Image)
	if err != nil {
		return nil, err
	}
	alias, err := node.StageAlias(ref, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", c.Image, err)
	}
	tty := isTerminal(os.Stderr)
	bar := newProgress("dlbundle exec: staging " + c.Image)
	defer bar.finish()
	opts := loader.MaterializeOptions{Workers: c.Workers, Progress: bar.callback()}
	req := node.StageRequest{Dir: dir, Alias: alias, Ref: ref, MustHave: loader.StageEssentials,
		Open:   node.OpenImage(ref, dir, opts, registry.Options{Insecure: c.Insecure, Timeout: c.Timeout}),
		OnMiss: oneproc.Restore} // staging decompresses on every core
	if tty {
		req.OnWait = func() {
			fmt.Fprintf(os.Stderr, "dlbundle exec: waiting for another process staging into %s\n", dir)
		}
	}
	s, err := node.Stage(ctx, req)
	// A squatted stage dir: said once per node and launch, by the process
	// that looked at the image (the others found its stage by the alias).
	if squat != nil && (err != nil || s.Digest != "") {
		fmt.Fprintf(os.Stderr, "dlbundle: warning: %s\n", squat.Warning())
	}
	if tty && err == nil && s.Materialized {
		fmt.Fprintf(os.Stderr, "\r\x1b[Kdlbundle exec: staged %s into %s\n", c.Image, s.Dir)
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

// execApp replaces this process with argv. find maps argv[0] to the file to
// execute; argv[0] itself is passed unchanged. If that fails, the exit status
// is a shell's: 127 for a command not found, 126 for one that cannot run.
func execApp(argv []string, find func(string) (string, error), script func(string) (string, string, bool), env []string) error {
	path, err := find(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlbundle exec: %v\n", err)
		return exitError{127}
	}
	// A bundled "#!" script: start its interpreter as the kernel would
	// (interpreter, optional argument, the script's path, argv[1:]), so that
	// a bundled interpreter runs from the stage too (at most 4 levels, as
	// the kernel).
	for depth := 0; script != nil; depth++ {
		interp, arg, ok := script(path)
		if !ok {
			break
		}
		if depth == 4 {
			fmt.Fprintf(os.Stderr, "dlbundle exec: %s: too many levels of #! interpreters\n", argv[0])
			return exitError{126}
		}
		next := []string{interp}
		if arg != "" {
			next = append(next, arg)
		}
		argv = append(append(next, path), argv[1:]...)
		if path, err = find(interp); err != nil {
			fmt.Fprintf(os.Stderr, "dlbundle exec: %v\n", err)
			return exitError{127}
		}
	}
	err = unix.Exec(path, argv, env)
	fmt.Fprintf(os.Stderr, "dlbundle exec: %s: %v\n", argv[0], err)
	if errors.Is(err, unix.ENOENT) {
		return exitError{127}
	}
	return exitError{126}
}

// findCommand finds cmd as execvp would, asking the stage before the file
// system: a bundled executable runs from its staged copy, so finding it costs
// no operation on the shared file system. Names that are not bundled are
// looked up natively, in PATH order, so the first match wins as it would
// without dlbundle.
func findCommand(stage, cmd string) (string, error) {
	if strings.Contains(cmd, "/") {
		if staged, ok := stagedPath(stage, cmd); ok {
			return staged, nil
		}
		return cmd, nil
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "."
		}
		cand := filepath.Join(dir, cmd)
		if staged, ok := stagedPath(stage, cand); ok {
			return staged, nil
		}
		if _, _, ok := stagedScript(stage, cand); ok {
			return cand, nil
		}
		if loader.ImageLacks(stage, cand) {
			continue // the image's listing of dir says no: no stat on the file system
		}
		if isExecutable(cand) {
			return cand, nil
		}
	}
	return "", fmt.Errorf("%s: command not found in PATH", cmd)
}

// stagedPath asks the stage about a command path made absolute without a
// file-system lookup (see loader.AbsPath).
func stagedPath(stage, cmd string) (string, bool) {
	abs, err := loader.AbsPath(cmd)
	if err != nil {
		return "", false
	}
	return loader.StagedPath(stage, abs)
}

// stagedScript asks the stage whether cmd is a bundled "#!" script.
func stagedScript(stage, cmd string) (interp, arg string, ok bool) {
	abs, err := loader.AbsPath(cmd)
	if err != nil {
		return "", "", false
	}
	return loader.StagedScript(stage, abs)
}

// findNative is execvp's search, for --fallback.
func findNative(cmd string) (string, error) {
	if strings.Contains(cmd, "/") {
		return cmd, nil
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "."
		}
		if cand := filepath.Join(dir, cmd); isExecutable(cand) {
			return cand, nil
		}
	}
	return "", fmt.Errorf("%s: command not found in PATH", cmd)
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && unix.Access(path, unix.X_OK) == nil
}

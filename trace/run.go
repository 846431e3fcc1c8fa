package trace

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Options of one pilot run.
type Options struct {
	Command []string  // argv of the app; Command[0] is searched in PATH
	Output  string    // trace file; "" means DefaultOutput (plus ".RANK" under a launcher)
	Quiet   bool      // no summary
	Stderr  io.Writer // summary and warnings; nil means os.Stderr
	// Stub is the argv prefix of a program that runs StubMain (the command is
	// appended), e.g. [self, StubVerb, "--"]; nil (the default) starts the app
	// directly and installs the filter from the tracer (inject.go), which
	// spares a second start of dlbundle.
	Stub []string
	// Getenv reads launcher variables; nil means os.Getenv.
	Getenv func(string) string
	// NoPredict follows every filtered call to its exit instead of computing
	// the outcome of stats and failing opens at entry (predict.go): slower,
	// the reference the prediction is tested against.
	NoPredict bool
}

// Result of a pilot run.
type Result struct {
	Exit   int    // the app's exit status (128+N when killed by signal N)
	Output string // the trace file written
	// Predicted counts the calls whose outcome the tracer computed at entry.
	Predicted int64
}

// CommandError is a command that could not be started (not found, not
// executable); Code is the shell's exit code for it.
type CommandError struct {
	Code int
	Err  error
}

func (e *CommandError) Error() string { return e.Err.Error() }
func (e *CommandError) Unwrap() error { return e.Err }

// Run traces one run of opts.Command and writes the trace. The app inherits
// stdin, stdout, stderr and the environment. Run waits for any child of this
// process (wait4(-1)), so nothing else in the process may start children
// while it runs.
func Run(opts Options) (*Result, error) {
	if len(syscallTable) == 0 {
		return nil, fmt.Errorf("dlbundle trace supports linux/amd64 and linux/arm64 only (this is linux/%s)", runtime.GOARCH)
	}
	if len(opts.Command) == 0 {
		return nil, errors.New("no command given: dlbundle trace [-o FILE] -- CMD [ARGS...]")
	}
	stderr := opts.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	stub := opts.Stub
	rank := LauncherRank(getenv)
	outPath := OutputPath(opts.Output, rank)
	// Output first: an unwritable path fails before the app starts.
	out, err := createOutput(outPath)
	if err != nil {
		return nil, err
	}
	path, code, err := ResolveCommand(opts.Command[0])
	if err != nil {
		out.discard()
		return nil, &CommandError{Code: code, Err: err}
	}
	start := time.Now()
	w, err := NewWriter(out.f, newHeader(opts.Command, rank, start))
	if err != nil {
		out.discard()
		return nil, fmt.Errorf("writing %s: %v", outPath, err)
	}
	rec := newRecorder(w, stderr)
	rec.noSummary = opts.Quiet
	recordPathSearch(rec, opts.Command[0], path, os.Getenv("PATH"), start) // as ResolveCommand searched

	exit, predicted, err := traceCommand(stub, path, opts.Command, rec, start, opts.NoPredict)
	if err != nil {
		out.discard()
		return nil, err
	}
	wall := time.Since(start)
	if err := w.Close(exit, wall.Nanoseconds()); err != nil && rec.err == nil {
		rec.err = err
	}
	if rec.err != nil {
		out.discard()
		return nil, fmt.Errorf("writing %s: %v", outPath, rec.err)
	}
	if err := out.commit(); err != nil {
		return nil, err
	}
	if !opts.Quiet {
		rec.stats.print(stderr, outPath, exit, wall)
	}
	return &Result{Exit: exit, Output: outPath, Predicted: predicted}, nil
}

// traceCommand starts the stub under ptrace and follows the app to its end.
// With no stub, the app (path, from ResolveCommand) is started directly and
// the filter injected at its first stop.
func traceCommand(stub []string, path string, command []string, rec *recorder, start time.Time, noPredict bool) (exit int, predicted int64, err error) {
	// ptrace requests are accepted only from the thread that attached.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	argv0, argv := path, command
	var prog []unix.SockFilter
	if stub != nil {
		argv0, argv = stub[0], append(append([]string{}, stub...), command...)
	} else if prog, err = filterProgram(); err != nil {
		return 0, 0, fmt.Errorf("assembling the seccomp filter: %v", err)
	}
	defer quietChildStops()()
	sigs := &signalLog{}
	fwd := make(chan os.Signal, 4)
	signal.Notify(fwd, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(fwd)

	// syscall.ForkExec, not os/exec: os.StartProcess first checks once per
	// process that pidfds work, which costs a clone of dlbundle and four
	// more calls (~0.2 ms of every pilot's start); the tracer waits with
	// wait4(-1) and needs no pidfd.
	pid, err := syscall.ForkExec(argv0, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Ptrace: true},
	})
	if err != nil {
		err = &os.PathError{Op: "fork/exec", Path: argv0, Err: err} // as os/exec says it
		if errors.Is(err, syscall.EPERM) {
			return 0, 0, ptraceDenied(err)
		}
		var errno syscall.Errno
		if stub == nil && errors.As(err, &errno) {
			// The app's execve failed (ENOEXEC, EACCES...): recorded as the
			// stub's failed execve was, with a shell's exit code.
			fmt.Fprintf(os.Stderr, "dlbundle trace: cannot execute %s: %v\n", path, errno)
			rec.emit(&Event{PID: 0, Op: OpExec, Syscall: "execve", Path: absPath(path), Err: errnoName(errno)}, start)
			if errno == syscall.ENOENT {
				return ExitNotFound, 0, nil
			}
			return ExitNotExecutable, 0, nil
		}
		return 0, 0, fmt.Errorf("starting %s: %v", argv0, err)
	}
	done := make(chan struct{})
	defer close(done)
	go forwardSignals(fwd, done, pid, sigs)

	t := &tracer{start: start, rec: rec, mainPid: pid, sigSeen: sigs,
		tasks: map[int]*task{pid: {tgid: pid}}, listings: map[dirKey]*listing{}, exact: noPredict,
		inject: prog, appPath: path}
	exit, err = t.loop()
	if err != nil {
		return 0, 0, err
	}
	survivors, left := t.detachSurvivors(2 * time.Second)
	if len(survivors) > 0 {
		// Their seccomp filter stays: without a tracer, filtered calls fail.
		// Name each by its program: a user acts on "orted", not on a pid.
		var named []string
		for _, p := range survivors {
			exe, _ := os.Readlink("/proc/" + strconv.Itoa(p) + "/exe")
			named = append(named, fmt.Sprintf("%d (%s)", p, exe))
		}
		rec.warn("%d process(es) outlived the app and now run untraced: %s; their file system calls "+
			"fail with ENOSYS from now on: stop them (kill %v). What they would load is not in the trace; if the "+
			"job needs it, fold a run's report in (dlbundle report, then dlbundle build --from). An MPI daemon "+
			"(orted, prted): trace under the launcher instead, mpirun -np 1 dlbundle trace -- APP.",
			len(survivors), strings.Join(named, ", "), survivors)
	}
	if left > 0 {
		rec.warn("%d task(s) that outlived the app could not be detached; they are killed", left)
	}
	return exit, t.predicted, nil
}

// ptraceDenied explains a refused ptrace and what to do about it.
func ptraceDenied(err error) error {
	scope := "unknown"
	if b, rerr := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); rerr == nil {
		scope = strings.TrimSpace(string(b))
	}
	return fmt.Errorf("ptrace is not permitted here (%v; kernel.yama.ptrace_scope=%s). "+
		"dlbundle trace needs ptrace for the pilot run only: run it where ptrace is allowed "+
		"(ptrace_scope 0-2; a container needs CAP_SYS_PTRACE and a seccomp profile that allows ptrace, "+
		"e.g. docker run --cap-add SYS_PTRACE), or ask the admins to lower kernel.yama.ptrace_scope", err, scope)
}

// signalPending reports whether sig is pending for process pid (not yet
// delivered, so not yet seen by the tracer).
func signalPending(pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "ShdPnd:"); ok {
			mask, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

// signalLog remembers when a tracee last received SIGINT or SIGTERM, so that
// a signal the terminal already sent to the app's process group (Ctrl-C) is
// not delivered a second time by forwarding.
type signalLog struct{ sigint, sigterm atomic.Int64 }

func (l *signalLog) slot(s syscall.Signal) *atomic.Int64 {
	switch s {
	case syscall.SIGINT:
		return &l.sigint
	case syscall.SIGTERM:
		return &l.sigterm
	}
	return nil
}

func (l *signalLog) saw(s syscall.Signal) {
	if a := l.slot(s); a != nil {
		a.Store(time.Now().UnixNano())
	}
}

// forwardSignals passes SIGINT/SIGTERM received by dlbundle to the app,
// unless the app got the same signal directly at about the same time (Ctrl-C
// goes to the whole foreground process group: the app must not get it twice).
func forwardSignals(ch <-chan os.Signal, done <-chan struct{}, pid int, seen *signalLog) {
	const window = 250 * time.Millisecond
	for {
		select {
		case <-done:
			return
		case s := <-ch:
			sig := s.(syscall.Signal)
			at := time.Now().UnixNano()
			select {
			case <-done:
				return
			case <-time.After(window):
			}
			if seen.slot(sig).Load() < at-int64(window) && !signalPending(pid, sig) {
				_ = syscall.Kill(pid, sig)
			}
		}
	}
}

// absPath is p made absolute against the cwd, as the kernel resolves it.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return filepath.Clean(p)
}

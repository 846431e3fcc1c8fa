package startup

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Ranks are started "at the same instant" through a gate: each rank is first
// this very binary, which reports ready and blocks on a pipe; when every rank
// is ready the harness closes the pipe and they all exec the real command at
// once. Process creation therefore happens before the clock starts.

const gateEnv = "DLBUNDLE_BENCH_GATE"

// Gate file descriptors in the rank: 3 is read until EOF (the start signal),
// 4 gets one byte once the rank is waiting.
const (
	gateStartFD = 3
	gateReadyFD = 4
)

// MaybeRunGate turns the process into a rank's gate when the harness started
// it as one; it never returns then. Call it first in main (and TestMain).
func MaybeRunGate() {
	if os.Getenv(gateEnv) != "1" {
		return
	}
	argv := os.Args[1:]
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, gateEnv+"=") })
	_, _ = unix.Write(gateReadyFD, []byte{1})
	_ = unix.Close(gateReadyFD)
	var b [1]byte
	for {
		n, err := unix.Read(gateStartFD, b[:])
		if n == 0 && err == nil || err != nil && err != unix.EINTR {
			break
		}
	}
	_ = unix.Close(gateStartFD)
	err := unix.Exec(argv[0], argv, env)
	fmt.Fprintf(os.Stderr, "bench gate: exec %s: %v\n", argv[0], err)
	os.Exit(127)
}

// launch is one command run by every rank.
type launch struct {
	argv []string // argv[0] must be an absolute path
	env  []string
	dir  string
	// expect must appear in every rank's standard output (proof it did its work).
	expect string
}

// rankRun is what N ranks of one launch did.
type rankRun struct {
	wall  time.Duration   // release of the gate until the last rank exited
	cpu   time.Duration   // user + system time of all ranks (and the children they waited for)
	ranks []time.Duration // per rank, release until exit
	err   error           // first rank failure, with its output
}

func (r rankRun) mean() time.Duration {
	var sum time.Duration
	for _, d := range r.ranks {
		sum += d
	}
	if len(r.ranks) == 0 {
		return 0
	}
	return sum / time.Duration(len(r.ranks))
}

// runRanks starts n ranks of l behind the gate, releases them together and
// waits for all of them.
func runRanks(ctx context.Context, n int, l launch) rankRun {
	self, err := os.Executable()
	if err != nil {
		return rankRun{err: err}
	}
	if !filepath.IsAbs(l.argv[0]) {
		return rankRun{err: fmt.Errorf("bench: rank command %q must be an absolute path", l.argv[0])}
	}
	startR, startW, err := os.Pipe()
	if err != nil {
		return rankRun{err: err}
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		startR.Close()
		startW.Close()
		return rankRun{err: err}
	}
	defer readyR.Close()
	defer startW.Close()

	type rank struct {
		cmd            *exec.Cmd
		stdout, stderr bytes.Buffer
		done           chan time.Time
	}
	ranks := make([]*rank, n)
	var startErr error
	for i := range ranks {
		r := &rank{done: make(chan time.Time, 1)}
		r.cmd = exec.CommandContext(ctx, self, l.argv...)
		r.cmd.Env = append(slices.Clone(l.env), gateEnv+"=1", fmt.Sprintf("DLBUNDLE_BENCH_RANK=%d", i))
		r.cmd.Dir = l.dir
		r.cmd.ExtraFiles = []*os.File{startR, readyW}
		r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
		if startErr = r.cmd.Start(); startErr != nil {
			break
		}
		ranks[i] = r
	}
	startR.Close()
	readyW.Close()
	if startErr != nil {
		startW.Close()
		for _, r := range ranks {
			if r != nil {
				_ = r.cmd.Wait()
			}
		}
		return rankRun{err: fmt.Errorf("bench: starting rank: %w", startErr)}
	}
	// Wait until every gate is blocked (EOF here means all gates wrote or died).
	buf := make([]byte, n)
	got := 0
	for got < n {
		m, err := readyR.Read(buf[got:])
		got += m
		if err != nil {
			break
		}
	}
	for _, r := range ranks {
		go func() {
			_ = r.cmd.Wait()
			r.done <- time.Now()
		}()
	}
	t0 := time.Now()
	startW.Close() // go
	res := rankRun{ranks: make([]time.Duration, n)}
	for i, r := range ranks {
		end := <-r.done
		res.ranks[i] = end.Sub(t0)
		res.wall = max(res.wall, res.ranks[i])
		if ps := r.cmd.ProcessState; ps != nil {
			res.cpu += ps.UserTime() + ps.SystemTime()
		}
		if res.err != nil {
			continue
		}
		switch {
		case r.cmd.ProcessState == nil || !r.cmd.ProcessState.Success():
			res.err = fmt.Errorf("rank %d: %s: %v\n%s%s", i, strings.Join(l.argv, " "), r.cmd.ProcessState, tail(r.stdout.String()), tail(r.stderr.String()))
		case !strings.Contains(r.stdout.String(), l.expect):
			res.err = fmt.Errorf("rank %d: %s: output lacks %q:\n%s%s", i, strings.Join(l.argv, " "), l.expect, tail(r.stdout.String()), tail(r.stderr.String()))
		}
	}
	if ctx.Err() != nil && res.err == nil {
		res.err = fmt.Errorf("bench: ranks of %s: %w", l.argv[0], ctx.Err())
	}
	return res
}

// tail keeps the end of a rank's output for error messages.
func tail(s string) string {
	const keep = 1500
	if len(s) > keep {
		s = "..." + s[len(s)-keep:]
	}
	return s
}

// Package stagetime records where a stage's time goes, when asked to
// (DLBUNDLE_STAGE_TIMING=1): the phases of staging, measured by the process
// itself, printed to stderr by the verb before it starts the app or exits.
// The first-rank benchmark (internal/firstrank, make bench-firstrank) reads
// them; a user can read them too. Off, each call costs one atomic load.
//
// Two kinds of figures:
//   - a phase (Start ... stop) is a stretch of the staging rank's wall time
//     on one goroutine (mkdirs, the ld.so probe, the rename);
//   - a sum (Add, Since) adds durations from many goroutines that run at
//     the same time (the decode workers' decompression, writes, creates):
//     on N cores they can add up to N times the wall time they span.
package stagetime

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Env is the variable that turns recording on.
const Env = "DLBUNDLE_STAGE_TIMING"

var on atomic.Bool

// EnableFromEnv turns recording on when Env is set (not "" or "0").
// Called by the verbs that stage; nothing reads the variable at init.
func EnableFromEnv() {
	if v := os.Getenv(Env); v != "" && v != "0" {
		on.Store(true)
		rec.mu.Lock()
		if rec.start.IsZero() {
			rec.start = time.Now()
		}
		rec.mu.Unlock()
	}
}

// On reports whether recording is on (callers skip their time.Now when not).
func On() bool { return on.Load() }

type acc struct {
	d     time.Duration
	cpu   time.Duration // a phase: the process's CPU time; a sum: the threads'
	n     int64
	bytes int64
	sum   bool // added by many goroutines (a sum), not a phase
	order int
}

var rec struct {
	mu    sync.Mutex
	start time.Time
	m     map[string]*acc
}

func get(name string, sum bool) *acc {
	if rec.m == nil {
		rec.m = map[string]*acc{}
	}
	a := rec.m[name]
	if a == nil {
		a = &acc{sum: sum, order: len(rec.m)}
		rec.m[name] = a
	}
	return a
}

// Start begins phase name; the returned function ends it. Off, it returns
// a function that does nothing.
func Start(name string) func() {
	if !on.Load() {
		return func() {}
	}
	t0, c0 := time.Now(), clock(unix.CLOCK_PROCESS_CPUTIME_ID)
	return func() {
		d, c := time.Since(t0), clock(unix.CLOCK_PROCESS_CPUTIME_ID)-c0
		rec.mu.Lock()
		a := get(name, false)
		a.d += d
		a.cpu += c
		a.n++
		rec.mu.Unlock()
	}
}

func clock(id int32) time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(id, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// Mark is a point in time and in the calling thread's CPU time (Now).
type Mark struct {
	wall time.Time
	cpu  time.Duration
}

// Now is the time and the thread's CPU time when recording is on, else
// the zero Mark (no clock read). The thread's CPU time means something
// only on a goroutine locked to its thread (Worker).
func Now() Mark {
	if !on.Load() {
		return Mark{}
	}
	return Mark{time.Now(), clock(unix.CLOCK_THREAD_CPUTIME_ID)}
}

// Since adds the wall and CPU time since m (from Now) to the sum name,
// with bytes.
func Since(name string, m Mark, bytes int64) {
	if m.wall.IsZero() || !on.Load() {
		return
	}
	d, c := time.Since(m.wall), clock(unix.CLOCK_THREAD_CPUTIME_ID)-m.cpu
	if c < 0 || c > d { // the goroutine changed threads: no CPU figure
		c = 0
	}
	rec.mu.Lock()
	a := get(name, true)
	a.d += d
	a.cpu += c
	a.n++
	a.bytes += bytes
	rec.mu.Unlock()
}

// Worker locks the calling goroutine to its thread while recording is on,
// so that its sums' CPU times are its own; the returned function unlocks.
func Worker() func() {
	if !on.Load() {
		return func() {}
	}
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}

// Report writes what was recorded, one line per phase or sum in the order
// first seen (wall time, CPU time, count, bytes), then a line "clock" with
// the wall clock at recording's start and now (Unix ns), from which a
// caller that timed the whole process tells the Go runtime's start and the
// app's own time apart:
//
//	dlbundle-timing: phase stage lock 0.012 ms 0.010 cpu 1 0
//	dlbundle-timing: sum workers: decode (zstd) 80.100 ms 75.020 cpu 412 51234567
//	dlbundle-timing: clock 1733500000000000000 1733500000123456789
//
// Nothing when recording is off.
func Report(w io.Writer) {
	if !on.Load() {
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	names := make([]string, 0, len(rec.m))
	for n := range rec.m {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return rec.m[names[i]].order < rec.m[names[j]].order })
	for _, n := range names {
		a := rec.m[n]
		kind := "phase"
		if a.sum {
			kind = "sum"
		}
		fmt.Fprintf(w, "dlbundle-timing: %s %s %.3f ms %.3f cpu %d %d\n", kind, n, float64(a.d)/1e6, float64(a.cpu)/1e6, a.n, a.bytes)
	}
	fmt.Fprintf(w, "dlbundle-timing: clock %d %d\n", rec.start.UnixNano(), time.Now().UnixNano())
}

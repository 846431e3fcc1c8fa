package trace

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"time"

	"github.com/dlbundle/dlbundle/internal/units"
)

// recorder writes events and keeps the figures of the end-of-run summary.
type recorder struct {
	w       *Writer
	err     error // first write error; the run goes on, the trace is then refused
	stats   stats
	warnOut io.Writer
	warned  int
	// noSummary: -q, the summary's maps are not kept (a map update and a
	// string per event, in the tracer's path while the tracee waits).
	noSummary bool
}

// stats are the figures of the summary printed at the end of a run.
type stats struct {
	processes int
	events    int64
	files     map[string]int64 // files opened for reading -> size
	missing   map[string]bool  // paths looked up that did not exist
	dirs      map[string]int   // lookups per parent directory
}

func newRecorder(w *Writer, warnOut io.Writer) *recorder {
	return &recorder{w: w, warnOut: warnOut, stats: stats{processes: 1,
		files: map[string]int64{}, missing: map[string]bool{}, dirs: map[string]int{}}}
}

func (r *recorder) emit(ev *Event, start time.Time) {
	ev.T = time.Since(start).Nanoseconds()
	if err := r.w.Event(ev); err != nil && r.err == nil {
		r.err = err
	}
	if !r.noSummary {
		r.stats.add(ev)
	}
}

// warn reports a problem of the tracer (not of the app), at most a few times.
func (r *recorder) warn(format string, args ...any) {
	if r.warned++; r.warned <= 5 && r.warnOut != nil {
		fmt.Fprintf(r.warnOut, "dlbundle trace: warning: "+format+"\n", args...)
	}
}

func (s *stats) add(ev *Event) {
	s.events++
	switch ev.Op {
	case OpOpen, OpStat, OpAccess, OpReadlink, OpExec:
	default:
		return
	}
	if ev.Path == "" {
		return
	}
	s.dirs[filepath.Dir(ev.Path)]++
	switch {
	case ev.Err == "ENOENT" || ev.Err == "ENOTDIR":
		s.missing[ev.Path] = true
	case ev.Op == OpOpen && ev.OK() && !ev.Dir && ev.Size != nil:
		s.files[ev.Path] = *ev.Size
	}
}

// print writes the short end-of-run summary.
func (s *stats) print(w io.Writer, out string, exit int, wall time.Duration) {
	var bytes int64
	for _, n := range s.files {
		bytes += n
	}
	fmt.Fprintf(w, "dlbundle trace: wrote %s (exit status %d, %.2fs)\n", out, exit, wall.Seconds())
	fmt.Fprintf(w, "  %d processes, %d events, %d files opened (%s), %d missing paths looked up\n",
		s.processes, s.events, len(s.files), units.Bytes(bytes), len(s.missing))
	type dc struct {
		dir string
		n   int
	}
	var top []dc
	for d, n := range s.dirs {
		top = append(top, dc{d, n})
	}
	sort.Slice(top, func(i, j int) bool {
		if top[i].n != top[j].n {
			return top[i].n > top[j].n
		}
		return top[i].dir < top[j].dir
	})
	if len(top) > 5 {
		top = top[:5]
	}
	if len(top) > 0 {
		fmt.Fprintln(w, "  top directories (lookups):")
	}
	for _, d := range top {
		fmt.Fprintf(w, "  %7d  %s\n", d.n, d.dir)
	}
}

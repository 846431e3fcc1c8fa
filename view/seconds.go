package view

import (
	"fmt"
	"time"

	"github.com/dlbundle/dlbundle/internal/units"
)

// StartupModel is the page's model of start-up at width, the one the demo
// and the start-up benchmark project with (bench/startup: "one server
// serialising every operation", the linear growth the seeds measured on
// Lustre): every lookup on the shared file system waits its turn at one
// metadata server, so N ranks starting together are done with their lookups
// after N x lookups x Service. Every parameter is shown on the page with its
// source.
type StartupModel struct {
	Service      time.Duration // one metadata operation at the server
	Nodes        int
	RanksPerNode int
	// ReadAll is the shared file system's bandwidth for the image reads,
	// in all: every node reads its own copy once, so N nodes wait for N
	// copies through it (the demo's model; a file system striped over many
	// servers reads faster, sbcast reads one copy).
	ReadAll float64 // bytes per second
	// StageRate is the rate at which a node's first rank writes the image's
	// files into the stage (decompressing, checking digests): bytes of files
	// per second. The node's other ranks wait for it.
	StageRate float64
	// ExecFixed is what exec adds to each rank on a warm stage.
	ExecFixed time.Duration
	// StopCost and PilotFixed are what ptrace adds to the pilot: per event,
	// and once per run; the pilot's time minus them estimates the untraced
	// start-up when no untraced time was given.
	StopCost   time.Duration
	PilotFixed time.Duration
}

// DefaultModel is the demo's configuration and the benchmark's figures.
var DefaultModel = StartupModel{
	Service:      10 * time.Microsecond, // make demo's slowfs service time (bench/startup DemoOptions)
	Nodes:        1000,                  // the demo's projection: 1,000 nodes x 24 ranks
	RanksPerNode: 24,
	ReadAll:      1e9,                       // the demo's and the benchmark's projection: 1 GB/s in all
	StageRate:    75.3 * (1 << 20) / 0.0857, // docs/benchmarks.md, round 4: a tmpfs stage of numpy's image, 75.3 MiB of files in 85.7 ms
	ExecFixed:    3060 * time.Microsecond,   // docs/benchmarks.md, round 4: exec +3.06 ms over /bin/true (warm)
	StopCost:     34200 * time.Nanosecond,   // docs/bench/trace.md: per traced call (20,000 failing stats, best of 5)
	PilotFixed:   3100 * time.Microsecond,   // docs/bench/trace.md: trace -- /bin/true minus /bin/true
}

// Seconds is the page's answer to "how long does start-up take per rank,
// natively and under exec, at 1 and N ranks": measured figures, then the
// model's estimates built on them.
type Seconds struct {
	Model StartupModel

	PilotNS      int64 // measured: the traced run (ptrace-slowed)
	EventsPerRun int   // measured: events of one pilot run
	// Untraced is the app's start-up without a tracer: measured (given with
	// --untraced) or the pilot minus ptrace's estimated share.
	UntracedNS       int64
	UntracedMeasured bool
	PtraceNS         int64 // estimated share of ptrace in PilotNS (0 when Untraced was measured)

	NativeLookups int     // measured (trace): shared-file-system lookups per rank natively
	ExecLookups   float64 // estimated (trace + image): per rank under exec; < 0 unknown
	ImageBytes    int64   // measured: the image's size
	FileBytes     int64   // measured: the bytes of the image's files (what a stage writes)

	Cases []StartupCase
}

// StartupCase is one estimate of a rank's start-up: the untraced start-up,
// plus the metadata server's queue, plus (under exec) the image read and
// exec's fixed cost.
type StartupCase struct {
	Name  string
	Ranks int
	Exec  bool
	CPU   time.Duration // the untraced start-up (CPU and the pilot node's own waits)
	MDS   time.Duration // waiting for the metadata server (model)
	Read  time.Duration // every node reading its copy of the image (model)
	Stage time.Duration // writing its files into the node's stage (model)
	Fixed time.Duration // exec's fixed cost (measured on the benchmark machine)
}

// Nodes is how many nodes the case's ranks fill.
func (c StartupCase) Nodes(m StartupModel) int {
	return max((c.Ranks+m.RanksPerNode-1)/max(m.RanksPerNode, 1), 1)
}

// Total is the case's start-up per rank.
func (c StartupCase) Total() time.Duration { return c.CPU + c.MDS + c.Read + c.Stage + c.Fixed }

// Formula says how the case was computed, with its numbers.
func (c StartupCase) Formula(s *Seconds) string {
	lookups := float64(s.NativeLookups)
	if c.Exec {
		lookups = s.ExecLookups
	}
	f := fmt.Sprintf("%s untraced start-up + %s x %.0f lookups x %v at one metadata server = %s",
		dur(c.CPU), plural(c.Ranks, "rank", "ranks"), lookups, s.Model.Service, dur(c.MDS))
	if c.Exec {
		f += fmt.Sprintf(" + %s x the image's %s through %s in all = %s + staging its %s of files at %s = %s + exec's fixed %s",
			plural(c.Nodes(s.Model), "node", "nodes"), units.Bytes(s.ImageBytes), rate(s.Model.ReadAll), dur(c.Read), units.Bytes(s.FileBytes), rate(s.Model.StageRate), dur(c.Stage), dur(c.Fixed))
	}
	return f + fmt.Sprintf(": %s per rank", dur(c.Total()))
}

// seconds computes the page's start-up figures, or nil without a trace.
// untraced is a measured untraced start-up (0: estimate it from the pilot).
func (f *Figures) seconds(m StartupModel, untraced time.Duration, imageBytes int64) *Seconds {
	if f.Runs == 0 || f.Savings == nil {
		return nil
	}
	s := &Seconds{Model: m, PilotNS: f.Duration, EventsPerRun: f.Events / f.Runs, ImageBytes: imageBytes, FileBytes: f.RawBytes,
		NativeLookups: f.Savings.SharedNative, ExecLookups: float64(f.Savings.SharedExec)}
	if untraced > 0 {
		s.UntracedNS, s.UntracedMeasured = int64(untraced), true
	} else {
		s.PtraceNS = min(int64(s.EventsPerRun)*int64(m.StopCost)+int64(m.PilotFixed), s.PilotNS*9/10)
		s.UntracedNS = s.PilotNS - s.PtraceNS
	}
	cpu := time.Duration(s.UntracedNS)
	n := m.Nodes * m.RanksPerNode
	mds := func(ranks int, lookups float64) time.Duration {
		return time.Duration(float64(ranks) * lookups * float64(m.Service))
	}
	read := func(nodes int) time.Duration {
		return time.Duration(float64(nodes) * float64(imageBytes) / m.ReadAll * float64(time.Second))
	}
	stage := time.Duration(0)
	if m.StageRate > 0 {
		stage = time.Duration(float64(f.RawBytes) / m.StageRate * float64(time.Second))
	}
	s.Cases = append(s.Cases, StartupCase{Name: "natively, 1 rank", Ranks: 1, CPU: cpu, MDS: mds(1, float64(s.NativeLookups))})
	if s.ExecLookups >= 0 && imageBytes > 0 {
		s.Cases = append(s.Cases, StartupCase{Name: "under exec, 1 rank", Ranks: 1, Exec: true, CPU: cpu, MDS: mds(1, s.ExecLookups), Read: read(1), Stage: stage, Fixed: m.ExecFixed})
	}
	s.Cases = append(s.Cases, StartupCase{Name: fmt.Sprintf("natively, %s ranks", count(n)), Ranks: n, CPU: cpu, MDS: mds(n, float64(s.NativeLookups))})
	if s.ExecLookups >= 0 && imageBytes > 0 {
		s.Cases = append(s.Cases, StartupCase{Name: fmt.Sprintf("under exec, %s ranks", count(n)), Ranks: n, Exec: true, CPU: cpu, MDS: mds(n, s.ExecLookups), Read: read(m.Nodes), Stage: stage, Fixed: m.ExecFixed})
	}
	return s
}

// dur prints a duration in the unit that suits it: µs, ms, s, min, h.
func dur(d time.Duration) string {
	switch {
	case d >= 2*time.Hour:
		return fmt.Sprintf("%.1f h", d.Hours())
	case d >= 2*time.Minute:
		return fmt.Sprintf("%.1f min", d.Minutes())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

// rate prints bytes per second in decimal units, as storage is sold.
func rate(bps float64) string {
	if bps >= 1e9 {
		return fmt.Sprintf("%.3g GB/s", bps/1e9)
	}
	return fmt.Sprintf("%.3g MB/s", bps/1e6)
}

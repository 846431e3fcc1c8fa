package startup

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dlbundle/dlbundle/examples/loadtest"
	"github.com/dlbundle/dlbundle/internal/benchhost"
	"github.com/dlbundle/dlbundle/internal/slowfs"
)

// Modes of a run.
const (
	ModeNative = "native"        // from the slowfs mount, no tool
	ModeIdeal  = "ideal"         // from a tmpfs copy, no tool: a file system that costs nothing
	ModeCold   = "dlbundle-cold" // dlbundle exec, empty stage dir: the first rank stages
	ModeWarm   = "dlbundle-warm" // dlbundle exec, stage reused
	// ModeEnv: stage reused, no launcher: the ranks start with the variables
	// `dlbundle env` printed, as the Slurm and Flux plugins give every task
	// (one env run per node and step, before the ranks; not in the time).
	ModeEnv = "dlbundle-env"
)

// Options say what to measure.
type Options struct {
	Scenarios []string // loadtest, python, numpy, spack
	Ranks     []int    // concurrent ranks, e.g. 1, 4, 16, 64
	Loadtest  loadtest.Config
	// PythonImports replaces StdlibImports (smoke tests use a small set).
	PythonImports string
	// Service is the metadata service time; 0 calibrates it per scenario so
	// that native start-up of one rank is Slowdown times the ideal.
	Service  time.Duration
	Slowdown float64
	// MinService is the floor of the calibrated service time: where the FUSE
	// round trip alone already makes native start-up Slowdown times the ideal,
	// the metadata server still costs something.
	MinService time.Duration
	// ReadPerMiB is the cost of file data on the shared data path.
	ReadPerMiB time.Duration
	// Calibrate is how many runs the N=1 calibration takes the median of.
	Calibrate int
	// Dlbundle is the dlbundle binary; empty skips the dlbundle modes.
	Dlbundle string
	// WorkDir holds the slowfs source tree, mount point and traces;
	// ShmDir (a tmpfs) the ideal copies and stage dirs.
	WorkDir, ShmDir string
	// Timeout bounds one launch of N ranks.
	Timeout time.Duration
	Log     io.Writer
	// Skip, when set, leaves out the runs it returns true for (the demo
	// measures ideal and cold at one rank only).
	Skip func(mode string, ranks int) bool
}

// DefaultOptions is what `make bench` measures.
func DefaultOptions() Options {
	return Options{
		Scenarios:  []string{"loadtest", "python", "numpy", "spack"},
		Ranks:      []int{1, 4, 16, 64},
		Loadtest:   loadtest.Default(),
		Slowdown:   5,
		MinService: 5 * time.Microsecond,
		ReadPerMiB: time.Millisecond, // ~1 GiB/s shared
		Calibrate:  3,
		ShmDir:     "/dev/shm",
		Timeout:    3 * time.Minute,
		Log:        os.Stderr,
	}
}

// Row is one measurement: N ranks of one scenario in one mode.
type Row struct {
	Scenario  string
	Mode      string
	Ranks     int
	Wall      time.Duration // release until the last rank exited
	Spread    time.Duration // slowest minus fastest Wall of the runs Wall is the median of (0: one run)
	CPU       time.Duration // user + system time of all ranks of the run Wall is from
	MeanRank  time.Duration
	MetaOps   uint64 // on slowfs, all ranks together
	Reads     uint64
	BytesRead uint64
	Service   time.Duration
	Err       string
	// TopPaths are the paths the dlbundle-warm ranks still looked up on the
	// shared tree (the goal is none).
	TopPaths []slowfs.PathCount
}

// OpsPerRank is metadata operations on the shared tree per rank.
func (r Row) OpsPerRank() float64 { return float64(r.MetaOps) / float64(r.Ranks) }

// Calibration records how the service time of a scenario was chosen.
type Calibration struct {
	Scenario   string
	Ideal      time.Duration // N=1 from tmpfs
	NativeFree time.Duration // N=1 from slowfs with a free metadata server
	OpsPerRank uint64        // metadata ops of one native rank
	Service    time.Duration
	ImageBytes int64         // dlbundle image size, when built
	RawBytes   int64         // the image's regular files, decoded (what a stage writes)
	WriteFloor time.Duration // cp -a of those files from the page cache into tmpfs (median of 3): writing them, with nothing to decode
	TraceTime  time.Duration // dlbundle trace (pilot) wall time
	BuildTime  time.Duration
	Err        string // why the dlbundle modes did not run
}

// Results are everything one run measured.
type Results struct {
	Date         time.Time
	Machine      string
	Load         [2]string // /proc/loadavg (1-minute) at start and end: how shared the machine was
	Options      Options
	Calibrations []Calibration
	Rows         []Row
}

// Run measures every scenario in opts. Errors of single launches are kept in
// their rows; an error is returned only when nothing can be measured.
func Run(ctx context.Context, opts Options) (*Results, error) {
	res := &Results{Date: time.Now().UTC(), Machine: benchhost.Machine(), Options: opts}
	res.Load[0] = loadAverage()
	defer func() { res.Load[1] = loadAverage() }()
	logf := func(format string, a ...any) {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, format+"\n", a...)
		}
	}
	work, err := os.MkdirTemp(opts.WorkDir, "startup-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	shm, err := os.MkdirTemp(opts.ShmDir, "startup-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: tmpfs scratch in %s: %w", opts.ShmDir, err)
	}
	defer os.RemoveAll(shm)
	if opts.Dlbundle != "" {
		// A private copy: a concurrent `make` must not replace the binary
		// while ranks exec it. It stays off slowfs, as if installed node-locally.
		cp := filepath.Join(work, "dlbundle")
		if err := copyTree(ctx, opts.Dlbundle, cp); err != nil {
			return nil, err
		}
		opts.Dlbundle = cp
	}
	src, mnt := filepath.Join(work, "shared"), filepath.Join(work, "mnt")
	for _, d := range []string{src, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	fsys, err := slowfs.Mount(src, mnt, slowfs.Costs{})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := fsys.Unmount(); err != nil {
			logf("%v", err)
		}
		logf("slowfs at unmount: %v", fsys.Stats())
	}()

	for _, name := range opts.Scenarios {
		sc, err := opts.scenario(name)
		if err != nil {
			return nil, err
		}
		b := bench{opts: opts, fsys: fsys, sc: sc, src: src, mnt: mnt, shm: shm, work: work, logf: logf}
		if err := b.run(ctx, res); err != nil {
			return res, err
		}
	}
	return res, nil
}

func (o Options) scenario(name string) (scenario, error) {
	imports := o.PythonImports
	if imports == "" {
		imports = StdlibImports
	}
	switch name {
	case "loadtest":
		return loadtestScenario(o.Loadtest), nil
	case "python":
		return pythonScenario("python", imports, false), nil
	case "numpy":
		return pythonScenario("numpy", "numpy", true), nil
	case "spack":
		return spackScenario(SpackPackages), nil
	}
	return scenario{}, fmt.Errorf("bench: unknown scenario %q; use loadtest, python, numpy or spack", name)
}

// bench measures one scenario.
type bench struct {
	opts                Options
	fsys                *slowfs.FS
	sc                  scenario
	src, mnt, shm, work string
	logf                func(string, ...any)
	image, stageParent  string
	cal                 Calibration
	native, ideal       launch
}

func (b *bench) run(ctx context.Context, res *Results) error {
	name := b.sc.name
	b.cal.Scenario = name
	b.logf("== %s: building the app tree", name)
	tree := filepath.Join(b.src, name)
	copyDir := filepath.Join(b.shm, name)
	if b.sc.prepareAt != nil {
		if err := b.sc.prepareAt(ctx, tree, filepath.Join(b.mnt, name)); err != nil {
			return err
		}
		if err := b.sc.prepareAt(ctx, copyDir, copyDir); err != nil {
			return err
		}
	} else {
		if err := b.sc.prepare(ctx, tree); err != nil {
			return err
		}
		if err := copyTree(ctx, tree, copyDir); err != nil {
			return err
		}
	}
	b.native, b.ideal = b.sc.command(filepath.Join(b.mnt, name)), b.sc.command(copyDir)

	if err := b.calibrate(ctx); err != nil {
		return err
	}
	b.logf("%s: service time %v (ideal %v, native with a free server %v = %.1fx ideal, %d metadata ops/rank)",
		name, b.cal.Service, b.cal.Ideal.Round(time.Microsecond), b.cal.NativeFree.Round(time.Microsecond),
		ratio(b.cal.NativeFree, b.cal.Ideal), b.cal.OpsPerRank)

	dlb := b.opts.Dlbundle != ""
	if dlb {
		if err := b.bundle(ctx); err != nil {
			b.cal.Err = err.Error()
			b.logf("%s: dlbundle modes skipped: %v", name, err)
			dlb = false
		}
	}
	res.Calibrations = append(res.Calibrations, b.cal)
	for _, n := range b.opts.Ranks {
		add := func(mode string, l launch) bool {
			if b.opts.Skip != nil && b.opts.Skip(mode, n) {
				return false
			}
			res.Rows = append(res.Rows, b.measure(ctx, mode, n, l))
			return true
		}
		add(ModeNative, b.native)
		add(ModeIdeal, b.ideal)
		if dlb {
			stage := filepath.Join(b.stageParent, fmt.Sprintf("n%d", n))
			l := b.execLaunch(stage)
			if !add(ModeCold, l) {
				// Warm runs need the stage a cold run leaves: one rank makes it,
				// unmeasured (a failure shows in the warm row).
				runRanks(ctx, 1, asJob(l, ModeCold))
			}
			add(ModeWarm, l)
			if b.opts.Skip == nil || !b.opts.Skip(ModeEnv, n) {
				if el, err := b.envLaunch(ctx, stage); err != nil {
					res.Rows = append(res.Rows, Row{Scenario: b.sc.name, Mode: ModeEnv, Ranks: n, Err: err.Error()})
				} else {
					add(ModeEnv, el)
				}
			}
		}
	}
	return nil
}

// measure runs n ranks of l in mode with the scenario's costs and returns the row.
func (b *bench) measure(ctx context.Context, mode string, n int, l launch) Row {
	ctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
	defer cancel()
	b.fsys.RecordPaths(mode == ModeWarm)
	defer b.fsys.RecordPaths(false)
	// Small runs are short and noisy on a shared machine: take the median of
	// a few (cold runs stage afresh each time).
	repeats := 1
	if n <= 4 {
		repeats = max(b.opts.Calibrate, 1)
	}
	var r rankRun
	var s slowfs.Stats
	var runs []rankRun
	for i := 0; i < repeats; i++ {
		if mode == ModeCold {
			_ = os.RemoveAll(stageDirOf(l))
		}
		b.fsys.Reset()
		r = runRanks(ctx, n, asJob(l, mode))
		s = b.fsys.Stats()
		if r.err != nil {
			break
		}
		runs = append(runs, r)
	}
	var spread time.Duration
	if r.err == nil {
		slices.SortFunc(runs, func(a, b rankRun) int { return int(a.wall - b.wall) })
		r = runs[len(runs)/2]
		spread = runs[len(runs)-1].wall - runs[0].wall
	}
	row := Row{Scenario: b.sc.name, Mode: mode, Ranks: n, Wall: r.wall, Spread: spread, CPU: r.cpu, MeanRank: r.mean(),
		MetaOps: s.MetadataOps(), Reads: s.Read, BytesRead: s.BytesRead, Service: b.cal.Service}
	if mode == ModeWarm {
		row.TopPaths = b.fsys.TopPaths(8)
	}
	if r.err != nil {
		row.Err = r.err.Error()
	}
	b.logf("%-9s %-14s N=%-3d last rank %9.3f s  mean %9.3f s  %8.1f metadata ops/rank  %s read%s",
		b.sc.name, mode, n, row.Wall.Seconds(), row.MeanRank.Seconds(), row.OpsPerRank(), mib(row.BytesRead), errNote(row.Err))
	return row
}

// calibrate picks the metadata service time (unless given) from single-rank
// runs: ideal, native with a free server (the FUSE overhead), and the ops one
// native rank makes.
func (b *bench) calibrate(ctx context.Context) error {
	costs := slowfs.Costs{ReadPerMiB: b.opts.ReadPerMiB}
	b.fsys.SetCosts(costs)
	ideal, _, err := b.median(ctx, b.ideal)
	if err != nil {
		return err
	}
	free, ops, err := b.median(ctx, b.native)
	if err != nil {
		return err
	}
	b.cal.Ideal, b.cal.NativeFree, b.cal.OpsPerRank = ideal, free, ops
	b.cal.Service = b.opts.Service
	if b.cal.Service == 0 && ops > 0 {
		want := time.Duration(b.opts.Slowdown * float64(ideal))
		b.cal.Service = max((want-free)/time.Duration(ops), b.opts.MinService, time.Microsecond).Round(time.Microsecond)
	}
	costs.Metadata = b.cal.Service
	b.fsys.SetCosts(costs)
	return nil
}

// median runs one rank opts.Calibrate times; it returns the median time and
// the metadata ops of the last run.
func (b *bench) median(ctx context.Context, l launch) (time.Duration, uint64, error) {
	var times []time.Duration
	var ops uint64
	for i := 0; i < max(b.opts.Calibrate, 1); i++ {
		b.fsys.Reset()
		r := runRanks(ctx, 1, l)
		if r.err != nil {
			return 0, 0, r.err
		}
		times = append(times, r.wall)
		ops = b.fsys.Stats().MetadataOps()
	}
	slices.Sort(times)
	return times[len(times)/2], ops, nil
}

// bundle makes the dlbundle image: a pilot run traced on the mount, built
// into the shared tree, so that ranks read it from the shared file system.
func (b *bench) bundle(ctx context.Context) error {
	costs := b.fsys.Costs()
	b.fsys.SetCosts(slowfs.Costs{}) // the pilot's cost is measured by the trace benchmarks, not here
	defer b.fsys.SetCosts(costs)
	tr := filepath.Join(b.work, b.sc.name+".trace")
	b.image = filepath.Join(b.mnt, b.sc.name+".dlimg")
	argv := append([]string{b.opts.Dlbundle, "trace", "-o", tr, "--"}, b.native.argv...)
	// The three commands a user would type, as they run (the demo's screen
	// says what they are).
	b.logf("%s: $ %s", b.sc.name, strings.Join(argv, " "))
	t0 := time.Now()
	if err := b.tool(ctx, argv, b.native.env); err != nil {
		return err
	}
	b.cal.TraceTime = time.Since(t0)
	t0 = time.Now()
	// The shared tree may sit under /tmp, which build leaves out by default.
	build := []string{b.opts.Dlbundle, "build", "--include", b.mnt, "-o", filepath.Join(b.src, b.sc.name+".dlimg"), tr}
	b.logf("%s: $ %s", b.sc.name, strings.Join(build, " "))
	if err := b.tool(ctx, build, os.Environ()); err != nil {
		return err
	}
	b.cal.BuildTime = time.Since(t0)
	st, err := os.Stat(filepath.Join(b.src, b.sc.name+".dlimg"))
	if err != nil {
		return err
	}
	b.cal.ImageBytes = st.Size()
	b.stageParent, err = os.MkdirTemp(b.shm, b.sc.name+"-stage-")
	if err != nil {
		return err
	}
	b.logf("%s: $ %s    (every rank)", b.sc.name, strings.Join(b.execLaunch(filepath.Join(b.stageParent, "STAGE")).argv, " "))
	return b.writeFloor(ctx, filepath.Join(b.src, b.sc.name+".dlimg"))
}

// writeFloor measures what the first rank's stage cannot do without: putting
// the image's decoded bytes into tmpfs. It extracts the image once (unmeasured)
// and times cp -a of that tree into a fresh tmpfs directory: a stage of a
// stored, uncompressed image could be no faster (the first-rank bound).
func (b *bench) writeFloor(ctx context.Context, image string) error {
	src := filepath.Join(b.shm, b.sc.name+"-raw")
	defer os.RemoveAll(src)
	if err := b.tool(ctx, []string{b.opts.Dlbundle, "extract", image, src}, os.Environ()); err != nil {
		return err
	}
	var raw int64
	err := filepath.WalkDir(src, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			raw += info.Size()
		}
		return err
	})
	if err != nil {
		return err
	}
	var times []time.Duration
	for i := range 3 {
		dst := filepath.Join(b.shm, fmt.Sprintf("%s-copy%d", b.sc.name, i))
		t0 := time.Now()
		err := copyTree(ctx, src, dst)
		times = append(times, time.Since(t0))
		os.RemoveAll(dst)
		if err != nil {
			return err
		}
	}
	slices.Sort(times)
	b.cal.RawBytes, b.cal.WriteFloor = raw, times[1]
	return nil
}

func (b *bench) tool(ctx context.Context, argv, env []string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, b.work
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, tail(string(out)))
	}
	return nil
}

// stageDirOf returns the --stage-dir of a dlbundle exec launch.
func stageDirOf(l launch) string {
	for i, a := range l.argv {
		if a == "--stage-dir" && i+1 < len(l.argv) {
			return l.argv[i+1]
		}
	}
	return ""
}

// jobs numbers the simulated batch jobs: every run of N ranks is one job.
var jobs int

// asJob gives the ranks of one run the job id a batch system would (SLURM_JOB_ID):
// dlbundle exec ranks of a job find the stage through an alias keyed by it, so
// only the first rank of each job reads the image's footer on the shared file
// system. Each run is a new job, so warm runs pay that read once per run.
func asJob(l launch, mode string) launch {
	if mode != ModeCold && mode != ModeWarm {
		return l
	}
	jobs++
	l.env = append(slices.Clone(l.env), fmt.Sprintf("SLURM_JOB_ID=%d", 9000+jobs))
	return l
}

// envLaunch is a rank started natively with the variables `dlbundle env`
// gives for the stage in stage (what the launcher plugins do): run once, as
// a plugin runs it once per node and step, here for a job of its own.
func (b *bench) envLaunch(ctx context.Context, stage string) (launch, error) {
	l := b.native
	env := asJob(launch{env: l.env}, ModeWarm).env
	cmd := exec.CommandContext(ctx, b.opts.Dlbundle, "env", "--format=env0", "--stage-dir", stage, b.image)
	cmd.Env, cmd.Dir = env, b.work
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return l, fmt.Errorf("dlbundle env: %v\n%s", err, tail(stderr.String()))
	}
	vars := map[string]string{}
	unset := map[string]bool{}
	for _, kv := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		} else if kv != "" {
			unset[kv] = true
		}
	}
	l.env = nil
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, set := vars[k]; !set && !unset[k] {
			l.env = append(l.env, kv)
		}
	}
	for k, v := range vars {
		l.env = append(l.env, k+"="+v)
	}
	return l, nil
}

// execLaunch is a rank running the app through dlbundle exec.
func (b *bench) execLaunch(stage string) launch {
	l := b.native
	l.argv = append([]string{b.opts.Dlbundle, "exec", "--stage-dir", stage, b.image, "--"}, b.native.argv...)
	return l
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func errNote(e string) string {
	if e == "" {
		return ""
	}
	first, _, _ := strings.Cut(e, "\n")
	return "  FAILED: " + first
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b) + " ?")[0]
}

// rowsOf returns the rows of one scenario and mode, by rank count.
func (r *Results) rowsOf(scenario, mode string) []Row {
	var out []Row
	for _, row := range r.Rows {
		if row.Scenario == scenario && row.Mode == mode {
			out = append(out, row)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ranks < out[j].Ranks })
	return out
}

func (r *Results) row(scenario, mode string, n int) (Row, bool) {
	for _, row := range r.Rows {
		if row.Scenario == scenario && row.Mode == mode && row.Ranks == n {
			return row, true
		}
	}
	return Row{}, false
}

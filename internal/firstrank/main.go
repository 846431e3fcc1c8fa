// Command firstrank measures the first rank on a node (`make
// bench-firstrank`): `dlbundle exec IMG -- python3 -c 'import APP'` on a cold
// stage (the stage dir empty, the image in the page cache) against its
// floor, measured in the same interleaved rounds:
//
//	floor = the warm run (the same exec on a published stage)
//	      + cp -a of the staged tree into a fresh directory beside it
//	      + reading the image (cat IMG > /dev/null)
//
// which is what any stage that writes the image's files before the app
// starts would still take. Each cold run has DLBUNDLE_STAGE_TIMING=1 set:
// dlbundle prints where its time went (internal/stagetime), and the report
// breaks the first rank's time down into process start, the stage's phases,
// the workers' summed time per kind of work, and the app itself (from the
// exec to the exit, against the warm run's same share).
//
// Apps are Python modules (numpy, torch: Debian's python3-numpy and
// python3-torch); their images are built with trace and build as a user
// would, once per run (or given with -image APP=FILE). -compare runs a
// second dlbundle binary's cold exec in the same rounds (before/after).
//
//	go run ./internal/firstrank -dlbundle bin/dlbundle -out docs/bench/firstrank.md
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlbundle/dlbundle/internal/benchhost"
)

// A run's result: wall time, and (with timing on) what dlbundle printed.
type run struct {
	wall   time.Duration
	cpu    time.Duration // user + system time of the process and its children
	timing *timing
}

// timing is one process's DLBUNDLE_STAGE_TIMING lines.
type timing struct {
	phases map[string]time.Duration
	cpu    map[string]time.Duration
	order  []string
	sums   map[string]bool
	bytes  map[string]int64
	// clock: dlbundle's main (recording's start) and the report, just
	// before execve, as offsets from the fork.
	main, report time.Duration
}

type appBench struct {
	name, image string
	warmDir     string // a stage dir holding the published stage
	staged      string // its sha256-* directory (cp -a's source)
	runs        map[string][]run
}

const (
	kCold    = "cold"
	kWarm    = "warm"
	kCopy    = "cp -a"
	kRead    = "read image"
	kCompare = "cold (compare)"
)

func main() {
	bin := flag.String("dlbundle", "bin/dlbundle", "the dlbundle binary to measure")
	compare := flag.String("compare", "", "another dlbundle binary (e.g. main's build) whose cold exec runs in the same rounds")
	out := flag.String("out", "docs/bench/firstrank.md", "report to write")
	apps := flag.String("apps", "numpy,torch", "Python modules to import (comma-separated)")
	rounds := flag.Int("rounds", 7, "interleaved rounds")
	shm := flag.String("stage-parent", "/dev/shm", "where the stage dirs go (tmpfs: the first rank's usual place)")
	var images multiFlag
	flag.Var(&images, "image", "APP=FILE: use this image for APP instead of building one (repeatable)")
	flag.Parse()
	if err := main1(*bin, *compare, *out, *apps, *shm, *rounds, images); err != nil {
		fmt.Fprintln(os.Stderr, "firstrank:", err)
		os.Exit(1)
	}
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

// env is every run's whole environment: nothing inherited (PYTHON* variables,
// a pyenv on PATH would change what the app loads).
func env(home string, extra ...string) []string {
	return append([]string{"PATH=/usr/bin:/bin", "HOME=" + home, "LC_ALL=C"}, extra...)
}

func main1(bin, compare, out, appList, shm string, rounds int, images []string) error {
	bin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	if compare != "" {
		if compare, err = filepath.Abs(compare); err != nil {
			return err
		}
	}
	work, err := os.MkdirTemp("", "firstrank-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	stages, err := os.MkdirTemp(shm, "firstrank-")
	if err != nil {
		return err
	}
	defer removeAll(stages)
	given := map[string]string{}
	for _, kv := range images {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("-image %q: want APP=FILE", kv)
		}
		given[k] = v
	}
	start := time.Now()
	load0 := benchhost.LoadAvg()
	var benches []*appBench
	for _, app := range strings.Split(appList, ",") {
		b := &appBench{name: app, runs: map[string][]run{}}
		if b.image = given[app]; b.image == "" {
			b.image = filepath.Join(work, app+".dlimg")
			if err := buildImage(bin, work, app, b.image); err != nil {
				return err
			}
		}
		b.warmDir = filepath.Join(stages, app+"-warm")
		if err := os.Mkdir(b.warmDir, 0o700); err != nil {
			return err
		}
		if _, err := b.exec(bin, work, b.warmDir, false); err != nil {
			return err
		}
		m, _ := filepath.Glob(filepath.Join(b.warmDir, "sha256-*"))
		if len(m) != 1 {
			return fmt.Errorf("%s: no published stage in %s", app, b.warmDir)
		}
		b.staged = m[0]
		benches = append(benches, b)
	}
	fmt.Fprintf(os.Stderr, "firstrank: %d rounds of %s\n", rounds, appList)
	for r := range rounds {
		for _, b := range benches {
			kinds := []string{kCold, kWarm, kCopy, kRead}
			if compare != "" {
				kinds = append(kinds, kCompare)
			}
			rand.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
			for _, k := range kinds {
				res, err := b.once(k, bin, compare, work, stages, r)
				if err != nil {
					return fmt.Errorf("%s %s: %w", b.name, k, err)
				}
				b.runs[k] = append(b.runs[k], res)
			}
		}
		fmt.Fprintf(os.Stderr, "firstrank: round %d/%d done (load %s)\n", r+1, rounds, benchhost.LoadAvg())
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	report(w, benches, bin, compare, rounds, start, load0, benchhost.LoadAvg())
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "firstrank: wrote %s\n", out)
	return nil
}

// buildImage traces `python3 -c 'import APP'` and builds its image, as a
// user would.
func buildImage(bin, work, app, out string) error {
	trace := filepath.Join(work, app+".trace")
	for _, argv := range [][]string{
		{bin, "trace", "-q", "-o", trace, "--", "/usr/bin/python3", "-c", "import " + app},
		{bin, "build", "-o", out, trace},
	} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir, cmd.Env = work, env(work)
		if o, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, o)
		}
	}
	return nil
}

// once runs one measurement of kind k in round r.
func (b *appBench) once(k, bin, compare, work, stages string, r int) (run, error) {
	switch k {
	case kCold, kCompare:
		dir := filepath.Join(stages, fmt.Sprintf("%s-cold-%d-%s", b.name, r, strings.ReplaceAll(k, " ", "")))
		if err := os.Mkdir(dir, 0o700); err != nil {
			return run{}, err
		}
		defer removeAll(dir)
		use := bin
		if k == kCompare {
			use = compare
		}
		return b.exec(use, work, dir, true)
	case kWarm:
		return b.exec(bin, work, b.warmDir, true)
	case kCopy:
		dst := filepath.Join(stages, fmt.Sprintf("%s-copy-%d", b.name, r))
		defer removeAll(dst)
		return timed(exec.Command("cp", "-a", b.staged, dst))
	case kRead:
		return timed(exec.Command("sh", "-c", `exec cat "$1" >/dev/null`, "sh", b.image))
	}
	return run{}, fmt.Errorf("unknown kind %q", k)
}

// exec runs the app through dlbundle exec with the stage dir dir; with
// timing, DLBUNDLE_STAGE_TIMING=1 and its lines parsed.
func (b *appBench) exec(bin, work, dir string, withTiming bool) (run, error) {
	e := env(work)
	if withTiming {
		e = append(e, "DLBUNDLE_STAGE_TIMING=1")
	}
	cmd := exec.Command(bin, "exec", "--stage-dir", dir, b.image, "--", "/usr/bin/python3", "-c", "import "+b.name)
	cmd.Dir, cmd.Env = work, e
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	wall := time.Since(t0)
	if err != nil {
		return run{}, fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, tail(stderr.String()))
	}
	res := run{wall: wall, cpu: cpuOf(cmd)}
	if withTiming {
		res.timing = parseTiming(stderr.String(), t0)
	}
	return res, nil
}

func timed(cmd *exec.Cmd) (run, error) {
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	wall := time.Since(t0)
	if err != nil {
		return run{}, fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, tail(string(out)))
	}
	return run{wall: wall, cpu: cpuOf(cmd)}, nil
}

// cpuOf is the user and system time of a finished command.
func cpuOf(cmd *exec.Cmd) time.Duration {
	if cmd.ProcessState == nil {
		return 0
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

func cpus(rs []run) []time.Duration {
	var d []time.Duration
	for _, r := range rs {
		d = append(d, r.cpu)
	}
	return d
}

// parseTiming reads the "dlbundle-timing:" lines (internal/stagetime); nil
// if there are none (a build without them: -compare with an older one).
func parseTiming(s string, fork time.Time) *timing {
	t := &timing{phases: map[string]time.Duration{}, cpu: map[string]time.Duration{}, sums: map[string]bool{}, bytes: map[string]int64{}}
	seen := false
	for _, l := range strings.Split(s, "\n") {
		rest, ok := strings.CutPrefix(l, "dlbundle-timing: ")
		if !ok {
			continue
		}
		seen = true
		f := strings.Fields(rest)
		if len(f) == 3 && f[0] == "clock" {
			a, _ := strconv.ParseInt(f[1], 10, 64)
			c, _ := strconv.ParseInt(f[2], 10, 64)
			t.main = time.Unix(0, a).Sub(fork)
			t.report = time.Unix(0, c).Sub(fork)
			continue
		}
		// KIND NAME... MS "ms" CPU "cpu" N BYTES
		if len(f) < 8 || f[len(f)-5] != "ms" || f[len(f)-3] != "cpu" {
			continue
		}
		name := strings.Join(f[1:len(f)-6], " ")
		ms, _ := strconv.ParseFloat(f[len(f)-6], 64)
		cpu, _ := strconv.ParseFloat(f[len(f)-4], 64)
		by, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
		if _, dup := t.phases[name]; !dup {
			t.order = append(t.order, name)
		}
		t.phases[name] += time.Duration(ms * 1e6)
		t.cpu[name] += time.Duration(cpu * 1e6)
		t.sums[name] = f[0] == "sum"
		t.bytes[name] += by
	}
	if !seen {
		return nil
	}
	return t
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func walls(rs []run) []time.Duration {
	var d []time.Duration
	for _, r := range rs {
		d = append(d, r.wall)
	}
	return d
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }

// report writes the markdown report.
func report(w *bufio.Writer, benches []*appBench, bin, compare string, rounds int, start time.Time, load0, load1 string) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# The first rank on a node: cold stage against its floor\n\n")
	p("Generated by `make bench-firstrank` (internal/firstrank) on %s, %s UTC, %s.\n", hostname(), start.UTC().Format("2006-01-02 15:04"), benchhost.Machine())
	p("Load average (1, 5, 15 min) %s at the start, %s at the end. %d interleaved rounds (the kinds of run in an order drawn afresh each round); every figure is a median.\n\n", load0, load1, rounds)
	p("- **cold**: `dlbundle exec --stage-dir EMPTY IMG -- python3 -c 'import APP'` (the stage dir empty, the image in the page cache), DLBUNDLE_STAGE_TIMING=1.\n")
	p("- **floor** = **warm** (the same exec on the published stage) + **cp -a** of the staged tree into a fresh directory in the same file system + **read image** (`cat IMG >/dev/null`), each a median of the same rounds.\n")
	p("- **CPU**: user + system time of the run (the process and its children): on a loaded machine, wall time includes waiting for a core, CPU time does not.\n")
	p("- binary: %s", bin)
	if compare != "" {
		p("; **cold (compare)**: %s, the same cold exec in the same rounds", compare)
	}
	p(".\n\n")
	p("| app | image | cold | warm | cp -a | read image | floor | **cold / floor** | median of per-round ratios | CPU: cold / floor |")
	if compare != "" {
		p(" cold (compare) | compare / floor | CPU: compare / floor |")
	}
	p("\n|---|---|---|---|---|---|---|---|---|---|")
	if compare != "" {
		p("---|---|---|")
	}
	p("\n")
	for _, b := range benches {
		cold, warm, cp, rd := median(walls(b.runs[kCold])), median(walls(b.runs[kWarm])), median(walls(b.runs[kCopy])), median(walls(b.runs[kRead]))
		floor := warm + cp + rd
		cpuFloor := median(cpus(b.runs[kWarm])) + median(cpus(b.runs[kCopy])) + median(cpus(b.runs[kRead]))
		var ratios []time.Duration // per-round cold/floor, in thousandths
		for i := range b.runs[kCold] {
			fl := b.runs[kWarm][i].wall + b.runs[kCopy][i].wall + b.runs[kRead][i].wall
			ratios = append(ratios, time.Duration(1000*float64(b.runs[kCold][i].wall)/float64(fl)))
		}
		st, _ := os.Stat(b.image)
		p("| %s | %.1f MiB | %s | %s | %s | %s | %s | **%.2fx** | %.2fx | %s / %s = %.2fx |", b.name, float64(st.Size())/(1<<20), ms(cold), ms(warm), ms(cp), ms(rd), ms(floor),
			float64(cold)/float64(floor), float64(median(ratios))/1000, ms(median(cpus(b.runs[kCold]))), ms(cpuFloor), float64(median(cpus(b.runs[kCold])))/float64(cpuFloor))
		if compare != "" {
			c := median(walls(b.runs[kCompare]))
			cc := median(cpus(b.runs[kCompare]))
			p(" %s | %.2fx | %.2fx |", ms(c), float64(c)/float64(floor), float64(cc)/float64(cpuFloor))
		}
		p("\n")
	}
	for _, b := range benches {
		breakdown(p, b)
	}
}

// breakdown writes where the first rank's time goes, for one app: medians
// over the rounds of each phase dlbundle reported.
func breakdown(p func(string, ...any), b *appBench) {
	var cold, warm []*timing
	for _, r := range b.runs[kCold] {
		if r.timing != nil {
			cold = append(cold, r.timing)
		}
	}
	for _, r := range b.runs[kWarm] {
		if r.timing != nil {
			warm = append(warm, r.timing)
		}
	}
	if len(cold) == 0 {
		return
	}
	med := func(ts []*timing, f func(*timing) time.Duration) time.Duration {
		var d []time.Duration
		for _, t := range ts {
			d = append(d, f(t))
		}
		return median(d)
	}
	p("\n## %s: where the first rank's time goes\n\n", b.name)
	p("From the fork of `dlbundle exec` to the app's exit. A **phase** is wall time of the staging goroutine, with the whole process's CPU time meanwhile (other goroutines' included: the table is encoded beside the extraction). ")
	p("A **sum** adds the time of many goroutines, each locked to its thread, with that thread's CPU time (%d cores here: a sum can exceed the wall time it spans); sums are indented under the phase they fall in. ", runtime.NumCPU())
	p("Medians over %d cold runs, the warm run's in the same rounds beside them.\n\n", len(cold))
	p("| | cold: wall | cold: CPU | warm: wall | bytes |\n|---|---|---|---|---|\n")
	p("| whole run (fork to exit) | %s | %s | %s | |\n", ms(median(walls(b.runs[kCold]))), ms(median(cpus(b.runs[kCold]))), ms(median(walls(b.runs[kWarm]))))
	start := func(t *timing) time.Duration { return t.main }
	p("| process start, Go runtime and package init (fork to main) | %s | | %s | |\n", ms(med(cold, start)), ms(med(warm, start)))
	for _, n := range cold[0].order {
		f := func(t *timing) time.Duration { return t.phases[n] }
		c := func(t *timing) time.Duration { return t.cpu[n] }
		var by []int64
		for _, t := range cold {
			by = append(by, t.bytes[n])
		}
		slices.Sort(by)
		bs := ""
		if by[len(by)/2] > 0 {
			bs = fmt.Sprintf("%.1f MiB", float64(by[len(by)/2])/(1<<20))
		}
		label := n
		if cold[0].sums[n] {
			label = "&nbsp;&nbsp;&nbsp;&nbsp;sum: " + n
		}
		wv := ""
		if len(warm) > 0 {
			if _, ok := warm[0].phases[n]; ok {
				wv = ms(med(warm, f))
			}
		}
		p("| %s | %s | %s | %s | %s |\n", label, ms(med(cold, f)), ms(med(cold, c)), wv, bs)
	}
	inDl := func(t *timing) time.Duration { return t.report - t.main }
	p("| dlbundle from main to the app's execve (all of the above and the rest) | %s | | %s | |\n", ms(med(cold, inDl)), ms(med(warm, inDl)))
	var appCold, appWarm []time.Duration
	for _, r := range b.runs[kCold] {
		if r.timing != nil {
			appCold = append(appCold, r.wall-r.timing.report)
		}
	}
	for _, r := range b.runs[kWarm] {
		if r.timing != nil {
			appWarm = append(appWarm, r.wall-r.timing.report)
		}
	}
	p("| the app: execve to exit | %s | | %s | |\n", ms(median(appCold)), ms(median(appWarm)))
	p("| fsync | none: a stage is a cache, rebuilt from the image if lost | | | |\n")
	p("| privilege separation | none on exec's path (only root's `stage --user` starts a child) | | | |\n")
}

func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// removeAll removes a tree whose directories may be read-only (a stage
// keeps the image's modes).
func removeAll(p string) {
	filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(q, 0o700)
		}
		return nil
	})
	os.RemoveAll(p)
}

package startup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/dlbundle/dlbundle/internal/units"
)

// `make demo` is a quick configuration of this benchmark with a one-screen
// summary: what a newcomer should see is the contended case dlbundle is for,
// not its fixed cost on a local disk (that is shown too, labelled as such).

// DemoOptions is what `make demo` measures: the C loadtest app and Python
// at 1 and 16 ranks, a fixed service time (no calibration, so that the
// figures do not depend on how loaded the machine is at the start). Runs of
// one rank are the median of three, so that the fixed cost can be told from
// noise (their spread); 16 ranks run once.
func DemoOptions() Options {
	o := DefaultOptions()
	o.Scenarios = []string{"loadtest", "python"}
	o.Ranks = []int{1, 16}
	o.Loadtest.Libs = 64 // half the benchmark's: builds and runs in half the time, same shape
	o.Service = 10 * time.Microsecond
	o.Calibrate = 3
	o.Timeout = 2 * time.Minute
	// At width only native and warm: ideal (the fixed cost) and cold (the
	// first start on a node) are told at one rank.
	// Ideal at 16 too: warm/ideal there is the figure for exec and env.
	o.Skip = func(mode string, ranks int) bool {
		return ranks > 1 && (mode == ModeCold || mode == ModeIdeal && ranks != 16)
	}
	return o
}

// Demo files, written to the demo's output directory.
const (
	DemoSummary = "summary.txt"
	DemoSVG     = "demo.svg"
	DemoCSV     = "results.csv"
)

// Demo runs opts, writes the summary, the SVG and the CSV to outDir and
// prints the summary to w. It fails when any run failed: a demo that shows
// a partial result would teach the wrong thing.
func Demo(ctx context.Context, opts Options, outDir string, w io.Writer) (*Results, error) {
	res, err := Run(ctx, opts)
	if err != nil {
		return res, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return res, err
	}
	svg := filepath.Join(outDir, DemoSVG)
	if abs, err := filepath.Abs(svg); err == nil {
		svg = abs
	}
	var summary strings.Builder
	res.WriteDemoSummary(&summary, svg)
	for name, write := range map[string]func(io.Writer) error{
		DemoSVG:     res.WriteSVG,
		DemoCSV:     res.WriteCSV,
		DemoSummary: func(f io.Writer) error { _, err := io.WriteString(f, summary.String()); return err },
	} {
		if err := writeTo(filepath.Join(outDir, name), write); err != nil {
			return res, err
		}
	}
	if _, err := io.WriteString(w, summary.String()); err != nil {
		return res, err
	}
	return res, res.failure()
}

// failure is the first run that did not work, if any.
func (r *Results) failure() error {
	var errs []error
	for _, c := range r.Calibrations {
		if c.Err != "" {
			errs = append(errs, fmt.Errorf("%s: dlbundle not measured: %s", c.Scenario, c.Err))
		}
	}
	for _, row := range r.Rows {
		if row.Err != "" {
			errs = append(errs, fmt.Errorf("%s %s N=%d: %s", row.Scenario, row.Mode, row.Ranks, row.Err))
		}
	}
	return errors.Join(errs...)
}

func writeTo(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// WriteDemoSummary writes the demo's one screen: per app and width, metadata
// operations per rank on the shared tree and start-up of the last rank,
// native against warm dlbundle exec; then dlbundle's fixed cost where the file
// system costs nothing, the first start on a node, and the projection to
// 1,000 nodes.
func (r *Results) WriteDemoSummary(w io.Writer, svgPath string) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	service := r.Options.Service
	p("\n== dlbundle demo: start-up at width on a contended shared file system ==\n\n")
	p("The apps live on slowfs, a FUSE file system whose metadata operations (lookup, stat, open,\n")
	p("readdir, ...) all wait in one queue, like one busy metadata server (%s each here).\n", serviceOf(r, service))
	p("N ranks start at the same instant, natively and through `dlbundle exec` (image staged on the node).\n")
	p("Per app the demo ran, as a job would (the commands are on stderr as they ran):\n")
	p("  $ dlbundle trace -o APP.trace -- APP            # pilot run: records what APP loads\n")
	p("  $ dlbundle build -o APP.dlimg APP.trace         # packs it into one image on the shared tree\n")
	p("  $ dlbundle exec APP.dlimg -- APP                # every rank: staged once per node, then APP\n")
	p("loadtest is a C program linked against %d generated shared libraries (like the CLoadtest\n", r.Options.Loadtest.Libs)
	p("seed): its start-up is almost all library search. python imports the standard library.\n")
	p("ideal is the same app copied to tmpfs and run natively: start-up where the file system costs nothing.\n")
	cores := numCPU()
	p("This machine has %d CPU core%s: rows with more ranks than cores share them.\n\n", cores, plural(cores))

	p("%-9s %5s   %-22s   %s\n", "", "", "metadata ops per rank", "start-up of the last rank")
	p("%-9s %5s   %8s -> %-9s   %9s  %9s  %8s\n", "app", "ranks", "native", "dlbundle", "native", "dlbundle", "speed-up")
	var bound []string // footnotes of the CPU-bound rows
	for _, c := range r.Calibrations {
		for _, nat := range r.rowsOf(c.Scenario, ModeNative) {
			warm, ok := r.row(c.Scenario, ModeWarm, nat.Ranks)
			if !ok || nat.Err != "" || warm.Err != "" {
				p("%-9s %5d   failed (see below)\n", c.Scenario, nat.Ranks)
				continue
			}
			mark := ""
			if floor, why, ok := cpuBound(warm, cores, r.Load[0]); ok {
				mark = "  CPU-bound*"
				bound = append(bound, fmt.Sprintf("  %s at %d ranks: %s of CPU / %d cores = %s of its %s; %s.\n", c.Scenario, warm.Ranks,
					seconds(warm.CPU), cores, seconds(floor), seconds(warm.Wall), why))
			}
			p("%-9s %5d   %8s -> %-9s   %9s  %9s  %7.1fx%s\n", c.Scenario, nat.Ranks, opsPerRank(nat), opsPerRank(warm),
				seconds(nat.Wall), seconds(warm.Wall), ratio(nat.Wall, warm.Wall), mark)
		}
	}
	if len(bound) > 0 {
		p("* CPU-bound: more ranks than cores, and dlbundle's time is the ranks' CPU time (measured)\n")
		p("  over the cores, or waiting for cores:\n")
		p("%s", strings.Join(bound, ""))
		p("  There the speed-up is set by this machine's cores, not by the file system; the metadata\n")
		p("  operations per rank are what carries over to a node with a core per rank.\n")
	}

	// What a site running the launcher plugins pays, beside exec.
	for _, c := range r.Calibrations {
		id, ok1 := r.row(c.Scenario, ModeIdeal, 16)
		warm, ok2 := r.row(c.Scenario, ModeWarm, 16)
		env, ok3 := r.row(c.Scenario, ModeEnv, 16)
		if ok1 && ok2 && ok3 && id.Err == "" && warm.Err == "" && env.Err == "" {
			p("%-9s warm / ideal at 16 ranks: dlbundle exec %.2fx, launcher-less (dlbundle env, as the plugins) %.2fx (goal <= 1.05)\n",
				c.Scenario, ratio(warm.Wall, id.Wall), ratio(env.Wall, id.Wall))
		}
	}

	// The local comparison the old demo showed, labelled for what it is.
	p("\nWhere the file system costs nothing (a tmpfs copy, 1 rank), dlbundle only adds its fixed cost\n")
	p("(launcher, image map, audit shim), native -> dlbundle (median of %d runs each):\n", max(r.Options.Calibrate, 1))
	for _, c := range r.Calibrations {
		id, ok1 := r.row(c.Scenario, ModeIdeal, 1)
		warm, ok2 := r.row(c.Scenario, ModeWarm, 1)
		if ok1 && ok2 && id.Err == "" && warm.Err == "" {
			if cost := fixedCost(id, warm); strings.HasPrefix(cost, "within noise") {
				// Two medians whose difference is noise would be read as a result.
				p("  %-9s no difference beyond the noise: runs spread %s\n", c.Scenario, strings.TrimPrefix(cost, "within noise "))
			} else {
				p("  %-9s %.1f -> %s: %s\n", c.Scenario, float64(id.Wall)/float64(time.Millisecond), ms(warm.Wall), cost)
			}
		}
	}
	p("First start on a node (cold: exec stages the image first):")
	sep := " "
	sep = " "
	for _, c := range r.Calibrations {
		if cold, ok := r.lastRow(c.Scenario, ModeCold); ok && cold.Err == "" {
			p("%s%s %s at %d rank%s", sep, c.Scenario, seconds(cold.Wall), cold.Ranks, plural(cold.Ranks))
			sep = ", "
		}
	}
	p(".\n\n")

	p("At %s nodes x %d ranks, start-up would keep the metadata server busy (projection, %s/op):\n",
		units.Count(projNodes), projRanksPerNode, serviceOf(r, service))
	for _, c := range r.Calibrations {
		pr, ok := r.Project(c.Scenario, c.Service)
		if !ok || !pr.Dlbundle {
			continue
		}
		p("  %-9s %s natively, %s with dlbundle (+ %s to read its %s image on each of the %s nodes, 1 GB/s in all)\n",
			c.Scenario+":", human(pr.NativeMDS), human(pr.DlbundleMDS), human(pr.ImageReads), mib(uint64(c.ImageBytes)), units.Count(projNodes))
	}
	p("Model: one metadata server serialises every operation, so it is busy for ranks x operations\n")
	p("per rank x %s (the measured counts above; with dlbundle the first rank of a node makes the cold\n", serviceOf(r, service))
	p("count, the others the warm one). Source: the linear growth measured on Lustre for the CLoadtest\n")
	p("seed, 7.2 s at 1 task to 219.8 s at 8,192 (docs/benchmarks.md). The image reads assume 1 GB/s\n")
	p("for the whole file system; one striped over many servers reads the %s copies faster.\n", units.Count(projNodes))
	// Times need the CPUs; operation counts do not.
	if load, err := strconv.ParseFloat(r.Load[0], 64); err == nil && load > float64(numCPU()) {
		p("\nNote: the machine was busy before the demo started (load average %s on %d CPUs): the times\n", r.Load[0], numCPU())
		p("are noisy, run it again on a quiet machine; the operation counts do not depend on load.\n")
	}
	p("\nPicture: %s\n", svgPath)
	if err := r.failure(); err != nil {
		p("\nFAILED: %s\n", firstLine(err.Error()))
	}
}

// numCPU is the machine's cores (a variable: tests set it).
var numCPU = runtime.NumCPU

// cpuBound tells whether a row of more ranks than cores is bound by the
// CPU rather than by the file system, and why: its ranks' CPU time over the
// cores (measured; the floor of its time on this machine) is at least two
// thirds of its time, or the machine was busy with other work when the
// demo started (load average above the cores), so that the ranks waited
// for the CPU. It returns the floor.
func cpuBound(row Row, cores int, load string) (floor time.Duration, why string, ok bool) {
	if cores <= 0 || row.Ranks <= cores || row.CPU <= 0 {
		return 0, "", false
	}
	floor = row.CPU / time.Duration(cores)
	if 3*floor >= 2*row.Wall {
		return floor, "the CPU work fills the cores", true
	}
	if l, err := strconv.ParseFloat(load, 64); err == nil && l > float64(cores) {
		return floor, fmt.Sprintf("the rest: cores busy with other work (load average %s)", load), true
	}
	return floor, "", false
}

// fixedCost says what dlbundle adds to one rank where the file system costs
// nothing: the difference of the medians, unless it is within the noise
// (the larger spread of the two sets of runs), where a figure, and a
// negative one in particular, would be noise read as a result.
func fixedCost(ideal, warm Row) string {
	d := warm.Wall - ideal.Wall
	noise := max(ideal.Spread, warm.Spread)
	switch {
	case noise == 0:
		return fmt.Sprintf("%+.1f ms (no spread measured: noise not known)", float64(d)/float64(time.Millisecond))
	case d.Abs() <= noise:
		return fmt.Sprintf("within noise (±%s)", ms(noise))
	}
	return fmt.Sprintf("%+.1f ms (noise ±%s)", float64(d)/float64(time.Millisecond), ms(noise))
}

// serviceOf names the service time: fixed, or calibrated per scenario.
func serviceOf(r *Results, service time.Duration) string {
	if service != 0 {
		return service.String()
	}
	var s []string
	for _, c := range r.Calibrations {
		s = append(s, fmt.Sprintf("%s %v", c.Scenario, c.Service))
	}
	return strings.Join(s, ", ")
}

func opsPerRank(r Row) string {
	if x := r.OpsPerRank(); x < 100 {
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.0f", r.OpsPerRank())
}

// human is dur with minutes and hours, for the projection.
func human(d time.Duration) string {
	switch {
	case d >= 2*time.Hour:
		return fmt.Sprintf("%.1f h", d.Hours())
	case d >= 2*time.Minute:
		return fmt.Sprintf("%.0f min", d.Minutes())
	}
	return dur(d)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f s", d.Seconds()) }

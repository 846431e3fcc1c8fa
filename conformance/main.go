package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/dlbundle/dlbundle/internal/benchhost"
)

// Corpus is one body of tests: how to prepare it, its pilot, and the runs
// whose outcomes are compared.
type Corpus struct {
	Name      string
	What      string // for docs/conformance.md: what runs, what is excluded and why
	Setup     func(*Ctx) error
	Pilot     func(*Ctx) Run
	BuildArgs func(*Ctx) []string
	Runs      func(*Ctx) []NamedRun
	Parse     func(*Ctx, NamedRun, []byte) (Outcomes, error)
	// NativeTwice runs the corpus natively a second time first: tests
	// whose outcome differs between the two native runs (a /proc inode, a
	// timing) are set apart as unstable and not compared. For cheap corpora.
	NativeTwice bool
}

// NamedRun is one command of a corpus (a corpus may have several: the C
// probe as root and as another uid); its outcomes are prefixed by Name.
type NamedRun struct {
	Name string
	Run  Run
}

// Ctx is what a corpus's functions get.
type Ctx struct {
	Work   string
	Src    string // downloaded sources (the Tcl test suite), kept between runs
	Env    []string
	Subset bool // a quick subset, for developing the harness
}

// Result is one corpus's run, for the summary and the docs.
type Result struct {
	Corpus      *Corpus
	Start       time.Time
	Elapsed     time.Duration
	LoadStart   string
	LoadEnd     string
	Entries     int
	Counts      map[Mode]map[string]int
	Times       map[Mode]time.Duration
	Stats       map[Mode]ShimStats
	Divergences []Divergence
	Unstable    []string // tests whose outcome differed between two native runs
	Err         error
	Subset      bool
}

var corpora = map[string]func() *Corpus{
	"c": cCorpus, "cpython": cpythonCorpus, "numpy": numpyCorpus, "scipy": scipyCorpus, "tcl": tclCorpus,
}

func main() {
	dlb := flag.String("dlbundle", "bin/dlbundle", "the dlbundle binary to test")
	which := flag.String("corpus", "c,tcl,numpy,scipy,cpython", "corpora to run, comma-separated (cheapest first)")
	work := flag.String("work", "/tmp/conformance-work", "scratch directory (removed and recreated)")
	out := flag.String("out", "docs/conformance.md", "results page to write ('' for none)")
	src := flag.String("src", "/var/tmp/dlbundle-conformance-src", "where downloaded test sources are kept between runs")
	subset := flag.Bool("subset", false, "run a quick subset of each corpus (developing the harness; not for results)")
	flag.Parse()

	abs, err := filepath.Abs(*dlb)
	if err != nil {
		fatal(err)
	}
	// The version that runs, read once: a rebuild of the binary during a
	// long run must not relabel its results.
	version, err := exec.Command(abs, "--version").Output()
	if err != nil {
		fatal(fmt.Errorf("%s --version: %v", abs, err))
	}
	os.RemoveAll(*work)
	if err := os.MkdirAll(*work, 0o755); err != nil {
		fatal(err)
	}
	os.Chmod(*work, 0o755) // the unprivileged runs reach their trees and stages through it
	home := filepath.Join(*work, "home")
	tmp := filepath.Join(*work, "tmp")
	for _, d := range []string{home, tmp} {
		os.MkdirAll(d, 0o777)
		os.Chmod(d, 0o1777)
	}
	rn := &Runner{DLBundle: abs, Work: *work, Log: os.Stderr}
	ctx := &Ctx{Work: *work, Src: *src, Env: baseEnv(home, tmp), Subset: *subset}
	if err := os.MkdirAll(*src, 0o755); err != nil {
		fatal(err)
	}
	var results []*Result
	for _, name := range strings.Split(*which, ",") {
		mk, ok := corpora[name]
		if !ok {
			fatal(fmt.Errorf("no corpus %q (have c, cpython, numpy, scipy, tcl)", name))
		}
		r := runCorpus(rn, ctx, mk())
		results = append(results, r)
		fmt.Println(r.Summary())
		// After every corpus: a long run stopped midway keeps what it found.
		if *out != "" {
			if err := writeDocs(*out, results, strings.TrimSpace(string(version))); err != nil {
				fatal(err)
			}
		}
	}
	if *out != "" {
		fmt.Printf("conformance: results in %s\n", *out)
	}
	for _, r := range results {
		if r.Err != nil || len(r.Divergences) > 0 || r.Fallbacks() > 0 {
			os.Exit(1)
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "conformance:", err)
	os.Exit(2)
}

// runCorpus sets up, traces, builds, and runs one corpus three ways.
func runCorpus(rn *Runner, ctx *Ctx, c *Corpus) *Result {
	r := &Result{Corpus: c, Start: time.Now(), LoadStart: benchhost.LoadAvg(), Subset: ctx.Subset,
		Counts: map[Mode]map[string]int{}, Times: map[Mode]time.Duration{}, Stats: map[Mode]ShimStats{}}
	defer func() { r.Elapsed, r.LoadEnd = time.Since(r.Start), benchhost.LoadAvg() }()
	fmt.Fprintf(os.Stderr, "conformance %s: setting up (load %s)\n", c.Name, r.LoadStart)
	if c.Setup != nil {
		if r.Err = c.Setup(ctx); r.Err != nil {
			return r
		}
	}
	img, err := rn.Trace(c.Name, c.Pilot(ctx), c.BuildArgs(ctx)...)
	if err != nil {
		r.Err = err
		return r
	}
	decides, n, err := ImageDecides(img)
	if err != nil {
		r.Err = err
		return r
	}
	r.Entries = n
	outcomes := map[Mode]Outcomes{}
	modes := []Mode{Native, Cold, Warm}
	if c.NativeTwice {
		modes = append([]Mode{Native2}, modes...)
	}
	for _, mode := range modes {
		all := Outcomes{}
		stats := ShimStats{Reasons: map[string]int{}}
		runs := c.Runs(ctx)
		for _, nr := range runs {
			if nr.Run.UID != 0 {
				prepareUID(rn, c.Name+"."+nr.Name, nr.Run.UID)
			}
			if nr.Run.Output != "" {
				os.Remove(nr.Run.Output)
			}
			out, elapsed, err := rn.Exec(c.Name+"."+nr.Name, mode, img, nr.Run)
			r.Times[mode] += elapsed
			os.WriteFile(filepath.Join(rn.Work, fmt.Sprintf("%s.%s.%s.out", c.Name, nr.Name, mode)), out, 0o644)
			result := out
			if nr.Run.Output != "" {
				if result, err = os.ReadFile(nr.Run.Output); err != nil {
					r.Err = fmt.Errorf("%s %s: no results (%v); output:\n%s", nr.Name, mode, err, tail(out))
					return r
				}
				os.WriteFile(filepath.Join(rn.Work, fmt.Sprintf("%s.%s.%s.results", c.Name, nr.Name, mode)), result, 0o644)
			}
			o, perr := c.Parse(ctx, nr, result)
			if perr != nil || len(o) == 0 {
				r.Err = fmt.Errorf("%s %s: %d outcomes (%v; exit: %v); output:\n%s", nr.Name, mode, len(o), perr, err, tail(out))
				return r
			}
			for k, v := range o {
				if len(runs) > 1 {
					k = nr.Name + ": " + k
				}
				all[k] = v
			}
			if mode == Cold || mode == Warm {
				s, rerr := ReadReport(rn.ReportFile(c.Name+"."+nr.Name, mode, nr.Run.UID), decides)
				if rerr != nil {
					r.Err = fmt.Errorf("%s %s: the shim's report: %v", nr.Name, mode, rerr)
					return r
				}
				if s.Processes == 0 {
					r.Err = fmt.Errorf("%s %s: no process reported (the app did not run with the shim; exit: %v); output:\n%s", nr.Name, mode, err, tail(out))
					return r
				}
				stats.add(s)
			}
		}
		outcomes[mode] = all
		r.Counts[mode] = all.Count()
		if mode == Cold || mode == Warm {
			r.Stats[mode] = stats
		}
		fmt.Fprintf(os.Stderr, "conformance %s %s: %v in %v\n", c.Name, mode, r.Counts[mode], r.Times[mode].Round(time.Second))
	}
	if c.NativeTwice {
		for _, d := range Compare(outcomes[Native], outcomes[Native2], outcomes[Native2]) {
			r.Unstable = append(r.Unstable, d.Test)
			for _, m := range modes {
				delete(outcomes[m], d.Test)
			}
		}
	}
	r.Divergences = Compare(outcomes[Native], outcomes[Cold], outcomes[Warm])
	return r
}

// prepareUID makes the report files of an unprivileged run its own (it
// cannot create files in the work dir, root's).
func prepareUID(rn *Runner, name string, uid int) {
	for _, m := range []Mode{Cold, Warm} {
		rep := rn.ReportFile(name, m, uid)
		os.Remove(rep)
		os.WriteFile(rep, nil, 0o600)
		os.Chown(rep, uid, uid)
	}
}

func (s *ShimStats) add(o ShimStats) {
	s.Processes += o.Processes
	s.Answered += o.Answered
	s.Missing += o.Missing
	s.Passed += o.Passed
	s.Fallbacks += o.Fallbacks
	s.FallbackProcs += o.FallbackProcs
	for _, e := range o.Examples {
		if len(s.Examples) < 8 {
			s.Examples = append(s.Examples, e)
		}
	}
	for k, v := range o.Reasons {
		s.Reasons[k] += v
	}
}

// Fallbacks is the number of image paths the shim passed through, in both
// exec runs.
func (r *Result) Fallbacks() int { return r.Stats[Cold].Fallbacks + r.Stats[Warm].Fallbacks }

// Summary is the one line per corpus `make conformance` prints.
func (r *Result) Summary() string {
	if r.Err != nil {
		return fmt.Sprintf("conformance %s: ERROR %v", r.Corpus.Name, r.Err)
	}
	tests := 0
	for _, n := range r.Counts[Native] {
		tests += n
	}
	cold, warm, both := 0, 0, 0
	for _, d := range r.Divergences {
		if d.ColdDiffs {
			cold++
		}
		if d.WarmDiff {
			warm++
		}
		if d.ColdDiffs && d.WarmDiff {
			both++
		}
	}
	sub := ""
	if r.Subset {
		sub = " (SUBSET)"
	}
	return fmt.Sprintf("conformance %s%s: %d tests, %d divergences (%d in both exec runs; cold %d, warm %d); shim answered %d lookups in %d processes, %d fallbacks on image paths in %d processes; %v, load %s -> %s, %s",
		r.Corpus.Name, sub, tests, len(r.Divergences), both, cold, warm, r.Stats[Cold].Answered+r.Stats[Warm].Answered,
		r.Stats[Cold].Processes+r.Stats[Warm].Processes, r.Fallbacks(), r.Stats[Cold].FallbackProcs+r.Stats[Warm].FallbackProcs,
		r.Elapsed.Round(time.Second), r.LoadStart, r.LoadEnd, runtime.GOARCH)
}

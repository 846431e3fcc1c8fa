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
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/examples/loadtest"
)

// The summary's figures come from the rows: ops per rank native -> warm, the
// last rank's start-up, their ratio, the fixed cost on tmpfs, the cold start
// and the projection.
func TestDemoSummaryFigures(t *testing.T) {
	defer func(f func() int) { numCPU = f }(numCPU)
	numCPU = func() int { return 64 } // no row is CPU-bound (TestDemoSummaryMarksCPUBoundRows)
	var b bytes.Buffer
	synthetic().WriteDemoSummary(&b, "/x/demo.svg")
	out := b.String()
	for _, want := range []string{
		"app           1       1000 -> 0.0           0.050 s    0.010 s      5.0x\n",
		"app          16       1000 -> 0.0           0.800 s    0.040 s     20.0x\n",
		"  app       10.0 -> 10.0 ms: +0.0 ms (no spread measured: noise not known)\n",
		"app 0.100 s at 16 ranks.\n",
		// 24,000 ranks x 1,000 ops x 10 µs; 1,000 x 40 stage ops x 10 µs; 1,000 x 100 MB at 1 GB/s.
		"At 1,000 nodes x 24 ranks",
		"app:      4 min natively, 400.0 ms with dlbundle (+ 100 s to read its 95.4 MiB image",
		"Picture: /x/demo.svg\n",
		"$ dlbundle trace -o APP.trace -- APP", "$ dlbundle build -o APP.dlimg APP.trace", "$ dlbundle exec APP.dlimg -- APP",
		"ideal is the same app copied to tmpfs", "loadtest is a C program linked against",
		"Model: one metadata server serialises every operation", "7.2 s at 1 task to 219.8 s at 8,192",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q\n--- summary:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FAILED") {
		t.Errorf("summary of good runs reports a failure:\n%s", out)
	}
}

// TestDemoSmoke runs `make demo`'s own code path (DemoOptions, Demo) small:
// the tiny loadtest app at 1 and 2 ranks. It checks what the demo promises:
// the runs work, dlbundle ranks make fewer metadata operations on the
// shared tree than native ones, and the screen, the SVG and the CSV are written.
func TestDemoSmoke(t *testing.T) {
	skipWithoutFUSE(t)
	opts := DemoOptions()
	opts.Scenarios = []string{"loadtest"}
	opts.Ranks = []int{1, 2}
	opts.Loadtest = loadtest.Tiny()
	opts.WorkDir = t.TempDir()
	opts.ShmDir = t.TempDir() // see TestSmoke
	opts.Timeout = time.Minute
	opts.Dlbundle = buildDlbundle(t)
	var log bytes.Buffer
	opts.Log = &log
	out := t.TempDir()

	var screen bytes.Buffer
	res, err := Demo(context.Background(), opts, out, &screen)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Logf("screen:\n%s", screen.String())
	// N=1: all five modes; N=2: native, warm and env (launcher-less) only.
	if len(res.Rows) != 8 {
		t.Errorf("%d rows, want 8", len(res.Rows))
	}
	for _, n := range opts.Ranks {
		nat, ok1 := res.row("loadtest", ModeNative, n)
		warm, ok2 := res.row("loadtest", ModeWarm, n)
		if !ok1 || !ok2 || nat.MetaOps == 0 || warm.MetaOps >= nat.MetaOps {
			t.Errorf("N=%d: native %d metadata ops, warm %d: want warm < native", n, nat.MetaOps, warm.MetaOps)
		}
		// Launcher-less: the ranks start with dlbundle env's variables and
		// are served from the stage as under exec.
		if env, ok := res.row("loadtest", ModeEnv, n); !ok || env.Err != "" || env.MetaOps >= nat.MetaOps {
			t.Errorf("N=%d: env row %+v: want it run, with fewer metadata ops than native (%d)", n, env, nat.MetaOps)
		}
		if nat.CPU <= 0 || warm.CPU <= 0 {
			t.Errorf("N=%d: ranks' CPU time native %v, warm %v: not measured (the CPU-bound mark needs it)", n, nat.CPU, warm.CPU)
		}
		// Warm means staged before: at N=2 there is no measured cold run, so
		// the harness must have staged unmeasured; a warm rank reads no image.
		if img := res.Calibrations[0].ImageBytes; img == 0 || warm.BytesRead >= uint64(img)/2 {
			t.Errorf("N=%d warm: read %d bytes of a %d-byte image from the shared tree: it staged, so it was not warm", n, warm.BytesRead, img)
		}
	}
	summary, err := os.ReadFile(filepath.Join(out, DemoSummary))
	if err != nil || string(summary) != screen.String() {
		t.Errorf("%s differs from the screen (%v)", DemoSummary, err)
	}
	for _, want := range []string{"loadtest      1", "loadtest      2", "At 1,000 nodes", filepath.Join(out, DemoSVG)} {
		if !strings.Contains(screen.String(), want) {
			t.Errorf("screen lacks %q", want)
		}
	}
	svg, err := os.ReadFile(filepath.Join(out, DemoSVG))
	if err != nil {
		t.Fatal(err)
	}
	// Native, warm and env ran at 1 and 2 ranks (a line each); ideal and
	// cold at 1 only (a point each, no line).
	if n, c := wellFormedXML(t, svg), strings.Count(string(svg), "(measured)</title></circle>"); n != 3 || c != 8 {
		t.Errorf("SVG has %d polylines and %d points, want 3 (native, warm, env) and one point per row (8)", n, c)
	}
	if st, err := os.Stat(filepath.Join(out, DemoCSV)); err != nil || st.Size() == 0 {
		t.Errorf("%s not written: %v", DemoCSV, err)
	}
}

// On a busy machine the screen says that its times are noisy.
func TestDemoSummaryWarnsOfABusyMachine(t *testing.T) {
	r := synthetic()
	for _, tc := range []struct {
		load string
		warn bool
	}{{"0.10", false}, {"1000.00", true}, {"?", false}} {
		r.Load[0] = tc.load
		var b bytes.Buffer
		r.WriteDemoSummary(&b, "demo.svg")
		if got := strings.Contains(b.String(), "the machine was busy"); got != tc.warn {
			t.Errorf("load %s: warning shown %v, want %v", tc.load, got, tc.warn)
		}
	}
}

// The screen names the machine's cores, and marks the rows whose ranks
// outnumber them and whose time is mostly CPU work: their speed-up is the
// cores', not dlbundle's.
func TestDemoSummaryMarksCPUBoundRows(t *testing.T) {
	defer func(f func() int) { numCPU = f }(numCPU)
	for _, tc := range []struct {
		cores int
		warm  time.Duration // of the 16-rank row, whose ranks took 160 ms of CPU
		load  string        // at the start
		bound string        // the footnote's reason, "" if not CPU-bound
	}{
		{2, 100 * time.Millisecond, "0.50", "the CPU work fills the cores"}, // 160 ms / 2 cores = 80 ms, of 100 ms
		{2, 1000 * time.Millisecond, "0.50", ""},                            // 80 ms of 1 s on a quiet machine: the wait is elsewhere
		{2, 1000 * time.Millisecond, "6.82", "the rest: cores busy with other work (load average 6.82)"},
		{16, 100 * time.Millisecond, "0.50", ""}, // a core per rank
	} {
		numCPU = func() int { return tc.cores }
		r := synthetic()
		r.Load[0] = tc.load
		for i := range r.Rows {
			if r.Rows[i].Mode == ModeWarm && r.Rows[i].Ranks == 16 {
				r.Rows[i].Wall, r.Rows[i].CPU = tc.warm, 160*time.Millisecond
			}
		}
		var b bytes.Buffer
		r.WriteDemoSummary(&b, "demo.svg")
		out := b.String()
		if want := fmt.Sprintf("This machine has %d CPU cores", tc.cores); !strings.Contains(out, want) {
			t.Errorf("%d cores: screen lacks %q:\n%s", tc.cores, want, out)
		}
		row16 := ""
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "app          16 ") {
				row16 = line
			}
		}
		if got := strings.HasSuffix(row16, "CPU-bound*"); got != (tc.bound != "") {
			t.Errorf("%d cores, warm %v, load %s: 16-rank row %q marked CPU-bound %v, want %v", tc.cores, tc.warm, tc.load, row16, got, tc.bound != "")
		}
		foot := fmt.Sprintf("app at 16 ranks: 0.160 s of CPU / 2 cores = 0.080 s of its %s; %s", seconds(tc.warm), tc.bound)
		if got := strings.Contains(out, foot); got != (tc.bound != "") {
			t.Errorf("%d cores, warm %v, load %s: footnote %q shown %v, want %v:\n%s", tc.cores, tc.warm, tc.load, foot, got, tc.bound != "", out)
		}
		if strings.Contains(out, "app           1 ") && strings.Contains(strings.SplitAfter(out, "app           1 ")[1][:60], "CPU-bound") {
			t.Errorf("the one-rank row is marked CPU-bound:\n%s", out)
		}
	}
}

// The fixed cost on tmpfs is a difference of two medians: within the runs'
// spread it is noise and is said to be, never shown as a (negative) figure.
func TestDemoFixedCostWithinNoise(t *testing.T) {
	msd := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	for _, tc := range []struct {
		ideal, warm Row
		want        string
	}{
		{Row{Wall: msd(315.9), Spread: msd(20)}, Row{Wall: msd(301.0), Spread: msd(6)}, "within noise (±20.0 ms)"},
		{Row{Wall: msd(10), Spread: msd(1)}, Row{Wall: msd(14), Spread: msd(0.5)}, "+4.0 ms (noise ±1.0 ms)"},
		{Row{Wall: msd(30), Spread: msd(1)}, Row{Wall: msd(20), Spread: msd(1)}, "-10.0 ms (noise ±1.0 ms)"},
	} {
		if got := fixedCost(tc.ideal, tc.warm); got != tc.want {
			t.Errorf("fixedCost(%v±%v, %v±%v) = %q, want %q", tc.ideal.Wall, tc.ideal.Spread, tc.warm.Wall, tc.warm.Spread, got, tc.want)
		}
	}
	r := synthetic()
	for i := range r.Rows {
		switch {
		case r.Rows[i].Mode == ModeIdeal && r.Rows[i].Ranks == 1:
			r.Rows[i].Wall, r.Rows[i].Spread = msd(315.9), msd(20)
		case r.Rows[i].Mode == ModeWarm && r.Rows[i].Ranks == 1:
			r.Rows[i].Wall, r.Rows[i].Spread = msd(301.0), msd(6)
		}
	}
	var b bytes.Buffer
	r.WriteDemoSummary(&b, "demo.svg")
	if out := b.String(); !strings.Contains(out, "no difference beyond the noise: runs spread (±20.0 ms)") || strings.Contains(out, "315.9") || strings.Contains(out, "-14.9") {
		t.Errorf("a difference within noise is not said to be:\n%s", out)
	}
}

// make demo introduces its parts before the first one runs: the registry's
// push and pull come before the main screen and must not be taken for it.
// `make -n` prints the recipes in the order make runs them, without running
// them; demo-intro is run for real (it only echoes).
func TestMakeDemoIntroducesItsParts(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dry, err := exec.Command("make", "-C", root, "-n", "--no-print-directory", "demo").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n demo: %v\n%s", err, dry)
	}
	intro := strings.Index(string(dry), "== make demo runs, in this order")
	registry := strings.Index(string(dry), "docker-registry serve")
	main := strings.Index(string(dry), "./bench/cmd/demo")
	if intro < 0 || registry < 0 || main < 0 || !(intro < registry && registry < main) {
		t.Errorf("make demo's order: intro at %d, registry at %d, main demo at %d; want intro, registry, main:\n%s", intro, registry, main, dry)
	}
	out, err := exec.Command("make", "-C", root, "-s", "--no-print-directory", "demo-intro").CombinedOutput()
	if err != nil {
		t.Fatalf("make demo-intro: %v\n%s", err, out)
	}
	for _, want := range []string{"1. demo-registry: an image pushed to a throw-away OCI registry", "2. the main demo", "summary comes last"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("make demo-intro lacks %q:\n%s", want, out)
		}
	}
}

// demo.svg draws points where it measured and nothing between: the demo's
// 1 and 16 ranks are two points per mode, each labelled, no line through the
// 2, 4 and 8 ranks that never ran, and ticks at 1 and 16 only. Where every
// width between ran (the benchmark's 1, 2, 4...), the points are joined.
func TestDemoSVGDrawsOnlyWhatWasMeasured(t *testing.T) {
	var b bytes.Buffer
	if err := synthetic().WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	if n := wellFormedXML(t, b.Bytes()); n != 0 {
		t.Errorf("%d polylines between 1 and 16 ranks, where 2, 4 and 8 were not measured", n)
	}
	if c := strings.Count(svg, "(measured)</title></circle>"); c != 8 {
		t.Errorf("%d points, want one per row (8)", c)
	}
	for _, tick := range []string{">2</text>", ">4</text>", ">8</text>"} {
		if strings.Contains(svg, tick) {
			t.Errorf("a tick %s where nothing ran", tick)
		}
	}
	for _, label := range []string{">800 ms</text>", ">40 ms</text>", ">10 ms</text>", ">30 ms</text>"} {
		if !strings.Contains(svg, label) {
			t.Errorf("no value label %s next to its point", label)
		}
	}
	r := synthetic()
	r.Rows = append(r.Rows, Row{Scenario: "app", Mode: ModeNative, Ranks: 2, Wall: 90 * time.Millisecond},
		Row{Scenario: "app", Mode: ModeNative, Ranks: 4, Wall: 200 * time.Millisecond},
		Row{Scenario: "app", Mode: ModeNative, Ranks: 8, Wall: 400 * time.Millisecond})
	slices.SortStableFunc(r.Rows, func(a, b Row) int { return a.Ranks - b.Ranks })
	b.Reset()
	if err := r.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	if n := wellFormedXML(t, b.Bytes()); n != 1 {
		t.Errorf("%d polylines, want native's 1-2-4-8-16 joined (1)", n)
	}
}

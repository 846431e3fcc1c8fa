package startup

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/examples/loadtest"
)

// The summary's figures come from the rows: ops per rank native -> warm, the
// last rank's start-up, their ratio, the fixed cost on tmpfs, the cold start
// and the projection.
func TestDemoSummaryFigures(t *testing.T) {
	var b bytes.Buffer
	synthetic().WriteDemoSummary(&b, "/x/demo.svg")
	out := b.String()
	for _, want := range []string{
		"app           1       1000 -> 0.0           0.050 s    0.010 s      5.0x\n",
		"app          16       1000 -> 0.0           0.800 s    0.040 s     20.0x\n",
		"native -> dlbundle: app 10.0 -> 10.0 ms.\n",
		"app 0.100 s at 16 ranks.\n",
		// 24,000 ranks x 1,000 ops x 10 µs; 1,000 x 40 stage ops x 10 µs; 1,000 x 100 MB at 1 GB/s.
		"At 1,000 nodes x 24 ranks",
		"app:      4 min natively, 400.0 ms with dlbundle (+ 100 s to read its 95.4 MiB image",
		"Picture: /x/demo.svg\n",
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
	// N=1: all four modes; N=2: native and warm only.
	if len(res.Rows) != 6 {
		t.Errorf("%d rows, want 6", len(res.Rows))
	}
	for _, n := range opts.Ranks {
		nat, ok1 := res.row("loadtest", ModeNative, n)
		warm, ok2 := res.row("loadtest", ModeWarm, n)
		if !ok1 || !ok2 || nat.MetaOps == 0 || warm.MetaOps >= nat.MetaOps {
			t.Errorf("N=%d: native %d metadata ops, warm %d: want warm < native", n, nat.MetaOps, warm.MetaOps)
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
	if n := wellFormedXML(t, svg); n != 4 {
		t.Errorf("SVG has %d polylines, want one per mode (4)", n)
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

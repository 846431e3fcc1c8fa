package view

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The fixture's pilot: 7 events in 10 ms, 5 lookups on the shared file
// system natively, 1 left under exec (TestComputeFigures). Each case is the
// model's sum, with its parts.
func TestStartupSeconds(t *testing.T) {
	fx := newFixture(t)
	m := StartupModel{Service: 100 * time.Microsecond, Nodes: 10, RanksPerNode: 4, ReadAll: 1e6, StageRate: 2e6,
		ExecFixed: 2 * time.Millisecond, StopCost: 500 * time.Microsecond, PilotFixed: time.Millisecond}
	fx.in.Model = &m
	f, err := Compute(fx.in)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Seconds
	// 10 ms pilot - (7 events x 0.5 ms + 1 ms) = 5.5 ms untraced.
	if s == nil || s.UntracedMeasured || s.PtraceNS != int64(4500*time.Microsecond) || s.UntracedNS != int64(5500*time.Microsecond) {
		t.Fatalf("seconds %+v; want the untraced start-up estimated as 10 - 4.5 = 5.5 ms", s)
	}
	read := time.Duration(float64(fx.in.Image.Size()) / 1e6 * float64(time.Second)) // one node's copy
	stage := time.Duration(float64(f.RawBytes) / 2e6 * float64(time.Second))
	if stage <= 0 {
		t.Fatalf("no staging time for %d bytes of files", f.RawBytes)
	}
	cpu := 5500 * time.Microsecond
	want := map[string]time.Duration{
		"natively, 1 rank":     cpu + 5*100*time.Microsecond,
		"under exec, 1 rank":   cpu + 1*100*time.Microsecond + read + stage + 2*time.Millisecond,
		"natively, 40 ranks":   cpu + 40*5*100*time.Microsecond,
		"under exec, 40 ranks": cpu + 40*1*100*time.Microsecond + 10*read + stage + 2*time.Millisecond, // 10 nodes' copies
	}
	if len(s.Cases) != len(want) {
		t.Errorf("%d cases, want %d: %+v", len(s.Cases), len(want), s.Cases)
	}
	for _, c := range s.Cases {
		if w, ok := want[c.Name]; !ok || c.Total() != w {
			t.Errorf("%s: %v, want %v (%s)", c.Name, c.Total(), w, c.Formula(s))
		}
	}
	// A measured untraced start-up replaces the estimate, and nothing of
	// ptrace is taken out of it.
	fx.in.Untraced = 3 * time.Millisecond
	f, _ = Compute(fx.in)
	if s := f.Seconds; !s.UntracedMeasured || s.UntracedNS != int64(3*time.Millisecond) || s.PtraceNS != 0 ||
		s.Cases[0].Total() != 3*time.Millisecond+500*time.Microsecond {
		t.Errorf("with --untraced 3ms: %+v", s)
	}
	// Without an image, exec cannot be estimated: native cases only.
	fx.in.Image = nil
	f, _ = Compute(fx.in)
	for _, c := range f.Seconds.Cases {
		if c.Exec {
			t.Errorf("case %q without an image", c.Name)
		}
	}
}

// A chip holds a measured figure or an estimate, never both; the page says
// which, and the savings chart compares bars on the same basis only.
func TestChipsSeparateMeasuredFromEstimated(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, newFixture(t).in); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	chips := regexp.MustCompile(`(?s)<li class="(m|e)">(.*?)</li>`).FindAllStringSubmatch(page, -1)
	if len(chips) < 8 {
		t.Fatalf("%d chips, want at least 8", len(chips))
	}
	var measured, estimated int
	for _, c := range chips {
		tag := map[string]string{"m": "<i>measured</i>", "e": "<i>estimate</i>"}[c[1]]
		other := map[string]string{"m": "estimate", "e": "measured"}[c[1]]
		if !strings.HasSuffix(c[2], tag) || strings.Contains(c[2], other) {
			t.Errorf("chip %q: want one kind of figure, tagged %s", c[2], tag)
		}
		if c[1] == "m" {
			measured++
		} else {
			estimated++
		}
	}
	if measured == 0 || estimated < 4 {
		t.Errorf("%d measured and %d estimated chips; want both, and an estimate per start-up case", measured, estimated)
	}
	for _, want := range []string{"Start-up per rank, in seconds", "natively, 24,000 ranks", "under exec, 24,000 ranks",
		"10µs", "1,000 × 24", "any FS, natively (measured)", "any FS, under exec (measured)", "shared FS, under exec (estimate)"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// Labels are cut in the middle: the start and the end of a name survive.
func TestShortenKeepsBothEnds(t *testing.T) {
	name := "_multiarray_umath.cpython-311-x86_64-linux-gnu.so"
	got := shorten(name, 26)
	if len([]rune(got)) != 26 || !strings.HasPrefix(got, "_multiarray_umat") || !strings.HasSuffix(got, "gnu.so") || !strings.Contains(got, "…") {
		t.Errorf("shorten(%q, 26) = %q", name, got)
	}
	if shorten("libc.so.6", 26) != "libc.so.6" {
		t.Errorf("a short name was cut")
	}
}

// A page from a trace alone shows the native cases and says how to get exec's.
func TestTraceOnlyPageHasNativeSecondsOnly(t *testing.T) {
	in := newFixture(t).in
	in.Image, in.Reports, in.ReportNames = nil, nil, nil
	var b bytes.Buffer
	if err := Write(&b, in); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{"natively, 1 rank", "natively, 24,000 ranks", "for the cases under exec"} {
		if !strings.Contains(page, want) {
			t.Errorf("trace-only page lacks %q", want)
		}
	}
	for _, unwanted := range []string{"under exec, 1 rank", "bandwidth for the image reads", "exec's fixed cost per rank"} {
		if strings.Contains(page, unwanted) {
			t.Errorf("trace-only page shows %q", unwanted)
		}
	}
}

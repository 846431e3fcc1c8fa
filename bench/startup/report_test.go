package startup

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// synthetic results: one scenario, two rank counts, all four modes.
func synthetic() *Results {
	opts := DefaultOptions()
	r := &Results{Date: time.Date(2026, 11, 21, 20, 0, 0, 0, time.UTC), Machine: "test machine", Options: opts}
	r.Calibrations = []Calibration{{Scenario: "app", Ideal: 10 * time.Millisecond, NativeFree: 20 * time.Millisecond,
		OpsPerRank: 1000, Service: 10 * time.Microsecond, ImageBytes: 100e6,
		RawBytes: 300 << 20, WriteFloor: 40 * time.Millisecond}}
	add := func(mode string, n int, wall time.Duration, ops uint64) {
		r.Rows = append(r.Rows, Row{Scenario: "app", Mode: mode, Ranks: n, Wall: wall, MeanRank: wall, MetaOps: ops, Service: 10 * time.Microsecond})
	}
	add(ModeNative, 1, 50*time.Millisecond, 1000)
	add(ModeIdeal, 1, 10*time.Millisecond, 0)
	add(ModeCold, 1, 30*time.Millisecond, 40)
	add(ModeWarm, 1, 10*time.Millisecond, 0)
	add(ModeNative, 16, 800*time.Millisecond, 16000)
	add(ModeIdeal, 16, 80*time.Millisecond, 0)
	add(ModeCold, 16, 100*time.Millisecond, 40)
	add(ModeWarm, 16, 40*time.Millisecond, 0)
	return r
}

func TestReportRatiosGoalsAndProjection(t *testing.T) {
	var md bytes.Buffer
	synthetic().WriteMarkdown(&md, "")
	out := md.String()
	for _, want := range []string{
		// N=16 row: native/warm 800/40, warm/ideal 40/80, cold/ideal 100/80.
		"| 16 | 0.800 s | 0.080 s | 0.100 s | 0.040 s | 20.00x | 0.50x | 1.25x | +0.720 s | -0.040 s | 1000.0 | 2.5 | 0.0 |",
		// Goals: warm ops 0; native/warm at N=16 = 20x.
		"| app | yes (max 0.0) | yes (worst 1.00x) | yes (worst -80 ms over) | yes (20.0x) |",
		// First rank: bound 10 + 100 (100 MB at 1 GB/s) + 20 = 130 ms, cold 30:
		// met; floor 10 + 95.4 (100e6 B = 95.37 MiB at 1 ms/MiB) + 40 = 145.4.
		"| app | 10.0 ms | 30.0 ms | 130.0 ms | yes | 95.4 MiB | 300.0 MiB | 95.4 ms | 40.0 ms | 145.4 ms | -115.4 ms |",
		// Projection: 24,000 ranks x 1,000 ops x 10 µs = 240 s native; dlbundle:
		// 1,000 nodes x 40 stage ops x 10 µs = 0.4 s; image 1,000 x 100 MB at 1 GB/s = 100 s.
		"| app | 1000 | 40 | 0.0 | 10µs | 240 s | 400.0 ms | 100 s | 240 s | 400.0 ms |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks\n%s\n--- report:\n%s", want, out)
		}
	}
}

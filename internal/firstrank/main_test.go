package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/internal/stagetime"
)

// TestParseTimingReadsReport: the benchmark reads back every phase and sum
// stagetime.Report writes, names with spaces and colons included, and the
// clock line as offsets from the fork.
func TestParseTimingReadsReport(t *testing.T) {
	t.Setenv(stagetime.Env, "1")
	fork := time.Now()
	stagetime.EnableFromEnv()
	stop := stagetime.Start("image: footer and TOC read")
	time.Sleep(2 * time.Millisecond)
	stop()
	done := stagetime.Worker()
	m := stagetime.Now()
	time.Sleep(time.Millisecond)
	stagetime.Since("workers: decode (zstd)", m, 1234)
	done()
	var b bytes.Buffer
	stagetime.Report(&b)
	tm := parseTiming(b.String(), fork)
	if tm == nil {
		t.Fatalf("nothing parsed from:\n%s", b.String())
	}
	if d := tm.phases["image: footer and TOC read"]; d < 2*time.Millisecond || tm.sums["image: footer and TOC read"] {
		t.Errorf("phase: %v (sum %v)\n%s", d, tm.sums["image: footer and TOC read"], b.String())
	}
	if d := tm.phases["workers: decode (zstd)"]; d < time.Millisecond || !tm.sums["workers: decode (zstd)"] || tm.bytes["workers: decode (zstd)"] != 1234 {
		t.Errorf("sum: %v, bytes %d\n%s", d, tm.bytes["workers: decode (zstd)"], b.String())
	}
	if tm.main < 0 || tm.report < tm.main+3*time.Millisecond {
		t.Errorf("clock: main %v, report %v", tm.main, tm.report)
	}
	if len(tm.order) != 2 || tm.order[0] != "image: footer and TOC read" {
		t.Errorf("order %q", tm.order)
	}
}

package startup

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/examples/loadtest"
	"github.com/dlbundle/dlbundle/internal/clitest"
	"github.com/dlbundle/dlbundle/internal/slowfs"
)

func TestMain(m *testing.M) {
	MaybeRunGate() // ranks of the harness start as this test binary
	os.Exit(m.Run())
}

// skipWithoutFUSE is the only acceptable skip: the harness needs a FUSE mount.
func skipWithoutFUSE(t *testing.T) {
	t.Helper()
	src, mnt := t.TempDir(), t.TempDir()
	f, err := slowfs.Mount(src, mnt, slowfs.Costs{})
	if errors.Is(err, slowfs.ErrNotPermitted) {
		t.Skipf("skipping: the start-up benchmark needs a FUSE mount and %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Unmount(); err != nil {
		t.Fatal(err)
	}
}

// buildDlbundle compiles the CLI as `make` does, so the smoke test runs the
// dlbundle modes against the current source, not a stale bin/dlbundle.
func buildDlbundle(t *testing.T) string { return clitest.CLI(t) }

// TestSmoke runs the whole harness in its quick mode (2 ranks, a tiny
// loadtest, a small Python import) so that it cannot rot: every mode must
// run correctly, slowfs must count the native ranks' lookups and none of the
// ideal ranks', and the reports must be complete.
func TestSmoke(t *testing.T) {
	skipWithoutFUSE(t)
	opts := DefaultOptions()
	opts.Scenarios = []string{"loadtest", "python"}
	opts.Ranks = []int{2}
	opts.Loadtest = loadtest.Tiny()
	opts.PythonImports = "json"
	opts.Service = 20 * time.Microsecond
	opts.Calibrate = 1
	opts.WorkDir = t.TempDir()
	// Not /dev/shm: containers often give it 64 MiB, less than a copy of the
	// Python standard library; the smoke test checks correctness, not speed.
	opts.ShmDir = t.TempDir()
	opts.Timeout = time.Minute
	opts.Dlbundle = buildDlbundle(t)
	var log bytes.Buffer
	opts.Log = &log

	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Logf("harness log:\n%s", log.String())
	for _, c := range res.Calibrations {
		if c.Err != "" {
			t.Errorf("%s: dlbundle modes did not run: %s", c.Scenario, c.Err)
		}
		if c.OpsPerRank == 0 {
			t.Errorf("%s: slowfs counted no metadata operations for a native rank", c.Scenario)
		}
	}
	if want := 2 * 5; len(res.Rows) != want {
		t.Fatalf("%d rows, want %d (2 scenarios x 5 modes: native, ideal, cold, warm, env)", len(res.Rows), want)
	}
	for _, row := range res.Rows {
		if row.Err != "" {
			t.Errorf("%s %s N=%d failed: %s", row.Scenario, row.Mode, row.Ranks, row.Err)
			continue
		}
		if row.Wall <= 0 || row.MeanRank > row.Wall {
			t.Errorf("%s %s: last rank %v, mean %v", row.Scenario, row.Mode, row.Wall, row.MeanRank)
		}
		switch row.Mode {
		case ModeNative:
			if row.MetaOps == 0 || row.BytesRead == 0 {
				t.Errorf("%s native: no lookups or reads counted on slowfs: %+v", row.Scenario, row)
			}
		case ModeIdeal:
			if row.MetaOps != 0 {
				t.Errorf("%s ideal: %d metadata ops on slowfs; the tmpfs copy should not touch it", row.Scenario, row.MetaOps)
			}
		case ModeWarm:
			nat, _ := res.row(row.Scenario, ModeNative, row.Ranks)
			if row.MetaOps >= nat.MetaOps {
				t.Errorf("%s dlbundle-warm: %d metadata ops, not fewer than native's %d", row.Scenario, row.MetaOps, nat.MetaOps)
			}
		}
	}

	var csvOut, svg, md bytes.Buffer
	if err := res.WriteCSV(&csvOut); err != nil {
		t.Fatal(err)
	}
	records, err := csv.NewReader(&csvOut).ReadAll()
	if err != nil || len(records) != 1+len(res.Rows) {
		t.Errorf("CSV: %d records (want %d), %v", len(records), 1+len(res.Rows), err)
	}
	if err := res.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	measured := 0
	for _, row := range res.Rows {
		if row.Err == "" && row.Wall > 0 {
			measured++
		}
	}
	wellFormedXML(t, svg.Bytes())
	// A point per measurement (lines join only widths measured side by side).
	if n := strings.Count(svg.String(), "(measured)</title></circle>"); n != measured || n < 2*4 {
		t.Errorf("SVG has %d points, want one per measured row (%d), at least one per scenario and mode (8)", n, measured)
	}
	res.WriteMarkdown(&md, "startup.svg")
	for _, want := range []string{"## loadtest", "## python", "## Projection", "dlbundle-warm", res.Machine} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown report lacks %q", want)
		}
	}
}

// wellFormedXML parses the document and returns how many polylines it has.
func wellFormedXML(t *testing.T, doc []byte) int {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	lines := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return lines
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
}

// TestRanksRunAndFailuresAreReported checks the gate: ranks are created first and
// released at once, so each rank's time counts from the release, and a rank
// that fails or prints the wrong thing is reported.
func TestRanksRunAndFailuresAreReported(t *testing.T) {
	ok := runRanks(context.Background(), 3, launch{argv: []string{"/bin/sh", "-c", "echo started $DLBUNDLE_BENCH_RANK"}, env: baseEnv(), dir: "/", expect: "started"})
	if ok.err != nil || len(ok.ranks) != 3 {
		t.Fatalf("3 ranks of sh: %v (%d ranks)", ok.err, len(ok.ranks))
	}
	bad := runRanks(context.Background(), 2, launch{argv: []string{"/bin/sh", "-c", "exit 3"}, env: baseEnv(), dir: "/", expect: ""})
	if bad.err == nil || !strings.Contains(bad.err.Error(), "exit status 3") {
		t.Errorf("a failing rank was not reported: %v", bad.err)
	}
	quiet := runRanks(context.Background(), 1, launch{argv: []string{"/bin/true"}, env: baseEnv(), dir: "/", expect: "hello"})
	if quiet.err == nil {
		t.Error("a rank without the expected output was accepted")
	}
}

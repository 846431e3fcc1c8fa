package report

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// Paths under /tmp are left out by build's policy: they are listed apart
// from the paths the image lacks, with the --include prefix to bundle them
// instead of advice to re-trace (which cannot help); each list's count
// column is labelled.
func TestSummaryTempDirsApartWithIncludeAdvice(t *testing.T) {
	s := Summarize([]ProcessReport{
		{PID: 1, Passed: 3, PassedPaths: []string{"/tmp/job42", "/tmp/job42/.local/lib/python3.11/site-packages", "/opt/app/lib/x.so"}},
		{PID: 2, Passed: 2, PassedPaths: []string{"/tmp/job42", "/etc/hosts"}},
	})
	if len(s.Lacked) != 1 || s.Lacked[0].Path != "/opt/app/lib/x.so" {
		t.Errorf("lacked %+v, want only /opt/app/lib/x.so", s.Lacked)
	}
	if len(s.Temporary) != 2 || s.Temporary[0] != (PathCount{"/tmp/job42", 2}) {
		t.Errorf("temporary %+v, want /tmp/job42 (2 processes) first", s.Temporary)
	}
	if strings.Join(s.IncludePrefixes, " ") != "/tmp/job42" {
		t.Errorf("include prefixes %q, want [/tmp/job42]", s.IncludePrefixes)
	}
	var buf bytes.Buffer
	if err := s.WriteText(&buf, 0); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	tmp := strings.Index(text, "paths in temporary or runtime directories")
	lacks := strings.Index(text, "paths the image lacks")
	if tmp < 0 || lacks < 0 || tmp > lacks {
		t.Fatalf("no temporary-directory section before the lacked paths:\n%s", text)
	}
	if strings.Contains(text[lacks:], "/tmp/job42") {
		t.Errorf("/tmp/job42 is listed among the paths the image lacks:\n%s", text)
	}
	if !strings.Contains(text[tmp:lacks], "dlbundle build -o app.dlimg --from app.dlimg --include /tmp/job42 RUN.report") {
		t.Errorf("temporary paths without the --include to copy:\n%s", text)
	}
	if n := strings.Count(text, "  processes  path\n"); n != 3 {
		t.Errorf("%d labelled lists, want 3 (node-local, temporary, lacked):\n%s", n, text)
	}

	only := Summarize([]ProcessReport{{PID: 1, Passed: 1, PassedPaths: []string{"/tmp/job42/input.nml"}}})
	buf.Reset()
	if err := only.WriteText(&buf, 0); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "dlbundle trace") {
		t.Errorf("temporary paths alone got advice to re-trace:\n%s", buf.String())
	}
}

// TestReportTextEscapesControlBytes: a report's paths come from the app's
// processes; a newline or an escape sequence in one must not forge an output
// line of `dlbundle report` or reach the terminal raw.
func TestReportTextEscapesControlBytes(t *testing.T) {
	forged := "/opt/app/x\n  answered from the stage   999999  (100.0%)"
	s := Summarize([]ProcessReport{{PID: 1, Passed: 4,
		PassedPaths: []string{forged, "/opt/app/\x1b[2Jclear", "/tmp/job\n7/in"},
		Outside:     []string{"/opt/lib/\x07bell.so"},
		Fallbacks:   []Fallback{{Reason: "written", Dir: "/home/u/\x1b]0;title\x07", Lookups: 3}}}})
	var buf bytes.Buffer
	if err := s.WriteText(&buf, 0); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, b := range []string{"\x1b", "\x07"} {
		if strings.Contains(text, b) {
			t.Errorf("output holds the raw control byte %q:\n%s", b, text)
		}
	}
	counts := 0
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "answered from the stage") {
			counts++
		}
	}
	if counts != 1 {
		t.Errorf("%d lines read as the counts line, want 1 (a path forged one):\n%s", counts, text)
	}
	if !strings.Contains(text, `"/opt/app/x\n  answered from the stage`) {
		t.Errorf("the forged path is not shown quoted:\n%s", text)
	}
}

// Per-run temporary names (a JVM's, Open MPI's session directory) are
// grouped by pattern and never offered as --include prefixes; the lines of
// several runs are kept apart by their run id.
func TestSummaryGroupsPerRunNamesAndKeepsRunsApart(t *testing.T) {
	s := Summarize([]ProcessReport{
		{Run: "slurm-7.0", PID: 1, Passed: 4, PassedPaths: []string{"/tmp/hsperfdata_root/12509", "/tmp/.java_pid12509", "/tmp/ompi.node1.0/jf.0", "/opt/app/x.so"}},
		{Run: "slurm-7.0", PID: 2, Passed: 2, PassedPaths: []string{"/tmp/ompi.node1.0/jf.1", "/tmp/ompi.node1.0/jf.0"}},
		{Run: "slurm-8.0", PID: 3, Answered: 9, Passed: 2, PassedPaths: []string{"/tmp/.java_pid777", "/tmp/myapp/lib.so"}},
	})
	want := []PathCount{{"/tmp/.java_pid*", 2}, {"/tmp/ompi.*", 2}, {"/tmp/hsperfdata_*", 1}}
	if !slices.Equal(s.PerRun, want) {
		t.Errorf("per-run %+v, want %+v", s.PerRun, want)
	}
	if strings.Join(s.IncludePrefixes, " ") != "/tmp/myapp" || len(s.Temporary) != 1 {
		t.Errorf("include prefixes %q, temporary %+v: want only /tmp/myapp", s.IncludePrefixes, s.Temporary)
	}
	if len(s.Runs) != 2 || s.Runs[0] != (RunCount{Run: "slurm-7.0", Processes: 2, Passed: 6}) || s.Runs[1].Answered != 9 {
		t.Errorf("runs %+v", s.Runs)
	}
	var buf bytes.Buffer
	if err := s.WriteText(&buf, 0); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	if !strings.Contains(text, "2 runs:") || !strings.Contains(text, "slurm-8.0") || !strings.Contains(text, "/tmp/ompi.*") ||
		strings.Contains(text, "--include /tmp/ompi") || strings.Contains(text, "--include /tmp/.java") {
		t.Errorf("runs or per-run names not shown apart, or advised as --include:\n%s", text)
	}
}

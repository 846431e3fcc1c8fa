package squash

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDefaultTracesFindsRanksInOrder(t *testing.T) {
	dir := t.TempDir()
	if _, err := DefaultTraces(dir); !errors.Is(err, ErrNoTrace) {
		t.Fatalf("empty dir: %v, want ErrNoTrace", err)
	}
	for _, n := range []string{"dlbundle.trace.10", "dlbundle.trace.2", "dlbundle.trace.tmp-x", "dlbundle.trace.0"} {
		tree(t, dir, map[string]string{n: "x"})
	}
	got, err := DefaultTraces(dir)
	want := []string{dir + "/dlbundle.trace.0", dir + "/dlbundle.trace.2", dir + "/dlbundle.trace.10"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %v %v, want %v", got, err, want)
	}
	tree(t, dir, map[string]string{"dlbundle.trace": "x"})
	got, _ = DefaultTraces(dir)
	if got[0] != dir+"/dlbundle.trace" || len(got) != 4 {
		t.Fatalf("got %v", got)
	}
}

func TestLoadErrorsNameTheFileAndTheFix(t *testing.T) {
	dir := t.TempDir()
	p := newPilot(t)
	p.read("/usr/bin/env")
	good := filepath.Join(dir, "good.trace")
	p.save(good)
	cases := map[string]struct{ content, want string }{
		"notjson":  {"hello\n", "not a dlbundle trace"},
		"notrace":  {`{"rec":"header","format":"other","version":1}` + "\n", "not a dlbundle trace"},
		"version":  {`{"rec":"header","format":"dlbundle-trace","version":7}` + "\n", "version 7"},
		"empty":    {"", "empty"},
		"badevent": {`{"rec":"header","format":"dlbundle-trace","version":1}` + "\n" + `{"rec":"ev","t":"x"}` + "\n", ":2:"},
	}
	for name, c := range cases {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load([]string{good, p})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %v, want one naming %s and saying %q", name, err, p, c.want)
		}
	}
	_, err := Load([]string{filepath.Join(dir, "absent.trace")})
	if err == nil || !strings.Contains(err.Error(), "dlbundle trace") {
		t.Errorf("absent trace: %v", err)
	}
	ts, err := Load([]string{good})
	if err != nil || len(ts) != 1 || len(ts[0].Events) != 1 || ts[0].End == nil {
		t.Errorf("good trace: %v %v", ts, err)
	}
}

// Pilots accumulate: each pilot's name is the first free one, and
// DefaultTraces returns every pilot's files, pilot by pilot, ranks in order.
func TestNextTraceNeverReplacesAPilot(t *testing.T) {
	dir := t.TempDir()
	for i, want := range []string{"dlbundle.trace", "dlbundle.2.trace", "dlbundle.3.trace"} {
		got := NextTrace(dir, "")
		if got != filepath.Join(dir, want) {
			t.Fatalf("pilot %d: NextTrace = %s, want %s", i+1, got, want)
		}
		tree(t, dir, map[string]string{filepath.Base(got): "x"})
	}
	// ranks of a launcher: their own files decide
	if got := NextTrace(dir, "0"); got != filepath.Join(dir, "dlbundle.trace") {
		t.Fatalf("rank 0 with no rank file: %s", got)
	}
	tree(t, dir, map[string]string{"dlbundle.trace.0": "x", "dlbundle.trace.1": "x", "dlbundle.2.trace.0": "x", "dlbundle.x.trace": "x", "dlbundle.1.trace": "x"})
	if got := NextTrace(dir, "0"); got != filepath.Join(dir, "dlbundle.3.trace") {
		t.Fatalf("rank 0 after two 1-rank pilots: %s", got)
	}
	got, err := DefaultTraces(dir)
	var want []string
	for _, n := range []string{"dlbundle.trace", "dlbundle.trace.0", "dlbundle.trace.1", "dlbundle.2.trace", "dlbundle.2.trace.0", "dlbundle.3.trace"} {
		want = append(want, filepath.Join(dir, n))
	}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("DefaultTraces = %v %v, want %v", got, err, want)
	}
}

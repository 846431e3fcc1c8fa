package squash

import (
	"bytes"
	"testing"

	"github.com/dlbundle/dlbundle/trace"
)

// FuzzBuild feeds arbitrary traces (a trace is user input) through the reader
// and the planner: no panic, and every plan keeps the invariants the writer
// and loader rely on. Paths point at the real file system, read-only.
func FuzzBuild(f *testing.F) {
	hdr := `{"rec":"header","format":"dlbundle-trace","version":1,"command":["x"],"cwd":"/","start":"2026-01-01T00:00:00Z"}` + "\n"
	for _, evs := range []string{
		`{"rec":"ev","t":1,"op":"exec","path":"/usr/bin/env"}`,
		`{"rec":"ev","t":1,"op":"open","path":"/lib/x86_64-linux-gnu/libc.so.6","fd":3,"size":1,"mtime_ns":2}`,
		`{"rec":"ev","t":2,"op":"stat","path":"/usr/lib/x86_64-linux-gnu/tls/x.so","err":"ENOENT"}`,
		`{"rec":"ev","t":3,"op":"listdir","path":"/usr/lib/python3.11/json","entries":[{"name":"a","type":"reg"}]}`,
		`{"rec":"ev","t":4,"op":"rename","path":"/usr/lib/__pycache__/a.pyc.1","path2":"/usr/lib/__pycache__/a.pyc"}`,
		`{"rec":"ev","t":5,"op":"open","path":"/etc/../usr/./bin/../bin/env/x","err":"ENOTDIR"}`,
		`{"rec":"ev","t":6,"op":"mystery","path":"/usr/bin","path2":"/"}`,
	} {
		f.Add([]byte(hdr + evs + "\n"))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := trace.Read(bytes.NewReader(data), "fuzz")
		if err != nil || len(tr.Events) > 64 {
			return
		}
		plan, err := Build([]*trace.Trace{tr}, Options{})
		if err != nil {
			t.Fatal(err) // Build fails only on bad options
		}
		rules, _ := NewRules(nil, nil)
		checkInvariants(t, plan, rules)
	})
}

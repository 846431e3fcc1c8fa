package view

import (
	"bytes"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/trace"
)

// FuzzWritePage: any trace the trace reader accepts gives a complete page,
// and no markup from the trace reaches it: the page has as many '<' as the
// page of the same trace with every '<' in its strings replaced by U+FFFD
// (one rune for one, so that layout and grouping stay the same).
func FuzzWritePage(f *testing.F) {
	f.Add([]byte(`{"rec":"header","format":"dlbundle-trace","version":1,"command":["/bin/x"],"start":"2026-01-01T00:00:00Z"}
{"rec":"ev","t":5,"pid":1,"op":"open","path":"/usr/lib/libc.so.6","fd":3,"size":100}
{"rec":"ev","t":9,"pid":1,"op":"stat","path":"/opt/<b>x</b>","err":"ENOENT"}
{"rec":"end","exit":0,"events":2,"wall_ns":10}
`))
	f.Add([]byte(`{"rec":"header","format":"dlbundle-trace","version":1,"command":["<script>"],"host":"<i>","start":""}
{"rec":"ev","t":-7,"pid":1,"op":"listdir","path":"/"}
{"rec":"ev","t":9223372036854775807,"pid":1,"op":"open","path":"relative<svg>","size":-5,"err":"<E>"}
`))
	page := func(t *testing.T, tr *trace.Trace) string {
		var out bytes.Buffer
		if err := Write(&out, Input{Traces: []*trace.Trace{tr}, TraceNames: []string{"fuzz"}}); err != nil {
			t.Fatalf("Write: %v", err)
		}
		if !strings.Contains(out.String(), "</html>") {
			t.Fatalf("page is cut short")
		}
		return out.String()
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if bytes.Contains(b, []byte("\uFFFD")) || bytes.Contains(b, []byte(`\ufffd`)) || bytes.Contains(b, []byte(`\uFFFD`)) {
			return // the stand-in must not be in the input
		}
		tr, err := trace.Read(bytes.NewReader(b), "fuzz")
		if err != nil {
			return
		}
		got := page(t, tr)
		safe := func(s string) string { return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "<", "\uFFFD") }
		h := &tr.Header
		for i := range h.Command {
			h.Command[i] = safe(h.Command[i])
		}
		h.Host, h.Glibc, h.Start, h.Rank, h.Cwd = safe(h.Host), safe(h.Glibc), safe(h.Start), safe(h.Rank), safe(h.Cwd)
		for i := range tr.Events {
			e := &tr.Events[i]
			e.Path, e.Path2, e.Err, e.Syscall, e.Op = safe(e.Path), safe(e.Path2), safe(e.Err), safe(e.Syscall), trace.Op(safe(string(e.Op)))
		}
		if n, want := strings.Count(got, "<"), strings.Count(page(t, tr), "<"); n != want {
			t.Fatalf("page has %d '<', %d without the trace's: markup from the trace reached it", n, want)
		}
	})
}

package report

import (
	"bytes"
	"strings"
	"testing"
)

// Node-local paths by policy are listed apart, without advice to re-trace.
func TestSummaryNodeLocalApart(t *testing.T) {
	s := Summarize([]ProcessReport{
		{PID: 1, Passed: 3, PassedPaths: []string{"/etc/hosts", "/usr/lib/locale/C.utf8/LC_CTYPE", "/opt/app/lib/x.so"}},
		{PID: 2, Passed: 1, PassedPaths: []string{"/etc/hosts"}},
	})
	if len(s.Lacked) != 1 || s.Lacked[0].Path != "/opt/app/lib/x.so" {
		t.Errorf("lacked %+v, want only /opt/app/lib/x.so", s.Lacked)
	}
	if len(s.NodeLocal) != 2 || s.NodeLocal[0] != (PathCount{"/etc/hosts", 2}) {
		t.Errorf("node-local %+v, want /etc/hosts (2 processes) first, then the locale file", s.NodeLocal)
	}
	var buf bytes.Buffer
	if err := s.WriteText(&buf, 0); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	nl := strings.Index(text, "node-local paths passed through by policy")
	lacks := strings.Index(text, "paths the image lacks")
	if nl < 0 || lacks < 0 || !strings.Contains(text[nl:lacks], "/etc/hosts") || strings.Contains(text[lacks:], "/etc/hosts") {
		t.Errorf("node-local paths not listed apart from the lacked ones:\n%s", text)
	}
	only := Summarize([]ProcessReport{{PID: 1, Passed: 1, PassedPaths: []string{"/etc/hosts"}}})
	buf.Reset()
	if err := only.WriteText(&buf, 0); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "dlbundle trace") {
		t.Errorf("node-local paths alone got advice to re-trace:\n%s", buf.String())
	}
}

func FuzzReadReports(f *testing.F) {
	f.Add([]byte(`{"pid":1,"exe":"/bin/x","answered":3,"missing":1,"passed":2,"passed_paths":["/a","/proc/self/fd"],"dropped":0}` + "\n"))
	f.Add([]byte("not json\n{\"pid\":0}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, _, _ := ReadReports(bytes.NewReader(b))
		s := Summarize(rs)
		if s.Processes != len(rs) {
			t.Fatalf("processes %d != reports %d", s.Processes, len(rs))
		}
		var buf bytes.Buffer
		if err := s.WriteText(&buf, 3); err != nil {
			t.Fatal(err)
		}
	})
}

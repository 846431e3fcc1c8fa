package trace

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

// TestRoundTrip: what the Writer writes, Read gives back unchanged.
func TestRoundTrip(t *testing.T) {
	h := Header{Command: []string{"python3", "-c", "import json"}, Cwd: "/home/u", Env: map[string]string{"PATH": "/usr/bin"},
		Host: "n1", Kernel: "6.1.0", Glibc: "2.36", Dlbundle: "v1", Start: "2026-01-02T03:04:05.000000006Z", Rank: "7"}
	events := []Event{
		{T: 1, PID: 10, Op: OpOpen, Syscall: "openat", Path: "/usr/lib/x.so", Flags: 0x80000, FD: ptr(3), Size: ptr(int64(1 << 40)), MtimeNS: ptr(int64(1700000000123456789))},
		{T: 2, PID: 10, Op: OpStat, Syscall: "newfstatat", Path: "/nope \"quoted\" <&>", Flags: 0x100, Err: "ENOENT"},
		{T: 3, PID: 11, Op: OpListdir, Syscall: "getdents64", Path: "/d", Entries: []DirEntry{{"a", "reg"}, {"ü", "dir"}, {"l", "symlink"}}},
		{T: 4, PID: 11, Op: OpRename, Syscall: "rename", Path: "/a", Path2: "/b"},
		{T: 5, PID: 10, Op: OpSpawn, Syscall: "clone", FD: ptr(11)},
		{T: 6, PID: 11, Op: OpOpen, Syscall: "openat", Path: "/d", FD: ptr(4), Dir: true},
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	for i := range events {
		e := events[i]
		if err := w.Event(&e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(3, 99); err != nil {
		t.Fatal(err)
	}
	tr, err := Read(bytes.NewReader(buf.Bytes()), "mem")
	if err != nil {
		t.Fatal(err)
	}
	h.Rec, h.Format, h.Version = "header", FormatName, FormatVersion
	if !reflect.DeepEqual(tr.Header, h) {
		t.Errorf("header:\n got %+v\nwant %+v", tr.Header, h)
	}
	for i := range events {
		events[i].Rec = "ev"
	}
	if !reflect.DeepEqual(tr.Events, events) {
		t.Errorf("events:\n got %+v\nwant %+v", tr.Events, events)
	}
	if tr.End == nil || *tr.End != (End{Rec: "end", Exit: 3, Events: int64(len(events)), WallNS: 99}) {
		t.Errorf("end %+v", tr.End)
	}
	// Cut short: readable, no end record.
	lines := strings.SplitAfter(buf.String(), "\n")
	cut, err := Read(strings.NewReader(strings.Join(lines[:3], "")), "cut")
	if err != nil || cut.End != nil || len(cut.Events) != 2 {
		t.Errorf("cut trace: %v, end %v, %d events", err, cut.End, len(cut.Events))
	}
}

// TestTraceOfTrace: a real trace written by Run reads back, and writing the
// read records again gives the same bytes.
func TestTraceOfTrace(t *testing.T) {
	tr, res := traceRun(t, "/bin/sh", "-c", "ls / >/dev/null")
	orig, err := os.ReadFile(res.Output)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, tr.Header)
	for i := range tr.Events {
		w.Event(&tr.Events[i])
	}
	w.Close(tr.End.Exit, tr.End.WallNS)
	if !bytes.Equal(buf.Bytes(), orig) {
		t.Error("rewritten trace differs from the original")
	}
	if len(find(tr, OpListdir, "/")) != 1 {
		t.Errorf("no listing of / in:\n%s", dump(tr))
	}
}

func TestReadRefuses(t *testing.T) {
	for in, want := range map[string]string{
		"":                              "empty",
		"hello\n":                       "not JSON",
		`{"rec":"ev"}` + "\n":           `want "header"`,
		`{"rec":"header","format":"x"}`: "format",
		`{"rec":"header","format":"dlbundle-trace","version":2}`: "version 2",
	} {
		_, err := Read(strings.NewReader(in), "f")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
	_, err := Read(strings.NewReader("x"), "f")
	if !errors.Is(err, ErrNotTrace) {
		t.Errorf("not wrapped: %v", err)
	}
}

// FuzzRead: Read takes files from users; it must fail cleanly, never panic.
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"rec":"header","format":"dlbundle-trace","version":1,"command":["a"],"cwd":"/","start":"x"}` + "\n" +
		`{"rec":"ev","t":1,"pid":2,"op":"open","path":"/a","fd":3}` + "\n" + `{"rec":"end","exit":0}` + "\n"))
	f.Add([]byte("{}\n{}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := Read(bytes.NewReader(b), "fuzz")
		if err == nil && tr == nil {
			t.Fatal("nil trace without error")
		}
	})
}

package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
)

// encodingJSON is how the records were written before jsonenc.go, the
// reference: json.Encoder without HTML escaping.
func encodingJSON(t testing.TB, v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// awkward are strings that need every kind of escape encoding/json knows.
var awkward = []string{"", "plain/path.so", "q\"b\\s", "<&>", "\x00\x01\x1f\x7f", "\b\f\n\r\t", "ü€😀",
	"bad\xffutf8\xc3", "\u2028\u2029", "\xed\xa0\x80", "/a b/c"}

// TestEncoderMatchesEncodingJSON: every record, with and without each
// optional field, is written byte for byte as encoding/json writes it.
func TestEncoderMatchesEncodingJSON(t *testing.T) {
	var events []Event
	for i, s := range awkward {
		events = append(events,
			Event{Rec: "ev", T: int64(i) << 40, PID: -i, Op: Op(s), Syscall: s, Path: s, Path2: s, Flags: -i, Err: s},
			Event{Rec: "ev", T: 1, PID: 2, Op: OpOpen, FD: ptr(i), Size: ptr(int64(-i)), MtimeNS: ptr(int64(1) << 62), Dir: i%2 == 0},
			Event{Rec: "ev", Op: OpListdir, Entries: []DirEntry{{s, s}, {"x", "reg"}}},
			Event{Rec: "ev", Op: OpListdir, Entries: []DirEntry{}},
		)
	}
	for _, e := range events {
		if got, want := appendEvent(nil, &e), encodingJSON(t, &e); !bytes.Equal(got, want) {
			t.Errorf("event %+v:\n got %s\nwant %s", e, got, want)
		}
	}
	end := End{Rec: "end", Exit: -1, Events: 1 << 50, WallNS: 7}
	if got, want := appendEnd(nil, &end), encodingJSON(t, &end); !bytes.Equal(got, want) {
		t.Errorf("end:\n got %s\nwant %s", got, want)
	}
	long := make([]string, 5000)
	for i := range long {
		long[i] = awkward[i%len(awkward)] + strconv.Itoa(i)
	}
	for _, h := range []Header{
		{},
		{Rec: "header", Format: FormatName, Version: 1, Command: []string{}, Env: map[string]string{}},
		{Rec: "header", Command: awkward, Cwd: "/c\n", Env: map[string]string{"PATH": "/x", "LD_PRELOAD": "\"", "A\x01": "é"},
			Host: "h", Kernel: "k", Glibc: "2.36", Dlbundle: "v", Start: "s", Rank: "3"},
		{Rec: "header", Command: long}, // flushed to the output in pieces
	} {
		var got bytes.Buffer
		w := &Writer{bw: bufio.NewWriterSize(&got, 64<<10)}
		if err := writeHeader(w, &h); err != nil {
			t.Fatal(err)
		}
		if err := w.bw.Flush(); err != nil {
			t.Fatal(err)
		}
		if want := encodingJSON(t, &h); !bytes.Equal(got.Bytes(), want) {
			t.Errorf("header %d args:\n got %.300s\nwant %.300s", len(h.Command), got.Bytes(), want)
		}
	}
}

// FuzzEncodeString: any string, valid UTF-8 or not, is escaped as
// encoding/json escapes it.
func FuzzEncodeString(f *testing.F) {
	for _, s := range awkward {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := encodingJSON(t, s)
		if got := appendJSONString(nil, s); !bytes.Equal(append(got, '\n'), want) {
			t.Errorf("%q:\n got %s\nwant %s", s, got, want)
		}
	})
}

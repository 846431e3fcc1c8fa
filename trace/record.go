package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// FormatName and FormatVersion identify a trace file; see docs/trace-format.md.
const (
	FormatName    = "dlbundle-trace"
	FormatVersion = 1
)

// Op is what an event did to its path.
type Op string

// Operations, see docs/trace-format.md.
const (
	OpOpen     Op = "open"
	OpStat     Op = "stat"
	OpAccess   Op = "access"
	OpReadlink Op = "readlink"
	OpExec     Op = "exec"
	OpChdir    Op = "chdir"
	OpListdir  Op = "listdir"
	OpMkdir    Op = "mkdir"
	OpRmdir    Op = "rmdir"
	OpUnlink   Op = "unlink"
	OpRename   Op = "rename"
	OpLink     Op = "link"
	OpSymlink  Op = "symlink"
	OpTruncate Op = "truncate"
	OpChmod    Op = "chmod"
	OpUtime    Op = "utime"
	OpSpawn    Op = "spawn"
	OpMknod    Op = "mknod"
	OpChown    Op = "chown"
)

// Header is the first record of a trace.
type Header struct {
	Rec      string            `json:"rec"`
	Format   string            `json:"format"`
	Version  int               `json:"version"`
	Command  []string          `json:"command"`
	Cwd      string            `json:"cwd"`
	Env      map[string]string `json:"env,omitempty"`
	Host     string            `json:"host,omitempty"`
	Kernel   string            `json:"kernel,omitempty"`
	Glibc    string            `json:"glibc,omitempty"`
	Dlbundle string            `json:"dlbundle,omitempty"`
	Start    string            `json:"start"`
	Rank     string            `json:"rank,omitempty"`
}

// DirEntry is one name of a directory listing.
type DirEntry struct {
	Name string `json:"name"`
	Type string `json:"type"` // reg, dir, symlink, other
}

// Event is one observed operation.
type Event struct {
	Rec     string     `json:"rec"`
	T       int64      `json:"t"`
	PID     int        `json:"pid"`
	Op      Op         `json:"op"`
	Syscall string     `json:"sc,omitempty"`
	Path    string     `json:"path,omitempty"`
	Path2   string     `json:"path2,omitempty"`
	Flags   int        `json:"flags,omitempty"`
	Err     string     `json:"err,omitempty"`
	FD      *int       `json:"fd,omitempty"`
	Size    *int64     `json:"size,omitempty"`
	MtimeNS *int64     `json:"mtime_ns,omitempty"`
	Dir     bool       `json:"dir,omitempty"`
	Entries []DirEntry `json:"entries,omitempty"`
}

// End is the last record of a complete trace.
type End struct {
	Rec    string `json:"rec"`
	Exit   int    `json:"exit"`
	Events int64  `json:"events"`
	WallNS int64  `json:"wall_ns"`
}

// Open flag bits that make an open a write (Linux values, all architectures
// dlbundle supports).
const (
	oWronly = 0x1
	oRdwr   = 0x2
	oCreat  = 0x40
	oTrunc  = 0x200
)

// OK reports whether the operation succeeded.
func (e *Event) OK() bool { return e.Err == "" }

// Writes reports whether the event creates, changes or removes its path(s):
// such paths are volatile and never bundled. Unknown ops count as writes.
func (e *Event) Writes() bool {
	switch e.Op {
	case OpOpen:
		return e.Flags&(oWronly|oRdwr|oCreat|oTrunc) != 0
	case OpStat, OpAccess, OpReadlink, OpExec, OpChdir, OpListdir, OpSpawn:
		return false
	}
	return true
}

// Writer writes a trace as JSON Lines (jsonenc.go). It is not safe for
// concurrent use.
type Writer struct {
	bw      *bufio.Writer
	scratch []byte // one record, reused
	events  int64
}

// NewWriter writes h as the header record and returns a writer for events.
// Its buffer (64 KiB: each page costs a fault when first written) is flushed
// when full, while the tracee waits.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	tw := &Writer{bw: bufio.NewWriterSize(w, 64<<10), scratch: make([]byte, 0, 8192)}
	h.Rec, h.Format, h.Version = "header", FormatName, FormatVersion
	if err := writeHeader(tw, &h); err != nil {
		return nil, err
	}
	return tw, nil
}

// buf returns the record buffer, empty; write writes a record built in it
// and keeps its (possibly grown) storage.
func (w *Writer) buf() []byte { return w.scratch[:0] }

func (w *Writer) write(b []byte) error {
	w.scratch = b[:0]
	_, err := w.bw.Write(b)
	return err
}

// Event appends one event record.
func (w *Writer) Event(e *Event) error {
	e.Rec = "ev"
	w.events++
	return w.write(appendEvent(w.buf(), e))
}

// Close writes the end record and flushes. It does not close the underlying writer.
func (w *Writer) Close(exit int, wallNS int64) error {
	if err := w.write(appendEnd(w.buf(), &End{Rec: "end", Exit: exit, Events: w.events, WallNS: wallNS})); err != nil {
		return err
	}
	return w.bw.Flush()
}

// Flush writes buffered events to the underlying writer.
func (w *Writer) Flush() error { return w.bw.Flush() }

// Trace is a whole trace read into memory.
type Trace struct {
	Header Header
	Events []Event
	End    *End // nil when the trace was cut short
}

// ErrNotTrace is returned for input that is not a dlbundle trace.
var ErrNotTrace = errors.New("not a dlbundle trace")

// Read parses a whole trace. name is used in error messages only.
func Read(r io.Reader, name string) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	t := &Trace{}
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var probe struct {
			Rec string `json:"rec"`
		}
		if err := json.Unmarshal(b, &probe); err != nil {
			if line == 1 {
				return nil, fmt.Errorf("%s: %w (line 1 is not JSON: %v)", name, ErrNotTrace, err)
			}
			return nil, fmt.Errorf("%s:%d: bad record: %v", name, line, err)
		}
		if line == 1 {
			if probe.Rec != "header" {
				return nil, fmt.Errorf("%s: %w (first record is %q, want \"header\")", name, ErrNotTrace, probe.Rec)
			}
			if err := json.Unmarshal(b, &t.Header); err != nil {
				return nil, fmt.Errorf("%s:1: bad header: %v", name, err)
			}
			if t.Header.Format != FormatName {
				return nil, fmt.Errorf("%s: %w (format %q)", name, ErrNotTrace, t.Header.Format)
			}
			if t.Header.Version != FormatVersion {
				return nil, fmt.Errorf("%s: trace format version %d, this dlbundle reads version %d; re-run `dlbundle trace` with this dlbundle",
					name, t.Header.Version, FormatVersion)
			}
			continue
		}
		switch probe.Rec {
		case "ev":
			var e Event
			if err := json.Unmarshal(b, &e); err != nil {
				return nil, fmt.Errorf("%s:%d: bad event: %v", name, line, err)
			}
			t.Events = append(t.Events, e)
		case "end":
			var e End
			if err := json.Unmarshal(b, &e); err != nil {
				return nil, fmt.Errorf("%s:%d: bad end record: %v", name, line, err)
			}
			t.End = &e
		default:
			// Unknown record types are ignored (forward compatibility).
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if line == 0 {
		return nil, fmt.Errorf("%s: %w (empty file)", name, ErrNotTrace)
	}
	return t, nil
}

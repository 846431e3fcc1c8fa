package squash

import (
	"path"
	"sort"
	"strings"

	"github.com/dlbundle/dlbundle/trace"
)

// use is everything the merged traces say about one path.
type use struct {
	path string
	key  orderKey // first use

	read     bool // opened for reading (not as a directory), or exec'd, successfully
	exec     bool // exec'd successfully
	dirUse   bool // opened as a directory, listed, or made the cwd
	looked   bool // stat/access/readlink succeeded
	enoent   bool // a lookup failed with ENOENT
	enotdir  bool // a lookup failed with ENOTDIR
	otherErr string

	written bool // created, changed or removed during the pilot
	// reported: a run's process reports named it (FromLacks); pilot: a
	// pilot's trace or an image did. A path only reported is checked
	// against Options.Since (an output of the run is no input).
	reported, pilot bool
	pycWritten      bool // written only as Python writes a bytecode cache
	listChanged     bool // a name in this directory was created or removed (not by bytecode cache writes)
	openStats       []openStat
	pilotListing    map[string]bool // names of the first listing the pilot read
}

// openStat is a file's size and mtime as the tracer saw them at an open.
type openStat struct {
	size, mtimeNS int64
}

// orderKey orders first uses across traces: time since the pilot's start,
// then trace, then record. Ranks run concurrently, so "first use" is what a
// typical rank needs first.
type orderKey struct {
	t            int64
	trace, event int
	sub          int // paths the build adds for one record (addCatalogs): their order after it
}

func (a orderKey) less(b orderKey) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	if a.trace != b.trace {
		return a.trace < b.trace
	}
	if a.event != b.event {
		return a.event < b.event
	}
	return a.sub < b.sub
}

// uses collects per-path facts from all traces.
type uses struct {
	byPath map[string]*use
	events int
	// inReport: the events being added are made up from process reports
	// (FormatReport): a directory they name was not listed by any pilot,
	// so they set no pilotListing (its listing would be empty, and every
	// name in the directory would look new).
	inReport bool
}

func collect(traces []*trace.Trace) *uses {
	u := &uses{byPath: map[string]*use{}}
	for ti, t := range traces {
		reported := t.Header.Format == FormatReport
		u.inReport = reported
		for ei := range t.Events {
			u.events++
			if x := u.add(&t.Events[ei], orderKey{t: t.Events[ei].T, trace: ti, event: ei}); x != nil {
				x.reported = x.reported || reported
				x.pilot = x.pilot || !reported
			}
		}
	}
	return u
}

func (u *uses) get(p string, k orderKey) *use {
	x := u.byPath[p]
	if x == nil {
		x = &use{path: p, key: k}
		u.byPath[p] = x
	} else if k.less(x.key) {
		x.key = k
	}
	return x
}

// add records one event; it returns the use of a lookup's path (nil for
// writes and events without a path).
func (u *uses) add(e *trace.Event, k orderKey) *use {
	if e.Op == trace.OpSpawn || !path.IsAbs(e.Path) {
		return nil
	}
	p := path.Clean(e.Path)
	if e.Writes() {
		if e.Err == "" { // a failed write changed nothing
			u.addWrite(e, p, k)
		}
		return nil
	}
	x := u.get(p, k)
	u.addLookup(e, x)
	return x
}

func (u *uses) addLookup(e *trace.Event, x *use) {
	switch e.Err {
	case "":
	case "EINVAL":
		if e.Op != trace.OpReadlink {
			x.otherErr = e.Err
			return
		}
		// readlink of something that is not a symlink: the path exists.
	case "ENOENT":
		x.enoent = true
		return
	case "ENOTDIR":
		x.enotdir = true
		return
	default:
		x.otherErr = e.Err
		return
	}
	switch e.Op {
	case trace.OpOpen:
		if e.Dir {
			x.dirUse = true
			return
		}
		x.read = true
		if e.Size != nil && e.MtimeNS != nil {
			x.openStats = append(x.openStats, openStat{*e.Size, *e.MtimeNS})
		}
	case trace.OpExec:
		x.read, x.exec = true, true
	case trace.OpListdir:
		x.dirUse = true
		if x.pilotListing == nil && !u.inReport {
			x.pilotListing = make(map[string]bool, len(e.Entries))
			for _, d := range e.Entries {
				x.pilotListing[d.Name] = true
			}
		}
	case trace.OpChdir:
		x.dirUse = true
	default:
		x.looked = true
	}
}

// addWrite marks the paths of a modifying event volatile, except the writes
// Python makes to its bytecode caches (see isPycCacheWrite).
func (u *uses) addWrite(e *trace.Event, p string, k orderKey) {
	paths := []string{p}
	if e.Op != trace.OpSymlink && path.IsAbs(e.Path2) { // a symlink's path2 is link text
		paths = append(paths, path.Clean(e.Path2))
	}
	pyc := isPycCacheWrite(e, paths)
	changesNames := true // unknown ops count as changing names: the safe choice
	switch e.Op {
	case trace.OpTruncate, trace.OpChmod, trace.OpUtime, trace.OpChown:
		changesNames = false
	case trace.OpOpen:
		changesNames = e.Flags&0x40 != 0 // O_CREAT
	}
	for _, q := range paths {
		x := u.get(q, k)
		if pyc {
			x.pycWritten = true
		} else {
			x.written = true
		}
		if changesNames && !pyc { // a new __pycache__ or .pyc is not an output
			u.get(path.Dir(q), k).listChanged = true
		}
	}
}

// isPycCacheWrite recognises how CPython writes a bytecode cache:
// mkdir __pycache__, open(__pycache__/m.cpython-311.pyc.<id>, O_CREAT|O_EXCL|O_WRONLY),
// rename (os.replace) to __pycache__/m.cpython-311.pyc, unlink of the
// temporary file on failure.
func isPycCacheWrite(e *trace.Event, paths []string) bool {
	for _, q := range paths {
		base := path.Base(q)
		switch e.Op {
		case trace.OpMkdir:
			if base != "__pycache__" {
				return false
			}
			continue
		case trace.OpOpen, trace.OpRename, trace.OpUnlink:
		default:
			return false
		}
		if path.Base(path.Dir(q)) != "__pycache__" || !(isPycName(base) || isPycTempName(base)) {
			return false
		}
	}
	return true
}

func isPycName(base string) bool { return strings.HasSuffix(base, ".pyc") && len(base) > 4 }

// isPycTempName matches "<name>.pyc.<digits>", CPython's temporary file.
func isPycTempName(base string) bool {
	i := strings.LastIndex(base, ".pyc.")
	if i <= 0 {
		return false
	}
	digits := base[i+5:]
	if digits == "" {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// inOrder returns the uses sorted by first use.
func (u *uses) inOrder() []*use {
	out := make([]*use, 0, len(u.byPath))
	for _, x := range u.byPath {
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key.less(out[j].key) })
	return out
}

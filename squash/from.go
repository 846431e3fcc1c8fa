package squash

import (
	"path"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/trace"
)

// Formats of the traces made up from other inputs than a pilot run
// (Header.Format): Build merges them like any trace, but does not record
// their headers as pilots nor compare their commands with the pilots'.
const (
	// FormatImage: the entries of an existing image (build --from).
	FormatImage = "dlbundle-image"
	// FormatReport: what the processes of a run passed to the file system
	// (dlbundle exec's process reports).
	FormatReport = "dlbundle-report"
)

// FromImage makes a trace out of an image's entries, so that a build folds
// them in as if a pilot had used them again, in the image's load order: each
// bundled file as read (with the size and mtime it had when it was bundled,
// so that a file changed since is reported and left out as for any pilot),
// each directory as listed (with its listing then), each symlink as read,
// each missing name as a failed lookup and each external path as stat'd.
// The build decides again, on the file system as it is now and with its own
// rules, what each becomes: the same policy as any build. name is the
// image's file name, for messages.
func FromImage(entries []image.Entry, name string) *trace.Trace {
	t := &trace.Trace{
		Header: trace.Header{Rec: "header", Format: FormatImage, Version: trace.FormatVersion, Command: []string{name}, Cwd: "/"},
		End:    &trace.End{Rec: "end"},
	}
	for _, e := range entries {
		ev := trace.Event{Rec: "ev", T: int64(e.Order), Path: e.Path}
		switch e.Type {
		case image.TypeRegular:
			size, mt := e.Size, e.MtimeNS
			ev.Op, ev.Size, ev.MtimeNS = trace.OpOpen, &size, &mt
			if e.Kind == image.KindELFExec || e.Kind == image.KindScript {
				// its interpreter is bundled with it (the kernel opens it)
				ev.Op, ev.Size, ev.MtimeNS = trace.OpExec, nil, nil
			}
		case image.TypeDir:
			ev.Op = trace.OpListdir
			for _, d := range e.Listing {
				ev.Entries = append(ev.Entries, trace.DirEntry{Name: d.Name, Type: listingType(d.Type)})
			}
		case image.TypeSymlink:
			ev.Op = trace.OpReadlink
		case image.TypeMissing:
			ev.Op, ev.Err = trace.OpStat, "ENOENT"
		default: // external: it existed and was looked up
			ev.Op = trace.OpStat
		}
		t.Events = append(t.Events, ev)
	}
	t.End.Events = int64(len(t.Events))
	return t
}

func listingType(t image.Type) string {
	switch t {
	case image.TypeRegular:
		return "reg"
	case image.TypeDir, image.TypeSymlink:
		return string(t)
	}
	return "other"
}

// Lack is one path a run passed to the file system, as its process
// reports say: what a build folds in so that the next run finds it in
// the image.
type Lack struct {
	Path string
	// Library: ld.so loaded it (a shared object from outside the image):
	// bundled as read, whatever its size.
	Library bool
}

// FromLacks makes a trace out of what runs passed to the file system. A
// report names a path, not the call: a path that is a regular file now
// is folded in as read (bundled, whatever its size: the run's processes
// went to the file system for it, and a size rule would send them there
// again), a directory as listed, a path that does not exist as a failed
// lookup (kept as missing where its directory is in the image). Relative
// paths are left out (a report does not say against which directory).
// order starts after the events of the other inputs, so that what the
// pilots used keeps its place in the load order.
func FromLacks(lacks []Lack, name string, order int64) *trace.Trace {
	t := &trace.Trace{
		Header: trace.Header{Rec: "header", Format: FormatReport, Version: trace.FormatVersion, Command: []string{name}, Cwd: "/"},
		End:    &trace.End{Rec: "end"},
	}
	for i, l := range lacks {
		if !path.IsAbs(l.Path) {
			continue
		}
		p := path.Clean(l.Path)
		var st fileKind
		if l.Library {
			st = kindReg
		} else {
			st = kindOf(p)
		}
		ev := trace.Event{Rec: "ev", T: order + int64(i), Path: p}
		switch st {
		case kindReg:
			ev.Op = trace.OpOpen // no size or mtime: nothing to compare with
			if !l.Library && isExecutable(p) {
				// a program a served process started that the image
				// lacks: bundled as a program, with its interpreter
				ev.Op = trace.OpExec
			}
		case kindDir:
			ev.Op = trace.OpListdir
		case kindMissing:
			ev.Op, ev.Err = trace.OpStat, "ENOENT"
		case kindNotDir:
			ev.Op, ev.Err = trace.OpStat, "ENOTDIR"
		default:
			ev.Op = trace.OpStat
		}
		t.Events = append(t.Events, ev)
	}
	t.End.Events = int64(len(t.Events))
	return t
}

type fileKind int

const (
	kindOther fileKind = iota
	kindReg
	kindDir
	kindMissing
	kindNotDir
)

// kindOf says what p is now, following symlinks as the run's lookup did.
func kindOf(p string) fileKind {
	var st unix.Stat_t
	switch err := unix.Stat(p, &st); {
	case err == unix.ENOENT:
		return kindMissing
	case err == unix.ENOTDIR:
		return kindNotDir
	case err != nil:
		return kindOther
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return kindReg
	case unix.S_IFDIR:
		return kindDir
	}
	return kindOther
}

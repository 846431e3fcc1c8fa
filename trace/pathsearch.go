package trace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// recordPathSearch records the pilot's own search of a bare command name
// along PATH (ResolveCommand, in dlbundle, which the tracer does not see):
// each directory searched before the one that holds the command, as
// listed, and the candidate that failed there. A build then holds those
// directories with their listings, and exec's search of the same name
// (loader.ImageLacks) skips every candidate there with no call on the file
// system. found is the path ResolveCommand returned.
func recordPathSearch(rec *recorder, name, found, pathEnv string, start time.Time) {
	if name == "" || strings.Contains(name, "/") {
		return
	}
	foundAbs := absPath(found)
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "." // an empty entry is the working directory, as for a shell
		}
		d = absPath(d)
		cand := filepath.Join(d, name)
		if cand == foundAbs {
			return
		}
		ents, err := os.ReadDir(d)
		if errors.Is(err, syscall.ENOENT) {
			// A directory that does not exist: the listing of its nearest
			// existing ancestor, and the lookup that fails in it.
			missing := d
			for filepath.Dir(missing) != missing {
				up := filepath.Dir(missing)
				if es, err := os.ReadDir(up); err == nil {
					rec.emit(listdirEvent(up, es), start)
					break
				}
				missing = up
			}
			rec.emit(&Event{PID: 0, Op: OpStat, Syscall: "newfstatat", Path: missing, Err: "ENOENT"}, start)
			continue
		}
		if err != nil {
			rec.emit(&Event{PID: 0, Op: OpStat, Syscall: "newfstatat", Path: cand, Err: errName(err)}, start)
			continue
		}
		rec.emit(listdirEvent(d, ents), start)
		var st syscall.Stat_t
		if err := syscall.Stat(cand, &st); err != nil {
			rec.emit(&Event{PID: 0, Op: OpStat, Syscall: "newfstatat", Path: cand, Err: errName(err)}, start)
		} else {
			// there but not a program the search takes (not executable,
			// a directory): stat'd, as the search did
			rec.emit(&Event{PID: 0, Op: OpStat, Syscall: "newfstatat", Path: cand}, start)
		}
	}
}

// errName is the errno name of a file system error ("ENOENT"), or "EIO".
func errName(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errnoName(errno)
	}
	return "EIO"
}

// listdirEvent is the listing of d as a listdir event.
func listdirEvent(d string, ents []os.DirEntry) *Event {
	ev := &Event{PID: 0, Op: OpListdir, Syscall: "getdents64", Path: d}
	for _, e := range ents {
		typ := "other"
		switch {
		case e.Type().IsRegular():
			typ = "reg"
		case e.IsDir():
			typ = "dir"
		case e.Type()&os.ModeSymlink != 0:
			typ = "symlink"
		}
		ev.Entries = append(ev.Entries, DirEntry{Name: e.Name(), Type: typ})
	}
	return ev
}

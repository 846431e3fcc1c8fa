package stagefmt

import (
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// MapTable maps the stage's lookup table read-only for exec's own
// lookups (the command, a #! script, LD_LIBRARY_PATH entries); release
// drops the caller's use of it. Every rank of a warm job does this before
// the app runs: reading the table (440 KB for a one-binary image, megabytes
// for Python) copied all of it into fresh heap pages, once per PATH entry
// tried, where a mapping faults in only the few pages a lookup visits, from
// the page cache.
//
// The last table mapped stays mapped (tableMaps) and later calls for the
// same file reuse it: exec asks the table two to four times, and each new
// mapping cost an mmap, page faults again on the same pages, and an munmap,
// which in a process with several threads sends every CPU they ran on an
// interrupt to flush its TLB (~0.5 ms of CPU per warm exec, docs/bench/cli.md).
// The exec'd app does not inherit it: execve drops every mapping.
func MapTable(stageDir string) (tab []byte, release func(), err error) {
	path := filepath.Join(stageDir, TableFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Size == 0 {
		return nil, func() {}, nil // mmap refuses 0 bytes; an empty table finds nothing
	}
	key := tableKey{path: path, dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
	tableMaps.Lock()
	defer tableMaps.Unlock()
	m := tableMaps.cur
	if m == nil || m.key != key {
		tab, err := unix.Mmap(int(f.Fd()), 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return nil, nil, &os.PathError{Op: "mmap", Path: path, Err: err}
		}
		if old := tableMaps.cur; old != nil {
			old.current = false
			old.unmapIfUnused()
		}
		m = &tableMap{key: key, tab: tab, current: true}
		tableMaps.cur = m
	}
	m.refs++
	var once sync.Once
	return m.tab, func() {
		once.Do(func() {
			tableMaps.Lock()
			defer tableMaps.Unlock()
			m.refs--
			m.unmapIfUnused()
		})
	}, nil
}

// tableMaps holds the last table mapped. A mapping that is no longer the
// last one is unmapped when its last user releases it.
var tableMaps struct {
	sync.Mutex
	cur *tableMap
}

// tableKey identifies one version of a table file: a stage rebuilt at the
// same path (gc, then staging again) has another inode, a file changed in
// place another ctime.
type tableKey struct {
	path         string
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

type tableMap struct {
	key     tableKey
	tab     []byte
	refs    int  // callers that have not released it
	current bool // tableMaps.cur
}

// unmapIfUnused unmaps m once nobody uses it and it is not the current one;
// the caller holds tableMaps.
func (m *tableMap) unmapIfUnused() {
	if m.refs == 0 && !m.current && m.tab != nil {
		unix.Munmap(m.tab)
		m.tab = nil
	}
}

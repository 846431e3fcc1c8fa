package loader

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// mapStageTable maps the stage's lookup table read-only for exec's own
// lookups (the command, LD_LIBRARY_PATH entries); release unmaps it. Every
// rank of a warm job does this before the app runs: reading the table (440
// KB for a one-binary image, megabytes for Python) copied all of it into
// fresh heap pages, once per PATH entry tried, where a mapping faults in
// only the few pages a lookup visits, from the page cache.
func mapStageTable(stageDir string) (tab []byte, release func(), err error) {
	f, err := os.Open(filepath.Join(stageDir, stageTable))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if st.Size() == 0 {
		return nil, func() {}, nil // mmap refuses 0 bytes; an empty table finds nothing
	}
	tab, err = unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return tab, func() { unix.Munmap(tab) }, nil
}

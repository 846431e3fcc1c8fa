package image

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenSource opens a source file or directory for reading without moving its
// access time (O_NOATIME), so that the build's own reads do not change what
// the next build of the same inputs records as atime_ns (docs/SPEC.md,
// section 2). O_NOATIME is allowed to the owner and to root only; anyone
// else gets a plain open.
func OpenSource(p string) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) {
		return os.Open(p)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// SameSource fails when f, a source opened for e and read, is not the file
// the plan examined: another device or inode (a name swapped after the
// scan's readability check: a private file must not reach an image made
// for more readers), or another size or mtime (changed since). It is
// checked on the descriptor after the content was read, so what was copied
// is what was checked. An entry planned without an identity (Ino 0: built
// by a caller, not scanned) is not checked.
func SameSource(f *os.File, e *Entry) error {
	if e.Ino == 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("reading %s: %w", quote(e.Path), err)
	}
	switch {
	case st.Dev != e.Dev || st.Ino != e.Ino:
		return fmt.Errorf("%s: another file (device %d inode %d) is at its name than the one the build examined (device %d inode %d): it was replaced during the build; nothing of it is written, rebuild",
			quote(e.Path), st.Dev, st.Ino, e.Dev, e.Ino)
	case e.Type == TypeRegular && st.Size != e.Size,
		e.MtimeNS != 0 && unix.TimespecToNsec(st.Mtim) != e.MtimeNS:
		return fmt.Errorf("%s: changed while the image was written (size %d, mtime %d; examined: %d, %d); rebuild",
			quote(e.Path), st.Size, unix.TimespecToNsec(st.Mtim), e.Size, e.MtimeNS)
	}
	return nil
}

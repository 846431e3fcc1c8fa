package image

import (
	"errors"
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

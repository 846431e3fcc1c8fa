package stagefmt

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// stagedTree reads files of a staged tree (STAGE/root) by their image path
// while staging, without ever leaving the tree: the tree holds the image's
// symlinks, and a relative one such as ../../../../etc would otherwise lead
// a stager (root, in a Prolog) to read a file of the node by a name the
// image chose. An open resolves below the tree's root only
// (openat2 RESOLVE_BENEATH, no symlink followed at all: a path the table
// names as a regular file has none on its way), never blocks (O_NONBLOCK: a
// FIFO) and yields regular files only. Kernels before 5.6 have no openat2:
// there os.Root walks the path one component at a time and follows
// symlinks only while they stay inside.
type stagedTree struct {
	dir  string
	fd   int      // O_PATH descriptor of the root, for openat2
	root *os.Root // the fallback, opened when openat2 is missing
}

// withoutOpenat2 makes stagedTree act as on a kernel without openat2 (tests).
var withoutOpenat2 = false

func openStagedTree(dir string) (*stagedTree, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("staged tree %s: %w", dir, err)
	}
	return &stagedTree{dir: dir, fd: fd}, nil
}

func (s *stagedTree) Close() {
	unix.Close(s.fd)
	if s.root != nil {
		s.root.Close()
	}
}

// open opens the staged copy of the image path p (absolute) for reading; it
// fails unless that is a regular file reached below the root.
func (s *stagedTree) open(p string) (*os.File, error) {
	rel := strings.TrimLeft(p, "/")
	if rel == "" {
		rel = "."
	}
	const flags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	var f *os.File
	fd, err := -1, error(unix.ENOSYS)
	if !withoutOpenat2 {
		fd, err = unix.Openat2(s.fd, rel, &unix.OpenHow{Flags: flags,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
	}
	switch {
	case err == nil:
		f = os.NewFile(uintptr(fd), p)
	case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM):
		// no openat2 (kernel < 5.6, or a seccomp filter that refuses it)
		if s.root == nil {
			if s.root, err = os.OpenRoot(s.dir); err != nil {
				return nil, err
			}
		}
		if f, err = s.root.OpenFile(rel, flags, 0); err != nil {
			return nil, err
		}
	default:
		return nil, &os.PathError{Op: "openat2", Path: p, Err: err}
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &os.PathError{Op: "open", Path: p, Err: errors.New("not a regular file")}
	}
	return f, nil
}

// Package outfile writes dlbundle's outputs (trace -o, --html pages,
// build -o, pull -o) the one way that is safe for whoever runs it, root
// included, at a path someone else may have prepared:
//
//   - the path is walked by package trustpath's Write rule (nothing another
//     user made in a directory every user can write, only root's or the
//     caller's symbolic links followed);
//   - a regular file of the caller's, or no file, is replaced atomically: the
//     output is written to a temporary file in the same directory (made with
//     O_EXCL from the directory's descriptor) and renamed over the name when
//     complete, so a reader sees the old file or the whole new one;
//   - a character device or a FIFO (-o /dev/null, a named pipe a reader
//     waits on) is written to directly, never replaced: rename would turn
//     /dev/null into a regular file, for every user of the node;
//   - anything else (another user's file, a directory, a socket, a block
//     device) is refused, naming what is there.
//
// The final mode is the caller's (Private or Public, both less the umask):
// traces and pages list argv, the working directory and every path a run
// looked up (~/.netrc among them), so they are private by default.
package outfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/internal/trustpath"
)

// File is an output being written.
type File struct {
	*os.File        // where to write: the temporary file, or the device or FIFO itself
	Final    string // the path asked for
	dir      *trustpath.Dir
	name     string // the final entry's name in dir (symbolic links followed)
	tmp      string // name of the temporary file in dir; "" when written directly
	done     bool
}

// Direct reports whether the output goes straight to a device or FIFO (no
// temporary file, nothing renamed, the mode left as it is).
func (f *File) Direct() bool { return f.tmp == "" }

// Create opens the output path for writing. what names the output in
// messages ("trace", "page", "image"); flag is the option that chose it
// ("-o", "--html"), for the advice.
func Create(path, what, flag string) (*File, error) { return CreateWith(path, what, flag, nil) }

// CreateWith is Create with the temporary file made by newTemp (as
// os.CreateTemp, in the walked directory's path): build uses it to give the
// image a Lustre layout, which only the creation of a file can set. The file
// it makes must be in the walked directory (checked by inode).
func CreateWith(path, what, flag string, newTemp func(dir, pattern string) (*os.File, error)) (*File, error) {
	last, err := walkOutput(path, what, flag)
	if err != nil {
		return nil, err
	}
	f := &File{Final: path, dir: last.Dir, name: last.Name}
	if t := last.Node.Type(); last.Exists && (t == unix.S_IFCHR || t == unix.S_IFIFO) {
		return f.openDirect(last.Name, last.Node, what)
	}
	base := last.Name
	if len(base) > 200 {
		base = base[:200]
	}
	if newTemp != nil {
		t, err := newTemp(f.dir.Path, "."+base+".tmp-*")
		if err != nil {
			last.Close()
			return nil, fmt.Errorf("cannot write the %s beside %s: %v; choose a writable %s", what, path, unwrap(err), flag)
		}
		var st, in unix.Stat_t
		name := filepath.Base(t.Name())
		if unix.Fstat(int(t.Fd()), &st) != nil || unix.Fstatat(f.dir.FD, f.dir.Name(name), &in, unix.AT_SYMLINK_NOFOLLOW) != nil ||
			st.Dev != in.Dev || st.Ino != in.Ino {
			t.Close()
			last.Close()
			return nil, fmt.Errorf("cannot write the %s beside %s: its directory changed while the file was created", what, path)
		}
		f.tmp, f.File = name, t
		return f, nil
	}
	for range 100 {
		var r [8]byte
		rand.Read(r[:])
		name := "." + base + ".tmp-" + hex.EncodeToString(r[:])
		fd, err := unix.Openat(f.dir.FD, f.dir.Name(name), unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			last.Close()
			return nil, fmt.Errorf("cannot write the %s beside %s: %v; choose a writable %s", what, path, err, flag)
		}
		f.tmp = name
		f.File = os.NewFile(uintptr(fd), f.dir.Join(name))
		return f, nil
	}
	last.Close()
	return nil, fmt.Errorf("cannot write the %s beside %s: no free temporary name", what, path)
}

// walkOutput walks to path by the Write rule and refuses what an output
// must never replace: a directory, another user's file, a socket or a block
// device. A character device or FIFO is returned as it is.
func walkOutput(path, what, flag string) (*trustpath.Last, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	euid := uint32(os.Geteuid())
	last, err := (&trustpath.Walker{Rule: trustpath.Write, Uid: euid}).Walk(abs)
	if err != nil {
		var refusal *trustpath.Error
		if errors.As(err, &refusal) {
			return nil, fmt.Errorf("cannot write the %s to %s: %s, %s; choose another %s, in a directory of yours", what, path, refusal.At, refusal.Why, flag)
		}
		return nil, fmt.Errorf("cannot write the %s to %s: %v; choose a writable %s", what, path, unwrap(err), flag)
	}
	if !last.Exists {
		return last, nil
	}
	switch n := last.Node; {
	case n.Type() == unix.S_IFCHR || n.Type() == unix.S_IFIFO:
	case n.Type() == unix.S_IFDIR:
		last.Close()
		return nil, fmt.Errorf("%s %s is a directory; give a file name with %s", what, path, flag)
	case n.Type() != unix.S_IFREG:
		last.Close()
		return nil, fmt.Errorf("%s %s is %s; dlbundle writes only to a regular file of yours (replaced when the %s is complete), a character device or a FIFO; choose another %s",
			what, path, kind(n.Mode), what, flag)
	case n.Uid != euid:
		last.Close()
		return nil, fmt.Errorf("%s %s is a file of uid %d, not yours (uid %d): dlbundle replaces only your own files; remove it or choose another %s",
			what, path, n.Uid, euid, flag)
	}
	return last, nil
}

// openDirect opens a character device or FIFO for writing, from the walked
// directory, and checks it is the file that was walked to. A FIFO no one
// reads is refused (ENXIO) rather than waited on.
func (f *File) openDirect(name string, n trustpath.Node, what string) (*File, error) {
	fd, err := unix.Openat(f.dir.FD, f.dir.Name(name), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err == unix.ENXIO {
		f.dir.Close()
		return nil, fmt.Errorf("cannot write the %s to %s: it is a FIFO that no process reads; start its reader first", what, f.Final)
	}
	if err != nil {
		f.dir.Close()
		return nil, fmt.Errorf("cannot write the %s to %s: %v", what, f.Final, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Dev != n.Dev || st.Ino != n.Ino {
		unix.Close(fd)
		f.dir.Close()
		return nil, fmt.Errorf("cannot write the %s to %s: it changed while it was being opened", what, f.Final)
	}
	// Writes block as usual from now on (a pipe's reader may be slow).
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
		unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
	f.File = os.NewFile(uintptr(fd), f.Final)
	return f, nil
}

// Commit completes the output: the temporary file gets mode (less nothing:
// pass Private() or Public(), which apply the umask) and is renamed over
// the final name; a device or FIFO is closed.
func (f *File) Commit(mode os.FileMode) error {
	defer f.dir.Close()
	if f.Direct() {
		f.done = true
		if err := f.File.Close(); err != nil {
			return fmt.Errorf("writing %s: %v", f.Final, err)
		}
		return nil
	}
	err := f.File.Chmod(mode)
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(f.dir.FD, f.dir.Name(f.tmp), f.dir.FD, f.dir.Name(f.name))
	}
	if err != nil {
		unix.Unlinkat(f.dir.FD, f.dir.Name(f.tmp), 0)
		return fmt.Errorf("writing %s: %v", f.Final, err)
	}
	f.done = true
	return nil
}

// Discard removes the temporary file (nothing is renamed); a device or FIFO
// is closed. Safe after Commit.
func (f *File) Discard() {
	if f.done {
		return
	}
	f.done = true
	f.File.Close()
	if !f.Direct() {
		unix.Unlinkat(f.dir.FD, f.dir.Name(f.tmp), 0)
	}
	f.dir.Close()
}

// Private is mode 0600 less the umask: the default for traces and pages.
func Private() os.FileMode { return 0o600 &^ Umask() }

// Public is mode 0666 less the umask, as a shell's redirection makes.
func Public() os.FileMode { return 0o666 &^ Umask() }

// Umask is the process's umask, read from /proc/self/status (setting it to
// read it back would race with other threads creating files).
func Umask() os.FileMode {
	b, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Umask:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return os.FileMode(m)
				}
			}
		}
	}
	return 0o022
}

func unwrap(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}

func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return "not a regular file"
}

// CheckReplace refuses what Create would refuse at path, and also a device
// or FIFO: for writers that must replace a whole file by rename (pull, which
// rewinds and retries its download). It creates nothing.
func CheckReplace(path, what, flag string) error {
	last, err := walkOutput(path, what, flag)
	if err != nil {
		return err
	}
	defer last.Close()
	if last.Exists && last.Node.Type() != unix.S_IFREG {
		return fmt.Errorf("%s %s is a device or FIFO; %s writes a whole file and renames it into place: give a file name with %s", what, path, what, flag)
	}
	return nil
}

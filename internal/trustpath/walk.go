package trustpath

import (
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// AtRoot is the descriptor that stands for /: calls there take "/" + name
// (/ is never opened; see the package comment).
const AtRoot = unix.AT_FDCWD

// maxLinks bounds the symbolic links one walk follows (as the kernel's 40).
const maxLinks = 40

// fsys is what the walk asks of the file system: the real one (*at calls on
// descriptors) or, in tests, a model of one.
type fsys interface {
	// open opens name in dir with O_PATH|O_NOFOLLOW (a symbolic link is
	// opened itself) and returns its fstat.
	open(dir int, name string) (int, Node, error)
	// readlink reads the symbolic link opened as fd.
	readlink(fd int) (string, error)
	mkdir(dir int, name string, mode uint32) error
	close(fd int)
}

// Walker walks paths under one rule for one caller.
type Walker struct {
	Rule Rule
	Uid  uint32 // the caller: root or the user the walk is for
	// Create makes the missing directories on the way (mode 0755, less the
	// umask), each in the directory just checked: mkdir -p without
	// following anything the rule refuses.
	Create bool

	fs fsys // nil: the real file system
}

// For returns a walker for the calling process's effective uid.
func For(rule Rule) *Walker { return &Walker{Rule: rule, Uid: uint32(os.Geteuid())} }

// Dir is a directory the walk reached and trusts, held by descriptor.
type Dir struct {
	FD   int    // O_PATH descriptor, AtRoot for /
	Path string // absolute, symbolic links resolved
	Node Node   // its fstat (rootNode for /)
	rule Rule
	uid  uint32
	fs   fsys
}

// Name is c as the *at calls on d take it.
func (d *Dir) Name(c string) string {
	if d.FD == AtRoot {
		return "/" + c
	}
	return c
}

// Join is the path of entry c of d.
func (d *Dir) Join(c string) string { return path.Join(d.Path, c) }

// Close releases the descriptor.
func (d *Dir) Close() {
	if d != nil && d.FD != AtRoot {
		d.fs.close(d.FD)
		d.FD = AtRoot - 1
	}
}

// Check applies the rule to entry c of d, whose fstat (on the descriptor
// the caller opened) is n: nil if it may be used. asked is the path the
// caller was given, for the message.
func (d *Dir) Check(asked, c string, n Node) error {
	if why := d.rule.Verdict(d.uid, d.Path, d.Node, n); why != "" {
		return &Error{Path: asked, At: d.Join(c), Why: why}
	}
	return nil
}

// Last is where a path ends: the trusted directory that holds its last
// entry, and that entry's name there (every symbolic link followed). When
// Exists, Node is the entry's fstat and the rule accepted it; else there is
// no such entry (yet).
type Last struct {
	Dir    *Dir
	Name   string
	Node   Node
	Exists bool
}

// Close releases the directory.
func (l *Last) Close() { l.Dir.Close() }

// Path is the last entry's path, symbolic links resolved.
func (l *Last) Path() string { return l.Dir.Join(l.Name) }

// Walk resolves abs (absolute) as the kernel would, following every
// symbolic link, the last one included, and applying the rule to each entry
// it meets: a refusal is an *Error. It returns the last entry's directory,
// open, and the entry.
func (w *Walker) Walk(abs string) (*Last, error) {
	last, _, err := w.walk(abs, false)
	return last, err
}

// WalkDir resolves abs as Walk does and enters it: every component is a
// directory on the way (created if missing when Create).
func (w *Walker) WalkDir(abs string) (*Dir, error) {
	_, d, err := w.walk(abs, true)
	return d, err
}

type step struct {
	path string
	node Node
}

// walk is the one loop: one component at a time, each opened with
// O_PATH|O_NOFOLLOW in the directory held (never by a path from / again),
// checked on its fstat, then entered, followed or returned.
func (w *Walker) walk(abs string, enterLast bool) (*Last, *Dir, error) {
	if !strings.HasPrefix(abs, "/") {
		return nil, nil, fmt.Errorf("%s: not an absolute path", abs)
	}
	fs := w.fs
	if fs == nil {
		fs = realFS{}
	}
	cur := &Dir{FD: AtRoot, Path: "/", Node: rootNode, rule: w.Rule, uid: w.Uid, fs: fs}
	stack := []step{{"/", rootNode}} // the directories entered, / first
	fail := func(err error) (*Last, *Dir, error) {
		cur.Close()
		return nil, nil, err
	}
	enter := func(fd int, p string, n Node) {
		cur.Close()
		cur.FD, cur.Path, cur.Node = fd, p, n
	}
	pending := strings.Split(abs, "/")
	links := 0
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		// A path that ends in /, /. or /.. names a directory: its last
		// name is entered, as with enterLast, and the walk then fails.
		isLast := !enterLast && len(pending) == 0
		switch c {
		case "", ".":
			if isLast {
				return fail(fmt.Errorf("%s names a directory, not a file", abs))
			}
			continue
		case "..":
			if isLast {
				return fail(fmt.Errorf("%s names a directory, not a file", abs))
			}
			if len(stack) == 1 { // /.. is /
				continue
			}
			up := stack[len(stack)-2]
			stack = stack[:len(stack)-1]
			if len(stack) == 1 {
				enter(AtRoot, "/", rootNode)
				continue
			}
			fd, n, err := fs.open(cur.FD, "..")
			if err != nil {
				return fail(&os.PathError{Op: "open", Path: up.path, Err: err})
			}
			if n.Dev != up.node.Dev || n.Ino != up.node.Ino {
				fs.close(fd)
				return fail(fmt.Errorf("%s: %s was moved while the path was walked; try again", abs, cur.Path))
			}
			enter(fd, up.path, up.node)
			continue
		}
		next := cur.Join(c)
		fd, n, err := fs.open(cur.FD, cur.Name(c))
		if err == unix.ENOENT && isLast {
			return &Last{Dir: cur, Name: c}, nil, nil
		}
		if err == unix.ENOENT && w.Create {
			// cur passed the rule: only those it trusts can change it.
			if err := fs.mkdir(cur.FD, cur.Name(c), 0o755); err != nil && err != unix.EEXIST {
				return fail(&os.PathError{Op: "mkdir", Path: next, Err: err})
			}
			fd, n, err = fs.open(cur.FD, cur.Name(c))
		}
		if err != nil {
			return fail(&os.PathError{Op: "open", Path: next, Err: err})
		}
		if err := cur.Check(abs, c, n); err != nil {
			fs.close(fd)
			return fail(err)
		}
		switch {
		case n.Type() == unix.S_IFLNK:
			if links++; links > maxLinks {
				fs.close(fd)
				return fail(&os.PathError{Op: "open", Path: abs, Err: unix.ELOOP})
			}
			target, err := fs.readlink(fd)
			fs.close(fd)
			if err != nil {
				return fail(&os.PathError{Op: "readlink", Path: next, Err: err})
			}
			if target == "" {
				return fail(&os.PathError{Op: "open", Path: next, Err: unix.ENOENT})
			}
			if strings.HasPrefix(target, "/") {
				enter(AtRoot, "/", rootNode)
				stack = stack[:1]
			}
			pending = append(strings.Split(target, "/"), pending...)
		case isLast:
			fs.close(fd)
			return &Last{Dir: cur, Name: c, Node: n, Exists: true}, nil, nil
		case n.Type() == unix.S_IFDIR:
			enter(fd, next, n)
			stack = append(stack, step{next, n})
		default:
			fs.close(fd)
			return fail(&os.PathError{Op: "open", Path: next, Err: unix.ENOTDIR})
		}
	}
	if !enterLast {
		return fail(fmt.Errorf("%s names a directory, not a file", abs))
	}
	return nil, cur, nil
}

// realFS is the kernel's file system.
type realFS struct{}

func (realFS) open(dir int, name string) (int, Node, error) {
	fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, Node{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, Node{}, err
	}
	return fd, NodeOf(&st), nil
}

func (realFS) readlink(fd int) (string, error) {
	for n := 256; n <= 1<<16; n *= 4 {
		b := make([]byte, n)
		l, err := unix.Readlinkat(fd, "", b)
		if err != nil {
			return "", err
		}
		if l < n {
			return string(b[:l]), nil
		}
	}
	return "", unix.ENAMETOOLONG
}

func (realFS) mkdir(dir int, name string, mode uint32) error { return unix.Mkdirat(dir, name, mode) }
func (realFS) close(fd int)                                  { unix.Close(fd) }

// Enter enters entry c of d, a directory the rule accepts, held by a
// descriptor of its own (the caller closes both). With mode not 0, a
// missing c is made first (mkdirat in d, which passed the rule: only those
// it trusts can change it). A symbolic link at c is not followed: Enter is
// for names the caller makes itself (a records dir in a stage dir). asked
// names the path in messages.
func (d *Dir) Enter(asked, c string, mode uint32) (*Dir, error) {
	if c == "" || c == "." || c == ".." || strings.Contains(c, "/") {
		return nil, fmt.Errorf("%q is not a name in %s", c, d.Path)
	}
	if mode != 0 {
		if err := d.fs.mkdir(d.FD, d.Name(c), mode); err != nil && err != unix.EEXIST {
			return nil, &os.PathError{Op: "mkdir", Path: d.Join(c), Err: err}
		}
	}
	fd, n, err := d.fs.open(d.FD, d.Name(c))
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d.Join(c), Err: err}
	}
	if err := d.Check(asked, c, n); err != nil {
		d.fs.close(fd)
		return nil, err
	}
	if n.Type() != unix.S_IFDIR {
		d.fs.close(fd)
		return nil, &os.PathError{Op: "open", Path: d.Join(c), Err: unix.ENOTDIR}
	}
	return &Dir{FD: fd, Path: d.Join(c), Node: n, rule: d.rule, uid: d.uid, fs: d.fs}, nil
}

// OpenFile opens entry c of d for reading: only a regular file, the entry
// the rule accepts, opened by descriptor in d (never by a path resolved
// again). Its type is looked at before the open (fstatat, no follow), so a
// FIFO or a device is never opened, and the open is O_NOFOLLOW|O_NONBLOCK
// and checked to be that same file (dev, inode): one swapped in between
// cannot make the open hang or follow a link. asked names the path in
// messages.
func (d *Dir) OpenFile(asked, c string) (*os.File, Node, error) {
	return d.openFile(asked, c, false)
}

// OpenOwn is OpenFile for a file that must be the walker's user's own (a
// record, a note): another's is refused before it is opened.
func (d *Dir) OpenOwn(asked, c string) (*os.File, Node, error) {
	return d.openFile(asked, c, true)
}

func (d *Dir) openFile(asked, c string, own bool) (*os.File, Node, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(d.FD, d.Name(c), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, Node{}, &os.PathError{Op: "open", Path: d.Join(c), Err: err}
	}
	n := NodeOf(&st)
	if err := d.Check(asked, c, n); err != nil {
		return nil, Node{}, err
	}
	if own && n.Uid != d.uid {
		return nil, Node{}, fmt.Errorf("%s is owned by uid %d, not by uid %d whose it must be; it is not opened", d.Join(c), n.Uid, d.uid)
	}
	if n.Type() != unix.S_IFREG {
		return nil, Node{}, fmt.Errorf("%s is not a regular file (mode %#o); it is not opened", d.Join(c), n.Mode)
	}
	fd, err := unix.Openat(d.FD, d.Name(c), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, Node{}, &os.PathError{Op: "open", Path: d.Join(c), Err: err}
	}
	if err := unix.Fstat(fd, &st); err != nil || st.Dev != n.Dev || st.Ino != n.Ino {
		unix.Close(fd)
		return nil, Node{}, fmt.Errorf("%s was replaced while it was opened; not read", d.Join(c))
	}
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
		unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
	return os.NewFile(uintptr(fd), d.Join(c)), NodeOf(&st), nil
}

// OpenFile walks abs under the rule (Walk) and opens the file it names for
// reading as Dir.OpenFile does: the door for reading a file someone else
// may have had a say in.
func (w *Walker) OpenFile(abs string) (*os.File, Node, error) {
	return w.openFile(abs, false)
}

// OpenOwn is OpenFile for a file that must be the walker's user's own.
func (w *Walker) OpenOwn(abs string) (*os.File, Node, error) {
	return w.openFile(abs, true)
}

func (w *Walker) openFile(abs string, own bool) (*os.File, Node, error) {
	last, err := w.Walk(abs)
	if err != nil {
		return nil, Node{}, err
	}
	defer last.Close()
	if !last.Exists {
		return nil, Node{}, &os.PathError{Op: "open", Path: abs, Err: unix.ENOENT}
	}
	return last.Dir.openFile(abs, last.Name, own)
}

package image

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Extraction writes below a directory that may sit where other users can
// write (/tmp) and may be written by root (a Prolog). Nothing below it is
// ever resolved by name from / or the working directory: the tree type
// holds the target directory by descriptor, creates every directory with
// mkdirat and opens it at once with O_NOFOLLOW (it must be a directory of
// the caller's), and opens a directory again only from its parent's
// descriptor, checking it is still the one it made (device and inode). A
// directory another user renamed or replaced by a symlink meanwhile makes
// extraction fail; it never makes it write elsewhere (docs/SPEC.md 3.1).

// heldDirsLimit caps the directory descriptors kept open during an
// extraction (beyond it, directories are reopened from their parents);
// lowered further when RLIMIT_NOFILE is low. A variable for tests.
var heldDirsLimit = 4096

// tree is the directory Extract writes into.
type tree struct {
	dir     string // absolute path, for messages
	root    int    // the directory (O_RDONLY|O_DIRECTORY)
	parent  int    // its parent (O_PATH), to remove the directory if created
	base    string // its name in parent
	created bool
	euid    int
	dirs    map[string]*madeDir // image path -> directory made; written by mkdir only, before any reader
	held    int
	maxHeld int
}

// madeDir is a directory extraction created: its identity and, while held,
// its descriptor.
type madeDir struct {
	dev, ino uint64
	fd       int // -1: not held
}

// errChanged says another user changed the tree while it was written.
var errChanged = errors.New("changed by another user while extracting (renamed, or replaced by a symlink or another directory); refusing to write there")

// openTarget opens (creating it if needed) the directory to extract into.
func openTarget(dir string) (*tree, error) {
	if dir == "/" {
		return nil, fmt.Errorf("extract target / is not empty; give a new or empty directory")
	}
	t := &tree{dir: dir, root: -1, parent: -1, base: filepath.Base(dir), euid: os.Geteuid(), dirs: map[string]*madeDir{}}
	var err error
	if t.parent, err = walkDirPath(filepath.Dir(dir), t.euid); err != nil {
		return nil, fmt.Errorf("extract target %s: %w", dir, err)
	}
	switch err := unix.Mkdirat(t.parent, t.base, 0o700); {
	case err == nil:
		t.created = true
	case err != unix.EEXIST:
		t.close()
		return nil, fmt.Errorf("extract target %s: %w", dir, &os.PathError{Op: "mkdirat", Path: dir, Err: err})
	}
	t.root, err = unix.Openat(t.parent, t.base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.close()
		if err == unix.ELOOP || err == unix.ENOTDIR {
			return nil, fmt.Errorf("extract target %s exists and is not a directory (or is a symlink); give a new or empty directory", dir)
		}
		return nil, fmt.Errorf("extract target %s: %w", dir, &os.PathError{Op: "openat", Path: dir, Err: err})
	}
	var st unix.Stat_t
	if err := unix.Fstat(t.root, &st); err != nil {
		t.close()
		return nil, err
	}
	switch {
	case int(st.Uid) != t.euid && t.created:
		t.close()
		return nil, fmt.Errorf("extract target %s: %w", dir, errChanged)
	case int(st.Uid) != t.euid:
		t.close()
		return nil, fmt.Errorf("extract target %s belongs to uid %d, not to you (uid %d): its owner could rename what extraction creates in it and plant symlinks while it runs; extract into a directory of yours (a path that does not exist is created)",
			dir, st.Uid, t.euid)
	}
	if !t.created {
		names, err := readNames(t.root, 1)
		if (err != nil && err != io.EOF) || len(names) > 0 {
			t.close()
			return nil, fmt.Errorf("extract target %s is not empty; give a new or empty directory", dir)
		}
	}
	return t, nil
}

// walkDirPath opens directory p (absolute) component by component with
// O_NOFOLLOW, creating missing components (mode 0755, as mkdir -p). A
// symlink on the way is followed only when it and the directory holding it
// belong to root or to the caller: what fs.protected_symlinks enforces in
// sticky directories, here whatever the sysctl says (it is 0 on
// some nodes), so that another user's link cannot point the path elsewhere.
// The walk starts at "/" + the first component, not at "/" itself: staging
// must not touch an image's original paths, and "/" is one.
func walkDirPath(p string, euid int) (int, error) {
	fd := atRoot
	rest := strings.Split(p, "/")
	where := "" // the path walked so far, for messages
	for hops := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		const flags = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		next, err := openat(fd, name, flags)
		if err == unix.ENOENT {
			if err := mkdirat(fd, name, 0o755); err != nil && err != unix.EEXIST {
				closeDir(fd)
				return -1, &os.PathError{Op: "mkdirat", Path: where + "/" + name, Err: err}
			}
			next, err = openat(fd, name, flags)
		}
		if err == nil {
			closeDir(fd)
			fd, where = next, where+"/"+name
			continue
		}
		var st unix.Stat_t
		if lstatat(fd, name, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			closeDir(fd)
			return -1, &os.PathError{Op: "openat", Path: where + "/" + name, Err: err}
		}
		dirUID := uint32(0) // "/" is root's
		if fd != atRoot {
			var dst unix.Stat_t
			unix.Fstat(fd, &dst)
			dirUID = dst.Uid
		}
		trusted := func(uid uint32) bool { return uid == 0 || int(uid) == euid }
		if !trusted(st.Uid) || !trusted(dirUID) {
			closeDir(fd)
			return -1, fmt.Errorf("the path goes through the symlink %s, which belongs to uid %d in a directory of uid %d: another user could point it anywhere, so it is not followed (uid %d); give the path it resolves to",
				quote(where+"/"+name), st.Uid, dirUID, euid)
		}
		if hops++; hops > 40 {
			closeDir(fd)
			return -1, &os.PathError{Op: "openat", Path: where + "/" + name, Err: unix.ELOOP}
		}
		target, err := readlinkat(fd, name)
		if err != nil {
			closeDir(fd)
			return -1, err
		}
		rest = append(strings.Split(target, "/"), rest...)
		if strings.HasPrefix(target, "/") {
			closeDir(fd)
			fd, where = atRoot, ""
		}
	}
	if fd == atRoot { // p is "/"
		return unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	return fd, nil
}

// atRoot stands for "/" in walkDirPath: calls there take "/" + name.
const atRoot = -1

func openat(fd int, name string, flags int) (int, error) {
	if fd == atRoot {
		return unix.Open("/"+name, flags, 0)
	}
	return unix.Openat(fd, name, flags, 0)
}

func mkdirat(fd int, name string, mode uint32) error {
	if fd == atRoot {
		return unix.Mkdir("/"+name, mode)
	}
	return unix.Mkdirat(fd, name, mode)
}

func lstatat(fd int, name string, st *unix.Stat_t) error {
	if fd == atRoot {
		return unix.Lstat("/"+name, st)
	}
	return unix.Fstatat(fd, name, st, unix.AT_SYMLINK_NOFOLLOW)
}

func closeDir(fd int) {
	if fd != atRoot {
		unix.Close(fd)
	}
}

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 4096)
	var n int
	var err error
	if dirfd == atRoot {
		n, err = unix.Readlink("/"+name, buf)
	} else {
		n, err = unix.Readlinkat(dirfd, name, buf)
	}
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// readNames lists up to n names (n <= 0: all) of directory fd, from the
// start, without "." and "..".
func readNames(fd, n int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), ".")
	defer f.Close()
	return f.Readdirnames(n)
}

// reserve sizes the descriptor cache for n directories.
func (t *tree) reserve(n int) {
	t.maxHeld = heldDirsLimit
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
		t.maxHeld = min(t.maxHeld, int(rl.Cur/4))
	}
	t.maxHeld = min(t.maxHeld, n)
}

// mkdir creates image directory p (its parent exists) mode 0700, opens it
// and checks it is the directory just made.
func (t *tree) mkdir(p string) error {
	pfd, release, err := t.dirFD(path.Dir(p))
	if err != nil {
		return err
	}
	defer release()
	name := path.Base(p)
	if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
		return &os.PathError{Op: "mkdirat", Path: quote(t.dir + p), Err: err}
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", quote(t.dir+p), errChanged)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || int(st.Uid) != t.euid || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		return fmt.Errorf("%s: %w", quote(t.dir+p), errChanged)
	}
	d := &madeDir{dev: st.Dev, ino: st.Ino, fd: -1}
	if t.held < t.maxHeld {
		d.fd = fd
		t.held++
	} else {
		unix.Close(fd)
	}
	t.dirs[p] = d
	return nil
}

func noRelease() {}

// dirFD returns a descriptor of image directory p (made by mkdir, or "/"),
// and the function to call when done with it: a held descriptor, or one
// reopened from the nearest held ancestor, each step with O_NOFOLLOW and
// checked to be the directory that was made. Safe for concurrent use once
// the directories are made.
func (t *tree) dirFD(p string) (int, func(), error) {
	if p == "/" {
		return t.root, noRelease, nil
	}
	if d := t.dirs[p]; d == nil {
		return -1, noRelease, fmt.Errorf("%s: not a directory extraction made", quote(t.dir+p))
	} else if d.fd >= 0 {
		return d.fd, noRelease, nil
	}
	var chain []string
	q := p
	for ; q != "/" && t.dirs[q] != nil && t.dirs[q].fd < 0; q = path.Dir(q) {
		chain = append(chain, q)
	}
	start := t.root
	if q != "/" {
		if t.dirs[q] == nil {
			return -1, noRelease, fmt.Errorf("%s: not a directory extraction made", quote(t.dir+q))
		}
		start = t.dirs[q].fd
	}
	fd := start
	for i := len(chain) - 1; i >= 0; i-- {
		next, err := unix.Openat(fd, path.Base(chain[i]), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if fd != start {
			unix.Close(fd)
		}
		var st unix.Stat_t
		if err == nil {
			err = unix.Fstat(next, &st)
		}
		if d := t.dirs[chain[i]]; err != nil || st.Dev != d.dev || st.Ino != d.ino {
			if err == nil {
				unix.Close(next)
			}
			return -1, noRelease, fmt.Errorf("%s: %w", quote(t.dir+chain[i]), errChanged)
		}
		fd = next
	}
	return fd, func() { unix.Close(fd) }, nil
}

// removeCreated removes what extraction created: everything below the
// target, and the target itself when it was created. By descriptor, never
// following a symlink, so that a tree another user tampered with is
// removed where it is, not where its links point.
func (t *tree) removeCreated() {
	if t.root < 0 {
		return
	}
	removeAllIn(t.root, t.euid)
	if t.created {
		unix.Unlinkat(t.parent, t.base, unix.AT_REMOVEDIR)
	}
}

// removeAllIn empties directory fd: unlinkat for files and symlinks,
// directories emptied through their own O_NOFOLLOW descriptor first (made
// writable if they are the caller's: an image's read-only directories).
func removeAllIn(fd, euid int) {
	names, _ := readNames(fd, 0)
	for _, n := range names {
		if unix.Unlinkat(fd, n, 0) == nil {
			continue
		}
		child, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(child, &st) == nil && int(st.Uid) == euid {
			unix.Fchmod(child, 0o700)
		}
		removeAllIn(child, euid)
		unix.Close(child)
		unix.Unlinkat(fd, n, unix.AT_REMOVEDIR)
	}
}

// close releases every descriptor.
func (t *tree) close() {
	for _, d := range t.dirs {
		if d.fd >= 0 {
			unix.Close(d.fd)
			d.fd = -1
		}
	}
	for _, fd := range []int{t.root, t.parent} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	t.root, t.parent = -1, -1
}

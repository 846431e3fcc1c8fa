package squash

import (
	"errors"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// node is one real (symlink-free) path as lstat(2) shows it now.
type node struct {
	path   string
	st     unix.Stat_t
	target string // symlinks: link text
}

func (n *node) isDir() bool     { return n.st.Mode&unix.S_IFMT == unix.S_IFDIR }
func (n *node) isReg() bool     { return n.st.Mode&unix.S_IFMT == unix.S_IFREG }
func (n *node) isSymlink() bool { return n.st.Mode&unix.S_IFMT == unix.S_IFLNK }

// walk is the result of resolving a path component by component.
type walk struct {
	chain []*node // directories and symlinks passed through, in order (starts at "/")
	final *node   // the object the path names (nil on failure)

	err     error  // ENOENT, ENOTDIR, ELOOP, EACCES...
	failDir string // ENOENT: the real directory in which the next name is absent
	failAt  string // ENOENT: failDir/name; ENOTDIR: the non-directory that was used as one
}

// maxSymlinks is the kernel's limit on links followed in one lookup (MAXSYMLINKS).
const maxSymlinks = 40

// fsView lstat's and readlinks real paths once per build.
type fsView struct {
	nodes map[string]*node
	errs  map[string]error
}

func newFSView() *fsView {
	return &fsView{nodes: map[string]*node{}, errs: map[string]error{}}
}

func (v *fsView) lstat(p string) (*node, error) {
	if n, ok := v.nodes[p]; ok {
		return n, nil
	}
	if err, ok := v.errs[p]; ok {
		return nil, err
	}
	n := &node{path: p}
	err := unix.Lstat(p, &n.st)
	if err == nil && n.isSymlink() {
		n.target, err = os.Readlink(p)
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
	}
	if err != nil {
		v.errs[p] = err
		return nil, err
	}
	v.nodes[p] = n
	return n, nil
}

// resolve follows p from "/" one component at a time, as the kernel does,
// recording every directory and symlink on the way. With followLast false
// a symlink in the last component is the final object itself (lstat).
func (v *fsView) resolve(p string, followLast bool) walk {
	var w walk
	root, err := v.lstat("/")
	if err != nil {
		w.err = err
		return w
	}
	w.chain = append(w.chain, root)
	cur := "/"
	comps := splitPath(p)
	links := 0
	for len(comps) > 0 {
		c := comps[0]
		comps = comps[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur) // cur has no symlinks, so ".." is lexical here
			continue
		}
		next := path.Join(cur, c)
		n, err := v.lstat(next)
		if err != nil {
			w.err = err
			if err == unix.ENOENT {
				w.failDir, w.failAt = cur, next
			}
			return w
		}
		switch {
		case n.isSymlink() && (len(comps) > 0 || followLast):
			links++
			if links > maxSymlinks {
				w.err = unix.ELOOP
				return w
			}
			w.chain = append(w.chain, n)
			if strings.HasPrefix(n.target, "/") {
				cur = "/"
			}
			comps = append(splitPath(n.target), comps...)
		case n.isDir():
			if len(comps) == 0 {
				w.final = n
				return w
			}
			w.chain = append(w.chain, n)
			cur = next
		default:
			if len(comps) > 0 {
				w.err, w.failAt = unix.ENOTDIR, next
				return w
			}
			w.final = n
			return w
		}
	}
	// Reached when the path ends in "/", "." or ".." (or a symlink whose
	// text does): the final object is the directory cur, which may also be
	// the chain's last element; entries are added once per path.
	w.final, w.err = v.lstat(cur)
	return w
}

func splitPath(p string) []string {
	return strings.Split(strings.Trim(p, "/"), "/")
}

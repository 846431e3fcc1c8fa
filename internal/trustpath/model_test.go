package trustpath

import (
	"fmt"
	"math/rand"
	"strings"

	"golang.org/x/sys/unix"
)

// A model of a file system (a tree of directories, files and symbolic links
// with owners and modes) that the walker can run on (modelFS), and a
// reference for the rule written from the package comment, independently of
// the walker's loop: refResolve expands the path as a string, restarting
// from / after every link, and checks every entry it meets with refAllowed.

type mnode struct {
	kind     uint32 // unix.S_IFDIR, S_IFREG, S_IFLNK
	perm     uint32 // permission bits with sticky
	uid      uint32
	parent   int
	children map[string]int
	target   string // symlinks
}

type model struct {
	nodes []*mnode
	uid   uint32 // owner of directories mkdir makes
}

func (m *model) node(id int) Node {
	n := m.nodes[id]
	return Node{Mode: n.kind | n.perm, Uid: n.uid, Dev: 1, Ino: uint64(id + 1)}
}

// modelFS: descriptors are node ids, AtRoot is node 0.
type modelFS struct{ m *model }

func (f modelFS) dir(fd int, name string) (int, string) {
	if fd == AtRoot {
		return 0, strings.TrimPrefix(name, "/")
	}
	return fd, name
}

func (f modelFS) open(fd int, name string) (int, Node, error) {
	d, name := f.dir(fd, name)
	if f.m.nodes[d].kind != unix.S_IFDIR {
		return -1, Node{}, unix.ENOTDIR
	}
	if name == ".." {
		return f.m.nodes[d].parent, f.m.node(f.m.nodes[d].parent), nil
	}
	id, ok := f.m.nodes[d].children[name]
	if !ok {
		return -1, Node{}, unix.ENOENT
	}
	return id, f.m.node(id), nil
}

func (f modelFS) readlink(fd int) (string, error) {
	if f.m.nodes[fd].kind != unix.S_IFLNK {
		return "", unix.EINVAL
	}
	return f.m.nodes[fd].target, nil
}

func (f modelFS) mkdir(fd int, name string, mode uint32) error {
	d, name := f.dir(fd, name)
	if _, ok := f.m.nodes[d].children[name]; ok {
		return unix.EEXIST
	}
	f.m.add(d, name, &mnode{kind: unix.S_IFDIR, perm: mode, uid: f.m.uid})
	return nil
}

func (f modelFS) close(int) {}

func (m *model) add(parent int, name string, n *mnode) int {
	n.parent = parent
	if n.kind == unix.S_IFDIR {
		n.children = map[string]int{}
	}
	m.nodes = append(m.nodes, n)
	id := len(m.nodes) - 1
	m.nodes[parent].children[name] = id
	return id
}

// pathOf is the path of node id from the model's root.
func (m *model) pathOf(id int) string {
	if id == 0 {
		return "/"
	}
	var parts []string
	for ; id != 0; id = m.nodes[id].parent {
		p := m.nodes[m.nodes[id].parent]
		for name, c := range p.children {
			if c == id {
				parts = append([]string{name}, parts...)
			}
		}
	}
	return "/" + strings.Join(parts, "/")
}

// refAllowed is the rule, as the package comment states it.
func refAllowed(rule Rule, uid uint32, dir, child *mnode) bool {
	everyone := dir.perm&0o002 != 0
	stickyDir := dir.perm&unix.S_ISVTX != 0
	if everyone && !stickyDir { // 1: anyone can swap any entry
		return false
	}
	if everyone && child.uid != uid && child.uid != 0 && child.uid != dir.uid { // 2
		return false
	}
	if rule == Write && child.kind == unix.S_IFLNK && child.uid != 0 && child.uid != uid {
		return false
	}
	if rule == Private {
		if (child.kind == unix.S_IFDIR || child.kind == unix.S_IFLNK) && child.uid != 0 && child.uid != uid {
			return false
		}
		if child.kind == unix.S_IFDIR && child.perm&0o022 != 0 && child.perm&unix.S_ISVTX == 0 {
			return false
		}
	}
	return true // 3
}

// outcome is how a walk ends: refused by the rule, failed otherwise (no
// such entry, not a directory, too many links), or the entry reached: the
// directory that holds it and its name (last), or the directory (dir).
type outcome struct {
	refused, failed bool
	dir             int
	name            string
	exists          bool
}

func (o outcome) String() string {
	switch {
	case o.refused:
		return "refused"
	case o.failed:
		return "failed"
	}
	return fmt.Sprintf("dir %d name %q exists %v", o.dir, o.name, o.exists)
}

// refResolve resolves p in the model as the kernel does, by rewriting the
// path: a symbolic link met at some point is replaced by its target, and
// the walk starts again from / on the rewritten path (the part already
// resolved has no links, so this is the same path). The rule is checked on
// every entry met, in order (4: the first refusal ends the walk).
func refResolve(m *model, rule Rule, uid uint32, p string, enterLast bool) outcome {
	return refResolveCreate(m, rule, uid, p, enterLast, false)
}

// refResolveCreate is refResolve where, with create, a missing directory on
// the way is made (the caller's, mode 0755) in m, as mkdir -p would.
func refResolveCreate(m *model, rule Rule, uid uint32, p string, enterLast, create bool) outcome {
	links := 0
restart:
	for {
		parts := strings.Split(p, "/")
		var names []string // non-empty, non-"." components
		for _, c := range parts {
			if c != "" && c != "." {
				names = append(names, c)
			}
		}
		// A path that ends in /, /. or /.. names a directory: no entry is
		// its last, and a walk for a file fails once it got there.
		lastAt := len(names) - 1
		if enterLast || p == "" || strings.HasSuffix(p, "/") || strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..") || p == "." || p == ".." {
			lastAt = -1
		}
		chain := []int{0}
		for i, c := range names {
			cur := chain[len(chain)-1]
			last := i == lastAt
			if c == ".." {
				if len(chain) > 1 {
					chain = chain[:len(chain)-1]
				}
				continue
			}
			id, ok := m.nodes[cur].children[c]
			if !ok && !last && create {
				id, ok = m.add(cur, c, &mnode{kind: unix.S_IFDIR, perm: 0o755, uid: uid}), true
			}
			if !ok {
				if last {
					return outcome{dir: cur, name: c}
				}
				return outcome{failed: true}
			}
			child := m.nodes[id]
			if !refAllowed(rule, uid, m.nodes[cur], child) {
				return outcome{refused: true}
			}
			switch {
			case child.kind == unix.S_IFLNK:
				if links++; links > maxLinks || child.target == "" {
					return outcome{failed: true}
				}
				base := m.pathOf(cur)
				if strings.HasPrefix(child.target, "/") {
					base = ""
				}
				p = base + "/" + child.target + "/" + strings.Join(names[i+1:], "/")
				if last {
					p = strings.TrimSuffix(p, "/")
				} else if lastAt < 0 {
					p += "/." // still names a directory
				}
				continue restart
			case last:
				return outcome{dir: cur, name: c, exists: true}
			case child.kind == unix.S_IFDIR:
				chain = append(chain, id)
			default:
				return outcome{failed: true}
			}
		}
		if !enterLast {
			return outcome{failed: true}
		}
		return outcome{dir: chain[len(chain)-1]}
	}
}

// walkOutcome runs the walker on the model.
func walkOutcome(m *model, rule Rule, uid uint32, p string, enterLast bool) outcome {
	w := &Walker{Rule: rule, Uid: uid, fs: modelFS{m}}
	var o outcome
	var err error
	if enterLast {
		var d *Dir
		if d, err = w.WalkDir(p); err == nil {
			o.dir = modelID(d)
		}
	} else {
		var l *Last
		if l, err = w.Walk(p); err == nil {
			o.dir, o.name, o.exists = modelID(l.Dir), l.Name, l.Exists
		}
	}
	if _, ok := err.(*Error); ok {
		o.refused = true
	} else if err != nil {
		o.failed = true
	}
	return o
}

var (
	modelNames = []string{"a", "b", "c"}
	modelUIDs  = []uint32{0, 1001, 1002}
	modelPerms = []uint32{0o755, 0o700, 0o775, 0o777, 0o1777, 0o1775, 0o757}
)

// randomModel grows a random tree of up to n entries below a root that is
// root's, mode 0755 (what the real-file-system test can build below a
// private temporary directory). With dotdot false no link target holds
// "..", which a real tree below a temporary directory would climb out of.
func randomModel(r *rand.Rand, n int, dotdot bool) *model {
	m := &model{}
	m.nodes = append(m.nodes, &mnode{kind: unix.S_IFDIR, perm: 0o755, children: map[string]int{}})
	var dirs []int
	dirs = append(dirs, 0)
	for i := 0; i < n; i++ {
		parent := dirs[r.Intn(len(dirs))]
		name := modelNames[r.Intn(len(modelNames))]
		if _, taken := m.nodes[parent].children[name]; taken {
			continue
		}
		nd := &mnode{uid: modelUIDs[r.Intn(len(modelUIDs))], perm: modelPerms[r.Intn(len(modelPerms))]}
		switch r.Intn(5) {
		case 0, 1:
			nd.kind = unix.S_IFDIR
		case 2:
			nd.kind, nd.perm = unix.S_IFREG, 0o644
		default:
			nd.kind, nd.perm = unix.S_IFLNK, 0o777
			nd.target = randomPath(r, dotdot)
		}
		id := m.add(parent, name, nd)
		if nd.kind == unix.S_IFDIR {
			dirs = append(dirs, id)
		}
	}
	return m
}

// randomPath is an absolute or relative path of up to 4 components.
func randomPath(r *rand.Rand, dotdot bool) string {
	var parts []string
	for k := r.Intn(4) + 1; k > 0; k-- {
		switch c := r.Intn(8); {
		case c == 0 && dotdot:
			parts = append(parts, "..")
		case c == 1:
			parts = append(parts, ".")
		default:
			parts = append(parts, modelNames[r.Intn(len(modelNames))])
		}
	}
	p := strings.Join(parts, "/")
	if r.Intn(2) == 0 {
		p = "/" + p
	}
	return p
}

// modelID is the model node of a directory the walker returned.
func modelID(d *Dir) int {
	if d.FD == AtRoot {
		return 0
	}
	return int(d.Node.Ino) - 1
}

// clone copies a model (the walker with Create changes its own).
func (m *model) clone() *model {
	c := &model{uid: m.uid}
	for _, n := range m.nodes {
		nn := *n
		if n.children != nil {
			nn.children = map[string]int{}
			for k, v := range n.children {
				nn.children[k] = v
			}
		}
		c.nodes = append(c.nodes, &nn)
	}
	return c
}

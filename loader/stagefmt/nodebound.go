package stagefmt

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// glibcObjects are the sonames of glibc's own shared objects: on a node
// whose glibc is not the image's, a process under the image's ld.so must
// take each of them from the image's glibc (the node's copies are another
// build), whoever asks for them.
var glibcObjects = map[string]bool{
	"libc.so.6": true, "libm.so.6": true, "libpthread.so.0": true, "libdl.so.2": true,
	"librt.so.1": true, "libutil.so.1": true, "libresolv.so.2": true, "libanl.so.1": true,
	"libmvec.so.1": true, "ld-linux-x86-64.so.2": true, "ld-linux-aarch64.so.1": true,
}

// CheckNodeBound refuses, at staging, an image whose programs run under
// its own ld.so on this node (LdsoChoice written) when a node-bound library
// the image records (nodeBound: the paths of the driver libraries the build
// left on the node, squash.NodeBound) needs a glibc symbol version the
// image's glibc does not define: the app would load the node's driver
// library into a process of the image's glibc and stop at that load
// ("version `GLIBC_2.34' not found (required by libcuda.so.1)"), after it
// started. The check reads ELF version tables as data (SHT_GNU_verneed of
// the node's library, SHT_GNU_verdef of the image's glibc objects): nothing
// runs. A glibc object the image does not bundle comes from the node in such
// a process, so the node's copy's own needs are checked in its place. A
// recorded path the node lacks, or that is not an ELF object, is left to
// the app's own error, as natively. Without the record (the node's glibc is
// the image's) there is nothing to check.
//
// The same holds for the shim's own needs: the preload object for a glibc
// before 2.34 (preload.so) needs libdl.so.2, which images built by an older
// dlbundle leave out when the app never loaded it; the node's copy would
// stop every process before main, so such an image is refused too.
//
// A driver library absent from the path the image records (a node that
// installs the driver elsewhere: /usr/lib64/nvidia) is looked for as ld.so
// would go on to find it, by its file name in the node's ld.so.cache
// (cached; nil: no lookup).
func CheckNodeBound(stageDir string, nodeBound []string, cached func(name string) string) error {
	ldso, _, ok := ImageLdso(stageDir)
	if !ok {
		return nil
	}
	text, _ := os.Readlink(filepath.Join(stageDir, LdsoChoice))
	version, _, _ := strings.Cut(text, " ")
	tab, release, err := MapTable(stageDir)
	if err != nil {
		return err
	}
	defer release()
	imageDir := filepath.Dir(ldso[len(filepath.Join(stageDir, RootDir)):])
	if PreloadFor(stageDir) == PreloadObject {
		if _, ok := ResolveFile(tab, filepath.Join(imageDir, "libdl.so.2")); !ok {
			return fmt.Errorf("the image's glibc %s lacks its libdl.so.2 (%s), which dlbundle's shim needs on a node whose glibc is not the image's: "+
				"rebuild the image with this dlbundle (its build bundles it), or run it on a node with glibc %s", version, filepath.Join(imageDir, "libdl.so.2"), version)
		}
	}
	if len(nodeBound) == 0 {
		return nil
	}
	tree, err := openStagedTree(filepath.Join(stageDir, RootDir))
	if err != nil {
		return err
	}
	defer tree.Close()
	c := glibcCheck{tab: tab, tree: tree, imageDir: imageDir, nodeDir: filepath.Dir(NodeLibc()),
		defined: map[string]map[string]bool{}}
	for _, p := range nodeBound {
		f, err := openNodeFile(p)
		if err != nil && cached != nil {
			if q := cached(filepath.Base(p)); q != "" {
				p = q
				f, err = openNodeFile(p)
			}
		}
		if err != nil {
			continue
		}
		l, err := c.missing(f, "")
		f.Close()
		if err != nil || l.lib == "" {
			continue
		}
		if l.via != "" {
			why := fmt.Sprintf("needs %s of %s, which the image's glibc %s lacks", l.ver, l.lib, version)
			if l.ver == "GLIBC_PRIVATE" {
				why = fmt.Sprintf("is of the node's glibc build (it needs %s of %s, internals of that build only)", l.ver, l.lib)
			}
			return fmt.Errorf("the node's driver library %s needs %s, which the image lacks, and the node's copy of it %s: "+
				"the app cannot load them under the image's glibc %s; "+
				"rebuild the image from a trace in which the app loads %s, or run it on a node with glibc %s", p, l.via, why, version, l.via, version)
		}
		return fmt.Errorf("the node's driver library %s needs %s of %s, which the image's glibc %s lacks: "+
			"the app cannot load it under the image's glibc; rebuild the image on a node whose glibc is at least as new as this driver needs, "+
			"or run it on a node with glibc %s", p, l.ver, l.lib, version, version)
	}
	return nil
}

// lack is a glibc symbol version that a node-bound library needs and its
// process under the image's glibc would not find: ver of the glibc object
// lib, needed by the library itself or, when via is set, by the node's copy
// of via, a glibc object the image does not bundle.
type lack struct{ lib, ver, via string }

type glibcCheck struct {
	tab      []byte
	tree     *stagedTree
	imageDir string // the directory of the image's ld.so and libc (image path)
	nodeDir  string // the node's
	defined  map[string]map[string]bool
}

// missing returns the first glibc version that the ELF object f needs and
// the glibc its process would get lacks (lib "" when none). via is the glibc
// object f is the node's copy of ("" for the driver library itself).
func (c *glibcCheck) missing(f *os.File, via string) (lack, error) {
	ef, err := elf.NewFile(f)
	if err != nil {
		return lack{}, err
	}
	defer ef.Close()
	needs, _ := ef.DynamicVersionNeeds() // none: no version to check, still its DT_NEEDED
	for _, n := range needs {
		if !glibcObjects[n.Name] {
			continue
		}
		if via != "" {
			// The node's copy of a glibc object is of the node's glibc
			// build: what it needs privately of its own build (internal
			// symbols that change between builds) the image's cannot give.
			for _, d := range n.Needs {
				if d.Dep == "GLIBC_PRIVATE" && d.Flags&elf.VER_FLG_WEAK == 0 {
					return lack{n.Name, d.Dep, via}, nil
				}
			}
		}
		defined, fromNode := c.versionsOf(n.Name)
		if fromNode || len(defined) == 0 {
			continue // from the node: below; unreadable: nothing to compare with
		}
		for _, d := range n.Needs {
			if d.Flags&elf.VER_FLG_WEAK != 0 {
				continue
			}
			if !defined[d.Dep] {
				return lack{n.Name, d.Dep, via}, nil
			}
		}
	}
	if via != "" {
		return lack{}, nil // one level: a node glibc object's own needs are glibc's, checked above
	}
	// A glibc object it needs (DT_NEEDED, versioned or not) that the image
	// lacks comes from the node: that copy must itself find what it needs
	// in the image's glibc.
	libs, _ := ef.ImportedLibraries()
	for _, name := range libs {
		if !glibcObjects[name] {
			continue
		}
		if _, fromNode := c.versionsOf(name); !fromNode {
			continue
		}
		g, err := openNodeFile(filepath.Join(c.nodeDir, name))
		if err != nil {
			continue
		}
		l, _ := c.missing(g, name)
		g.Close()
		if l.lib != "" {
			return l, nil
		}
	}
	return lack{}, nil
}

// versionsOf returns the versions the image's copy of the glibc object
// name defines; fromNode when the image does not bundle it.
func (c *glibcCheck) versionsOf(name string) (defined map[string]bool, fromNode bool) {
	if d, ok := c.defined[name]; ok {
		return d, d == nil
	}
	p := filepath.Join(c.imageDir, name)
	if name == filepath.Base(DynamicLinker()) {
		p = DynamicLinker()
	}
	final, ok := ResolveFile(c.tab, p)
	if !ok {
		c.defined[name] = nil
		return nil, true
	}
	d := map[string]bool{}
	if f, err := c.tree.open(final); err == nil {
		if ef, err := elf.NewFile(f); err == nil {
			if vs, err := ef.DynamicVersions(); err == nil {
				for _, v := range vs {
					d[v.Name] = true
				}
			}
			ef.Close()
		}
		f.Close()
	}
	c.defined[name] = d
	return d, false
}

// openNodeFile opens a file of the node for reading as data, regular files
// only. The path comes from the image (a driver library's recorded path,
// followed through links as ld.so would), so its type is looked at before
// the open: a FIFO or a device it leads to is never opened (a device's open
// alone can act), and the file opened must be the one looked at.
func openNodeFile(p string) (*os.File, error) {
	var before, after unix.Stat_t
	if err := unix.Stat(p, &before); err != nil {
		return nil, err
	}
	if before.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: not a regular file", p)
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Fstat(fd, &after); err != nil || after.Dev != before.Dev || after.Ino != before.Ino {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: changed while it was opened", p)
	}
	return os.NewFile(uintptr(fd), p), nil
}

package squash

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os"
	"path"
	"runtime"
	"strings"
)

// Closure adds to what runs lacked (the files their reports name) what
// those files need in turn, so that one fold closes the gap: the next run
// of the same program finds everything in the image.
//
//   - For each shared object or executable (ELF of this node's machine): its
//     DT_NEEDED, resolved as this node's ld.so resolves them (DT_RPATH when
//     there is no DT_RUNPATH, DT_RUNPATH, $ORIGIN expanded against the path
//     the report names, /etc/ld.so.cache, the default directories unless
//     DF_1_NODEFLIB), transitively; every directory searched is added as
//     listed, so the shim decides the whole search from the table; an
//     executable's PT_INTERP.
//   - For a #! script: its interpreter, closed the same way.
//   - For a path that does not exist: the listing of its nearest existing
//     directory, so that the lookup is decided from the table (a candidate
//     of ld.so's search in a directory the run added, LD_LIBRARY_PATH).
//
// What ld.so would take from the loaders' DT_RPATH or from LD_LIBRARY_PATH
// is not known here (a report names paths, not environments); those
// searches are in the reports themselves (audit.so notes each candidate the
// table did not answer).
func Closure(lacks []Lack) []Lack {
	c := closer{
		cache: readLdCache("/etc/ld.so.cache"),
		seen:  map[string]bool{},
		out:   append([]Lack(nil), lacks...),
	}
	for _, l := range lacks {
		c.seen[path.Clean(l.Path)] = true
	}
	for _, l := range lacks {
		if !path.IsAbs(l.Path) {
			continue
		}
		p := path.Clean(l.Path)
		switch kindOf(p) {
		case kindReg:
			c.file(p)
		case kindMissing, kindNotDir:
			for d := path.Dir(p); d != "/"; d = path.Dir(d) {
				if kindOf(d) == kindDir {
					c.add(d, false)
					break
				}
			}
		}
	}
	return c.out
}

type closer struct {
	cache ldCache
	seen  map[string]bool
	done  map[string]bool
	out   []Lack
}

// add appends p once; a library or executable found on the way is closed
// in turn.
func (c *closer) add(p string, lib bool) {
	if !c.seen[p] {
		c.seen[p] = true
		c.out = append(c.out, Lack{Path: p, Library: lib})
	}
	if lib {
		c.file(p)
	}
}

// machine is this node's ELF machine: an object of another is passed over
// by ld.so's open_verify.
func machine() elf.Machine {
	switch runtime.GOARCH {
	case "amd64":
		return elf.EM_X86_64
	case "arm64":
		return elf.EM_AARCH64
	}
	return elf.EM_NONE
}

func (c *closer) file(p string) {
	if c.done == nil {
		c.done = map[string]bool{}
	}
	if c.done[p] {
		return
	}
	c.done[p] = true
	if interp := shebang(p); interp != "" {
		if path.IsAbs(interp) && kindOf(interp) == kindReg {
			c.add(path.Clean(interp), true)
		}
		return
	}
	f, err := elf.Open(p)
	if err != nil {
		return
	}
	defer f.Close()
	if f.Machine != machine() || f.Class != elf.ELFCLASS64 {
		return
	}
	for _, ph := range f.Progs {
		if ph.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, ph.Filesz)
		if _, err := ph.ReadAt(b, 0); err == nil {
			if in := string(bytes.TrimRight(b, "\x00")); path.IsAbs(in) {
				c.add(in, false) // ld.so: the node's, by design; bundled where the build's policy says
			}
		}
	}
	needed, _ := f.DynString(elf.DT_NEEDED)
	if len(needed) == 0 {
		return
	}
	rpath, _ := f.DynString(elf.DT_RPATH)
	runpath, _ := f.DynString(elf.DT_RUNPATH)
	nodeflib := false
	if v, err := f.DynValue(elf.DT_FLAGS_1); err == nil && len(v) > 0 && v[0]&uint64(elf.DF_1_NODEFLIB) != 0 {
		nodeflib = true
	}
	var dirs []string
	origin := path.Dir(p)
	split := func(lists []string) {
		for _, l := range lists {
			for _, d := range strings.Split(l, ":") {
				d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", origin), "$ORIGIN", origin)
				if path.IsAbs(d) && !strings.Contains(d, "$") {
					dirs = append(dirs, path.Clean(d))
				}
			}
		}
	}
	if len(runpath) == 0 {
		split(rpath) // ld.so ignores DT_RPATH where DT_RUNPATH is set
	}
	split(runpath)
	for _, name := range needed {
		if strings.Contains(name, "/") {
			continue
		}
		c.resolve(name, dirs, nodeflib)
	}
}

// resolve finds name as ld.so would for an object whose own search
// directories are dirs, adding each directory searched (listed) and the
// file found.
func (c *closer) resolve(name string, dirs []string, nodeflib bool) {
	for _, d := range dirs {
		if kindOf(d) != kindDir {
			c.add(d, false) // missing: decided from the table once folded
			continue
		}
		c.add(d, false)
		if cand := path.Join(d, name); elfOurs(cand) {
			c.add(cand, true)
			return
		}
	}
	if nodeflib {
		return
	}
	if p, ok := c.cache[name]; ok && elfOurs(p) {
		c.add(p, true)
		return
	}
	for _, d := range defaultLibDirs() {
		if kindOf(d) != kindDir {
			continue
		}
		c.add(d, false)
		if cand := path.Join(d, name); elfOurs(cand) {
			c.add(cand, true)
			return
		}
	}
}

// defaultLibDirs are ld.so's default directories on Debian-style
// (multiarch) and RHEL-style (lib64) systems, in ld.so's order; the ones a
// node lacks are skipped.
func defaultLibDirs() []string {
	var triplet string
	switch runtime.GOARCH {
	case "amd64":
		triplet = "x86_64-linux-gnu"
	case "arm64":
		triplet = "aarch64-linux-gnu"
	}
	return []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib64", "/usr/lib64", "/lib", "/usr/lib"}
}

// elfOurs: p is a regular ELF file of this node's machine (what ld.so's
// open_verify accepts).
func elfOurs(p string) bool {
	if kindOf(p) != kindReg {
		return false
	}
	f, err := elf.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Machine == machine() && f.Class == elf.ELFCLASS64
}

// shebang is the interpreter a #! script names, or "".
func shebang(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	if !strings.HasPrefix(line, "#!") {
		return ""
	}
	fields := strings.Fields(strings.TrimPrefix(line, "#!"))
	if len(fields) == 0 {
		return ""
	}
	return fields[0]
}

// isExecutable: p is a program a process can exec: a #! script or an ELF
// executable with an interpreter (ET_EXEC, or a PIE), with an execute bit.
func isExecutable(p string) bool {
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return false
	}
	if shebang(p) != "" {
		return true
	}
	f, err := elf.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	if f.Type == elf.ET_EXEC {
		return true
	}
	for _, ph := range f.Progs {
		if ph.Type == elf.PT_INTERP {
			return !strings.HasPrefix(path.Base(p), "lib") // libc.so.6 has one too, and is no program
		}
	}
	return false
}

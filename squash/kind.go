package squash

import (
	"bytes"
	"debug/elf"
	"io"
	"os"
	"path"
	"strings"

	"github.com/dlbundle/dlbundle/image"
)

// classify says what a regular file is, from its name and first bytes
// (and, for ELF shared objects that may be Python extensions, its symbols).
func classify(p string) image.Kind {
	f, err := image.OpenSource(p)
	if err != nil {
		return image.KindData
	}
	defer f.Close()
	var head [4]byte
	n, _ := io.ReadFull(f, head[:])
	switch {
	case n == 4 && bytes.Equal(head[:], []byte(elf.ELFMAG)):
		return classifyELF(p, f)
	case strings.HasSuffix(p, ".py"):
		return image.KindPySource
	case strings.HasSuffix(p, ".pyc"):
		return image.KindPyBytecode
	case n >= 2 && head[0] == '#' && head[1] == '!':
		return image.KindScript
	}
	return image.KindData
}

func classifyELF(p string, f *os.File) image.Kind {
	ef, err := elf.NewFile(f)
	if err != nil {
		return image.KindData
	}
	defer ef.Close()
	switch ef.Type {
	case elf.ET_EXEC:
		return image.KindELFExec
	case elf.ET_DYN:
	default:
		return image.KindData
	}
	if isPythonExtension(p, ef) {
		return image.KindPyExtension
	}
	// A PIE executable has an interpreter; so do libc.so.6 and ld.so, which
	// can be run too but are libraries: they have a DT_SONAME.
	if soname, _ := ef.DynString(elf.DT_SONAME); len(soname) > 0 {
		return image.KindELFShared
	}
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_INTERP {
			return image.KindELFExec
		}
	}
	return image.KindELFShared
}

// isPythonExtension: CPython's extension names ("m.cpython-311-x86_64-linux-gnu.so",
// "m.abi3.so"), a .so in a Python directory (lib-dynload, site-packages,
// dist-packages), or an exported PyInit_<module> for its own name.
func isPythonExtension(p string, ef *elf.File) bool {
	base := path.Base(p)
	if strings.Contains(base, ".cpython-") || strings.HasSuffix(base, ".abi3.so") {
		return true
	}
	if strings.HasSuffix(base, ".so") {
		for _, dir := range strings.Split(path.Dir(p), "/") {
			if dir == "lib-dynload" || dir == "site-packages" || dir == "dist-packages" {
				return true
			}
		}
	}
	module, _, _ := strings.Cut(base, ".")
	syms, err := ef.DynamicSymbols()
	if err != nil {
		return false
	}
	want := "PyInit_" + module
	for _, s := range syms {
		if s.Name == want && s.Section != elf.SHN_UNDEF {
			return true
		}
	}
	return false
}

// interpreterOf returns the interpreter the kernel loads to run p: an ELF
// file's PT_INTERP, or the first word of a script's #! line ("" if none).
func interpreterOf(p string) string {
	f, err := image.OpenSource(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	var head [256]byte
	n, _ := io.ReadFull(f, head[:])
	switch {
	case n >= 4 && bytes.Equal(head[:4], []byte(elf.ELFMAG)):
		ef, err := elf.NewFile(f)
		if err != nil {
			return ""
		}
		defer ef.Close()
		for _, prog := range ef.Progs {
			if prog.Type == elf.PT_INTERP && prog.Filesz < 4096 {
				b, err := io.ReadAll(prog.Open())
				if err != nil {
					return ""
				}
				return string(bytes.TrimRight(b, "\x00"))
			}
		}
	case n >= 2 && head[0] == '#' && head[1] == '!':
		line, _, _ := bytes.Cut(head[2:n], []byte("\n"))
		if fields := strings.Fields(string(line)); len(fields) > 0 {
			return fields[0]
		}
	}
	return ""
}

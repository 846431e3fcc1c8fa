package image

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
)

// The image's architecture (docs/SPEC.md 1.5): the machine of its ELF code,
// read by the writer from the first bytes of each object's content as it
// compresses them (no second read of the files).

// ArchAny is the architecture of an image without ELF code.
const ArchAny = "any"

// elfIdent is what the writer keeps of an object's ELF header.
type elfIdent struct {
	ok      bool
	le      bool // little-endian: ppc64's two byte orders are two architectures
	class   elf.Class
	machine elf.Machine
}

// readELFIdent reads e_ident and e_machine from the start of a file.
func readELFIdent(b []byte) elfIdent {
	if len(b) < 20 || string(b[:4]) != elf.ELFMAG {
		return elfIdent{}
	}
	var m uint16
	le := false
	switch elf.Data(b[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		m, le = binary.LittleEndian.Uint16(b[18:]), true
	case elf.ELFDATA2MSB:
		m = binary.BigEndian.Uint16(b[18:])
	default:
		return elfIdent{}
	}
	return elfIdent{ok: true, le: le, class: elf.Class(b[elf.EI_CLASS]), machine: elf.Machine(m)}
}

// archName spells the machine as `uname -m` does; "" for machines that are
// not CPUs a process runs on (GPU code objects and BPF programs, which
// libraries read as data).
func archName(id elfIdent, le bool) string {
	is64 := id.class == elf.ELFCLASS64
	switch id.machine {
	case elf.EM_X86_64:
		return "x86_64"
	case elf.EM_AARCH64:
		return "aarch64"
	case elf.EM_386:
		return "i686"
	case elf.EM_ARM:
		return "arm"
	case elf.EM_PPC64:
		if le {
			return "ppc64le"
		}
		return "ppc64"
	case elf.EM_RISCV:
		if is64 {
			return "riscv64"
		}
		return "riscv32"
	case elf.EM_S390:
		if is64 {
			return "s390x"
		}
		return "s390"
	case elf.EM_LOONGARCH:
		return "loongarch64"
	case elf.EM_CUDA, elf.EM_AMDGPU, elf.EM_BPF:
		return ""
	}
	return fmt.Sprintf("elf-%d", id.machine)
}

// GOARCHArch is the image architecture a Go GOARCH runs (runtime.GOARCH of
// this dlbundle: the node's machine for a native build), "" when unknown.
func GOARCHArch(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	case "386":
		return "i686"
	case "arm":
		return "arm"
	case "ppc64le", "ppc64", "riscv64", "s390x", "loong64":
		return strings.Replace(goarch, "loong64", "loongarch64", 1)
	}
	return ""
}

// HostArch is GOARCHArch(runtime.GOARCH).
func HostArch() string { return GOARCHArch(runtime.GOARCH) }

// arch derives the image's architecture from the ELF headers of its code
// objects, in load order: the first one's machine (the executable or its
// interpreter, which the kernel maps first), with a warning naming one file
// of each other machine (a process loads one machine's code only: those were
// read, not loaded).
func (p *packer) arch(warn func(string)) string {
	first, firstPath := "", ""
	others := map[string]string{}
	var order []string
	for i := range p.es {
		e := &p.es[i]
		id := p.elf[i]
		if !id.ok || (e.Kind != KindELFShared && e.Kind != KindELFExec && e.Kind != KindPyExtension) {
			continue
		}
		name := archName(id, id.le)
		switch {
		case name == "":
		case first == "":
			first, firstPath = name, e.Path
		case name != first && others[name] == "":
			others[name] = e.Path
			order = append(order, name)
		}
	}
	if first == "" {
		return ArchAny
	}
	if len(order) > 0 && warn != nil {
		var list []string
		for _, n := range order {
			list = append(list, fmt.Sprintf("%s (e.g. %s)", n, quote(others[n])))
		}
		warn(fmt.Sprintf("the image holds ELF code of several machines: %s (first: %s) and %s; recorded %s, the machine of the first object in load order (a process loads one machine's code only; the others were read, not loaded)",
			first, quote(firstPath), strings.Join(list, ", "), first))
	}
	return first
}

package stagefmt

import (
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/dlbundle/dlbundle/image"
)

// The real functions' places. Every served process resolves the ~90
// functions the preload forwards to (intercept.h's SHIM_FUNCS) with
// dlsym(RTLD_NEXT): ~44 us per process on the VM measured, all of it cache
// misses in libc's symbol tables. The stage records instead, after the
// search rules in STAGE/search, where each lies in the libc the stage
// serves (openLibc):
//
//	libc <GNU build-id, hex>
//	real <name> <offset from the object's base, hex | ->   (one per name, in the table's order)
//
// The preload (lookup.c, reals_from_stage) uses an offset only when the
// libc it finds loaded has that build-id and no object between the preload
// and libc may define the name (their GNU-hash bloom filters say no); every
// other name ("-", or a maybe) it resolves with dlsym as before.
//
// An offset is written only where dlsym's answer within libc is plain: one
// definition of the name that is not hidden (glibc's check_match with
// DL_LOOKUP_RETURN_NEWEST: an unversioned definition, or the one
// non-hidden versioned one), a function (not an IFUNC, whose answer
// depends on the CPU and the process's tunables), global or weak, with a
// value. Anything else is "-".

// MaxRealsText bounds the block (the table's room for the search rules,
// SearchRoom, holds rules and this block).
const MaxRealsText = 4000

// FormatReals returns the block for the libc of the stage in stageDir, or
// nil when it cannot say (no libc, no build-id): the preload then
// resolves every function with dlsym.
func FormatReals(stageDir string) []byte {
	f, err := openLibc(stageDir)
	if err != nil {
		return nil
	}
	defer f.Close()
	return formatReals(f, strings.Fields(shimRealNames))
}

// formatReals is FormatReals of an open libc. The file may be an image's
// (hostile bytes, read while staging): debug/elf bounds what it allocates
// by the file's size, and FuzzFormatReals checks that no input makes it
// panic.
func formatReals(r io.ReaderAt, names []string) []byte {
	f, err := elf.NewFile(r)
	if err != nil || len(names) == 0 {
		return nil
	}
	// The build id the preload reads in the loaded libc's memory.
	id := image.GNUNote(f, 3 /* NT_GNU_BUILD_ID */)
	if len(id) == 0 || len(id) > 64 {
		return nil
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	// For each name: its definitions that dlsym could return, and whether
	// any is not plain.
	type found struct {
		value uint64
		n     int
		odd   bool
	}
	defs := map[string]*found{}
	for _, s := range syms {
		if !want[s.Name] || s.Section == elf.SHN_UNDEF {
			continue
		}
		if s.HasVersion && s.VersionIndex.IsHidden() {
			continue // an old version, kept for binaries linked against it: dlsym skips it
		}
		d := defs[s.Name]
		if d == nil {
			d = &found{}
			defs[s.Name] = d
		}
		d.n++
		d.value = s.Value
		bind := elf.ST_BIND(s.Info)
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || (bind != elf.STB_GLOBAL && bind != elf.STB_WEAK) ||
			s.Value == 0 || s.Section >= elf.SHN_LORESERVE || (s.HasVersion && s.VersionIndex.Index() == 0) {
			d.odd = true
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "libc %s\n", hex.EncodeToString(id))
	for _, n := range names {
		if d := defs[n]; d != nil && d.n == 1 && !d.odd {
			fmt.Fprintf(&b, "real %s %x\n", n, d.value)
		} else {
			fmt.Fprintf(&b, "real %s -\n", n)
		}
	}
	if b.Len() > MaxRealsText {
		return nil
	}
	return []byte(b.String())
}

// checkReals checks a block as the preload reads it: the libc line, then
// one line per name of the table, in its order.
func checkReals(b []byte) error {
	if len(b) > MaxRealsText || len(b) == 0 || b[len(b)-1] != '\n' {
		return fmt.Errorf("real functions: a block of %d bytes", len(b))
	}
	lines := strings.Split(string(b[:len(b)-1]), "\n")
	id, ok := strings.CutPrefix(lines[0], "libc ")
	if _, err := hex.DecodeString(id); !ok || err != nil || id == "" {
		return fmt.Errorf("real functions: line %q", lines[0])
	}
	names := strings.Fields(shimRealNames)
	if len(lines) != len(names)+1 {
		return fmt.Errorf("real functions: %d lines for %d names", len(lines)-1, len(names))
	}
	for i, n := range names {
		w := strings.Fields(lines[i+1])
		if len(w) != 3 || w[0] != "real" || w[1] != n {
			return fmt.Errorf("real functions: line %q; want %s", lines[i+1], n)
		}
		if _, err := hex.DecodeString(strings.Repeat("0", len(w[2])%2) + w[2]); w[2] != "-" && err != nil {
			return fmt.Errorf("real functions: line %q", lines[i+1])
		}
	}
	return nil
}

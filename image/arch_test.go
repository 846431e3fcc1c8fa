package image

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// elfHeader is the first 64 bytes of an ELF64 little-endian object of
// machine m (enough for the writer: it reads e_ident and e_machine).
func elfHeader(m uint16) []byte {
	b := make([]byte, 64)
	copy(b, "\x7fELF")
	b[4], b[5], b[6] = 2, 1, 1               // ELFCLASS64, ELFDATA2LSB, EV_CURRENT
	binary.LittleEndian.PutUint16(b[16:], 3) // ET_DYN
	binary.LittleEndian.PutUint16(b[18:], m)
	return b
}

// The image records the machine of its ELF code (docs/SPEC.md 1.5), read
// from the objects it bundles: the first code object's in load order, with a
// warning when others differ; GPU code objects do not count; no ELF: "any".
func TestArchFromBundledELF(t *testing.T) {
	dir := t.TempDir()
	obj := func(name string, m uint16) Entry {
		p := filepath.Join(dir, name)
		os.WriteFile(p, elfHeader(m), 0o755)
		return Entry{Path: "/lib/" + name, Type: TypeRegular, Mode: 0o100755, Size: 64, Kind: KindELFShared, SourcePath: p}
	}
	libz := entryFor(t, "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13")
	libz.Kind = KindELFShared
	py := filepath.Join(dir, "mod.py")
	os.WriteFile(py, []byte("import os\n"), 0o644)
	for _, c := range []struct {
		name, want, warning string
		es                  []Entry
	}{
		{"a real library", HostArch(), "", withParents(t, []Entry{libz})},
		{"no ELF", ArchAny, "", []Entry{{Path: "/", Type: TypeDir}, {Path: "/mod.py", Type: TypeRegular, Size: 10, Kind: KindPySource, SourcePath: py}}},
		{"a CUDA code object first", "aarch64", "", []Entry{{Path: "/", Type: TypeDir}, {Path: "/lib", Type: TypeDir}, obj("k.cubin", 190), obj("libm.so", 183)}},
		{"mixed", "x86_64", "aarch64 (e.g. /lib/libarm.so)", []Entry{{Path: "/", Type: TypeDir}, {Path: "/lib", Type: TypeDir}, obj("libx.so", 62), obj("libarm.so", 183)}},
		{"ELF data is not code", ArchAny, "", []Entry{{Path: "/", Type: TypeDir}, {Path: "/lib", Type: TypeDir}, func() Entry { e := obj("fw.bin", 183); e.Kind = KindData; return e }()}},
	} {
		var warnings []string
		img, st := writeImage(t, c.es, WriteOptions{Warn: func(m string) { warnings = append(warnings, m) }})
		im, err := openBytes(img)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if im.Arch() != c.want || st.Arch != c.want {
			t.Errorf("%s: Arch() = %q (WriteStats %q), want %q", c.name, im.Arch(), st.Arch, c.want)
		}
		if c.warning == "" && len(warnings) > 0 || c.warning != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], c.warning)) {
			t.Errorf("%s: warnings %q, want one mentioning %q", c.name, warnings, c.warning)
		}
	}
	if HostArch() != "x86_64" && HostArch() != "aarch64" {
		t.Errorf("HostArch() = %q on a machine these tests run on", HostArch())
	}
}

package image

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"regexp"
)

// Glibc identifies the C library an image bundles: its two halves (ld.so
// and libc.so.6) come from one glibc build and work only together, so a node
// whose ld.so differs must run the app under the image's (docs/exec.md,
// "Images and nodes"). Everything here is read from the ELF files' notes and
// data; nothing of the image runs.
type Glibc struct {
	Version     string `json:"version"`       // "2.36", from libc's banner
	Ldso        string `json:"ldso"`          // the bundled ld.so's path
	LdsoBuildID string `json:"ldso_build_id"` // its NT_GNU_BUILD_ID, hex
	Libc        string `json:"libc"`          // the bundled libc.so.6's path
	MinKernel   string `json:"min_kernel"`    // libc's .note.ABI-tag: the oldest kernel it runs on ("3.2.0")
}

// ldsoName and libcName match the file names of glibc's halves: the
// interpreter (ld-linux-x86-64.so.2, ld-linux-aarch64.so.1, and before 2.34
// Debian's ld-2.31.so) and libc (libc.so.6, libc-2.31.so).
var (
	ldsoName = regexp.MustCompile(`^ld(-linux[-a-z0-9_]*\.so\.[0-9]+|-[0-9]+\.[0-9]+\.so)$`)
	libcName = regexp.MustCompile(`^libc(\.so\.6|-[0-9]+\.[0-9]+\.so)$`)
)

// IsLdsoName reports whether a file name is a glibc program interpreter's.
func IsLdsoName(name string) bool { return ldsoName.MatchString(name) }

// IsLibcName reports whether a file name is glibc's libc.so.6's.
func IsLibcName(name string) bool { return libcName.MatchString(name) }

// Glibc returns the glibc the image bundles, or nil when it bundles no
// ld.so (an image of scripts or data). The first ld.so and libc in load order
// are taken: the pilot's own.
func (im *Image) Glibc() (*Glibc, error) {
	var ldso, libc *Entry
	for i := range im.toc.Entries {
		e := &im.toc.Entries[i]
		if e.Type != TypeRegular {
			continue
		}
		switch name := path.Base(e.Path); {
		case ldso == nil && IsLdsoName(name):
			ldso = e
		case libc == nil && IsLibcName(name):
			libc = e
		}
	}
	if ldso == nil {
		return nil, nil
	}
	read := func(e *Entry) (*bytes.Reader, error) {
		rc, err := im.Content(e)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", quote(e.Path), err)
		}
		return bytes.NewReader(b), nil
	}
	g := &Glibc{Ldso: ldso.Path}
	r, err := read(ldso)
	if err != nil {
		return nil, err
	}
	if g.LdsoBuildID, err = BuildID(r); err != nil {
		return nil, fmt.Errorf("%s: %w", quote(ldso.Path), err)
	}
	if libc != nil {
		g.Libc = libc.Path
		if r, err = read(libc); err != nil {
			return nil, err
		}
		if g.Version, g.MinKernel, err = LibcVersion(r); err != nil {
			return nil, fmt.Errorf("%s: %w", quote(libc.Path), err)
		}
	}
	return g, nil
}

// BuildID is the hex NT_GNU_BUILD_ID of an ELF file, "" if it has none.
func BuildID(r io.ReaderAt) (string, error) {
	desc, err := elfNote(r, 3 /* NT_GNU_BUILD_ID */)
	if err != nil || desc == nil {
		return "", err
	}
	return hex.EncodeToString(desc), nil
}

var banner = regexp.MustCompile(`GNU C Library [^\n\x00]* release version ([0-9]+\.[0-9]+)`)

// LibcVersion reads libc.so.6's release ("2.36", from the banner it prints
// when run, found in its data without running it) and the minimum kernel of
// its .note.ABI-tag ("3.2.0"; "" without the note).
func LibcVersion(r io.ReaderAt) (version, minKernel string, err error) {
	desc, err := elfNote(r, 1 /* NT_GNU_ABI_TAG */)
	if err != nil {
		return "", "", err
	}
	if len(desc) >= 16 && binary.LittleEndian.Uint32(desc) == 0 { // OS 0: Linux
		minKernel = fmt.Sprintf("%d.%d.%d", binary.LittleEndian.Uint32(desc[4:]),
			binary.LittleEndian.Uint32(desc[8:]), binary.LittleEndian.Uint32(desc[12:]))
	}
	var data []byte
	if sr, ok := r.(interface{ Size() int64 }); ok {
		data = make([]byte, sr.Size())
		if _, err := r.ReadAt(data, 0); err != nil && err != io.EOF {
			return "", minKernel, err
		}
	}
	if m := banner.FindSubmatch(data); m != nil {
		version = string(m[1])
	}
	return version, minKernel, nil
}

// elfNote is the descriptor of the first GNU note of type typ in an ELF
// file's PT_NOTE segments (nil if none).
func elfNote(r io.ReaderAt, typ uint32) ([]byte, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return GNUNote(f, typ), nil
}

// GNUNote is the descriptor of the first GNU note of type typ (3:
// NT_GNU_BUILD_ID, 1: NT_GNU_ABI_TAG) in f's PT_NOTE segments, nil if none.
// The file may be hostile: a segment over 64 KiB or one that cannot be read
// is skipped, and every size is bounded by the segment.
func GNUNote(f *elf.File, typ uint32) []byte {
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > 1<<16 {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil && err != io.EOF {
			continue
		}
		align := uint64(4)
		if p.Align == 8 {
			align = 8
		}
		for len(b) >= 12 {
			nsz, dsz, t := f.ByteOrder.Uint32(b), f.ByteOrder.Uint32(b[4:]), f.ByteOrder.Uint32(b[8:])
			off := uint64(12)
			nameEnd := off + uint64(nsz)
			descOff := (nameEnd + align - 1) &^ (align - 1)
			descEnd := descOff + uint64(dsz)
			if descEnd > uint64(len(b)) {
				break
			}
			if t == typ && nsz == 4 && string(b[off:off+3]) == "GNU" {
				return append([]byte(nil), b[descOff:descEnd]...)
			}
			next := (descEnd + align - 1) &^ (align - 1)
			if next > uint64(len(b)) {
				break
			}
			b = b[next:]
		}
	}
	return nil
}

package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// entryFor stats p (without following a final symlink) and returns its entry,
// as a load plan would.
func entryFor(t testing.TB, p string) Entry {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	e := Entry{Path: p, Mode: st.Mode, MtimeNS: st.Mtim.Nano(), CtimeNS: st.Ctim.Nano(), AtimeNS: st.Atim.Nano(),
		UID: st.Uid, GID: st.Gid, Nlink: uint32(st.Nlink), Dev: st.Dev, Ino: st.Ino}
	switch {
	case fi.Mode().IsRegular():
		e.Type, e.Size, e.Kind = TypeRegular, fi.Size(), KindData
	case fi.IsDir():
		e.Type = TypeDir
		e.Listing, e.Dots, e.DotDotIno = readDirNative(t, p)
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = TypeSymlink
		e.Target, err = os.Readlink(p)
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("%s: unexpected file type", p)
	}
	return e
}

// readDirNative reads a directory as build does (squash.ReadListing, which
// this package cannot import): names, types and d_ino in the order getdents
// returns them, where "." and ".." came (nil when first) and the d_ino of "..".
func readDirNative(t testing.TB, dir string) (listing []DirEntry, dots []int, dotdotIno uint64) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	dot, dotdot, seen := 0, 1, 0
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatalf("getdents %s: %v", dir, err)
		}
		if n == 0 {
			break
		}
		for off := 0; off < n; {
			ino := binary.NativeEndian.Uint64(buf[off:])
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			dt, name := buf[off+18], buf[off+19:off+reclen]
			name = name[:bytes.IndexByte(name, 0)]
			off += reclen
			switch string(name) {
			case ".":
				dot, seen = len(listing)+seen, seen+1
				continue
			case "..":
				dotdot, dotdotIno, seen = len(listing)+seen, ino, seen+1
				continue
			}
			ty := Type("other")
			switch dt {
			case unix.DT_REG:
				ty = TypeRegular
			case unix.DT_DIR:
				ty = TypeDir
			case unix.DT_LNK:
				ty = TypeSymlink
			case unix.DT_UNKNOWN:
				t.Fatalf("%s: getdents gives no d_type for %s", dir, name)
			}
			listing = append(listing, DirEntry{Name: string(name), Type: ty, Ino: ino})
		}
	}
	if dot != 0 || dotdot != 1 {
		dots = []int{dot, dotdot}
	}
	return listing, dots, dotdotIno
}

// treeEntries returns entries for root and everything below it (directories
// first, then files in walk order), skipping __pycache__.
func treeEntries(t testing.TB, root string) []Entry {
	t.Helper()
	var es []Entry
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "__pycache__" {
			return filepath.SkipDir
		}
		if d.Type()&^(fs.ModeDir|fs.ModeSymlink) != 0 {
			return nil // sockets, devices
		}
		es = append(es, entryFor(t, p))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// parents adds directory entries for the parents of es that are missing.
func withParents(t testing.TB, es []Entry) []Entry {
	have := map[string]bool{}
	for _, e := range es {
		have[e.Path] = true
	}
	var out []Entry
	var add func(p string)
	add = func(p string) {
		if p == "/" || have[p] {
			return
		}
		add(filepath.Dir(p))
		have[p] = true
		out = append(out, entryFor(t, p))
	}
	for _, e := range es {
		add(filepath.Dir(e.Path))
	}
	return append(out, es...)
}

func writeImage(t testing.TB, es []Entry, opts WriteOptions) ([]byte, WriteStats) {
	t.Helper()
	var buf bytes.Buffer
	st, err := Write(&buf, es, opts)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if st.StoredBytes != int64(buf.Len()) {
		t.Fatalf("StoredBytes %d, wrote %d", st.StoredBytes, buf.Len())
	}
	return buf.Bytes(), st
}

func openBytes(b []byte) (*Image, error) { return Open(bytes.NewReader(b), int64(len(b))) }

// splitImage returns the data and the TOC of a valid image: its header and
// decompressed body, concatenated (what withTOC takes).
func splitImage(t testing.TB, img []byte) (data []byte, raw []byte) {
	t.Helper()
	ft, err := parseFooter(img[len(img)-footerSize:], int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	payload := img[ft.TOCOffset+skippableHeaderSize : ft.TOCOffset+ft.TOCLength]
	dec, _ := zstd.NewReader(nil)
	defer dec.Close()
	body, err := dec.DecodeAll(payload[tocHeaderSize:], nil)
	if err != nil {
		t.Fatal(err)
	}
	return img[:ft.TOCOffset], append(append([]byte(nil), payload[:tocHeaderSize]...), body...)
}

// decodeRaw decodes a valid TOC (header and body) into its Go values.
func decodeRaw(t testing.TB, raw []byte, dataEnd int64) *toc {
	t.Helper()
	h, err := parseTOCHeader(raw, dataEnd)
	if err != nil {
		t.Fatal(err)
	}
	d, err := decodeTOC(&h, raw[tocHeaderSize:])
	if err != nil {
		t.Fatal(err)
	}
	var m tocMeta
	if len(d.meta) > 0 {
		if err := json.Unmarshal(d.meta, &m); err != nil {
			t.Fatal(err)
		}
	}
	d.toc.Pilots, d.toc.Build = m.Pilots, m.Build
	return &d.toc
}

// encodeRaw encodes tc as withTOC takes it: header and body.
func encodeRaw(t testing.TB, tc *toc) []byte {
	t.Helper()
	h, body, err := encodeTOC(tc)
	if err != nil {
		t.Fatal(err)
	}
	return append(h.marshal(), body...)
}

// rewriteTOC returns img with its TOC changed by mutate and a correct footer
// and digest: what a hostile writer could produce.
func rewriteTOC(t testing.TB, img []byte, mutate func(*toc)) []byte {
	t.Helper()
	data, raw := splitImage(t, img)
	tc := decodeRaw(t, raw, int64(len(data)))
	mutate(tc)
	return withTOC(data, encodeRaw(t, tc))
}

// withTOC appends a TOC frame holding raw (any bytes: a TOC header, then
// the body, which is compressed here) and a matching footer.
func withTOC(data, raw []byte) []byte {
	enc, _ := zstd.NewWriter(nil)
	defer enc.Close()
	payload := raw
	if len(raw) >= tocHeaderSize {
		payload = enc.EncodeAll(raw[tocHeaderSize:], append([]byte(nil), raw[:tocHeaderSize]...))
	}
	out := append([]byte(nil), data...)
	off := int64(len(out))
	out = append(out, skippableHeader(tocFrameMagic, len(payload))...)
	out = append(out, payload...)
	ft := footer{Version: FormatVersion, TOCOffset: off, TOCLength: int64(len(out)) - off, TOCSHA256: sha256.Sum256(payload)}
	return append(out, ft.marshal()...)
}

// setFooterVersion patches the version field of the footer.
func setFooterVersion(img []byte, v uint32) []byte {
	out := append([]byte(nil), img...)
	binary.LittleEndian.PutUint32(out[len(out)-footerPayloadSize+8:], v)
	return out
}

package image

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzImage is a small deterministic image: fixed paths, content and times
// (sources come from a temp dir through SourcePath), so that corpus entries
// stay meaningful from run to run.
func fuzzImage(t testing.TB) []byte {
	t.Helper()
	dir := t.TempDir()
	files := map[string][]byte{
		"a.py":   []byte("import os\nprint('a')\n"),
		"b.so":   bytes.Repeat([]byte("\x7fELF binary-ish "), 300),
		"c.py":   []byte("import os\nprint('a')\n"), // duplicate of a.py
		"empty":  nil,
		"big.so": bytes.Repeat([]byte("0123456789"), 5000),
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(dir, n), c, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reg := func(n string) Entry {
		return Entry{Path: "/fz/lib/" + n, Type: TypeRegular, Mode: 0o100644, Size: int64(len(files[n])),
			MtimeNS: 1_700_000_000_123_456_789, SourcePath: filepath.Join(dir, n)}
	}
	es := []Entry{
		{Path: "/", Type: TypeDir, Mode: 0o40755, Listing: []DirEntry{{Name: "fz", Type: TypeDir}}},
		// "." and ".." where ext4 may return them, and the d_ino of ".."
		{Path: "/fz", Type: TypeDir, Mode: 0o40755, Listing: []DirEntry{{Name: "lib", Type: TypeDir, Ino: 12}, {Name: "link", Type: TypeSymlink, Ino: 13}},
			Dots: []int{2, 0}, DotDotIno: 2},
		{Path: "/fz/lib", Type: TypeDir, Mode: 0o40755, Dots: []int{1, 0}, DotDotIno: 1 << 33},
		reg("a.py"), reg("b.so"), reg("c.py"), reg("empty"), reg("big.so"),
		{Path: "/fz/link", Type: TypeSymlink, Target: "lib/a.py"},
		{Path: "/fz/abs", Type: TypeSymlink, Target: "/etc/passwd"},
		{Path: "/fz/lib/nope.py", Type: TypeMissing},
		{Path: "/fz/ext", Type: TypeExternal},
	}
	var buf bytes.Buffer
	if _, err := Write(&buf, es, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzOpen feeds arbitrary bytes to Open; whatever opens must verify and
// extract without panicking or writing outside the target.
func FuzzOpen(f *testing.F) {
	img := fuzzImage(f)
	f.Add(img)
	f.Add(img[:len(img)-1])
	f.Add(setFooterVersion(img, 9))
	f.Add([]byte{})
	for _, h := range hostileStreams { // stream and TOC disagree
		f.Add(readHostile(f, h.file))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		im, err := openBytes(b)
		if err != nil {
			return
		}
		defer im.Close()
		exerciseImage(t, im)
	})
}

// FuzzExtract keeps the data frames of a valid image and fuzzes its TOC
// (the header and the decompressed body; withTOC compresses the body and
// writes a matching footer): every check of Open and Extract is reachable.
func FuzzExtract(f *testing.F) {
	img := fuzzImage(f)
	data, raw := splitImage(f, img)
	f.Add(raw)
	mutated := func(mutate func(*toc)) []byte {
		tc := decodeRaw(f, raw, int64(len(data)))
		mutate(tc)
		return encodeRaw(f, tc)
	}
	entry := func(tc *toc, p string) *Entry {
		for i := range tc.Entries {
			if tc.Entries[i].Path == p {
				return &tc.Entries[i]
			}
		}
		f.Fatalf("no entry %s", p)
		return nil
	}
	f.Add(mutated(func(tc *toc) { entry(tc, "/fz/lib/a.py").Path = "/fz/../a.py" }))
	f.Add(mutated(func(tc *toc) { entry(tc, "/fz/link").Target = "../../../../etc/passwd" }))
	f.Add(mutated(func(tc *toc) { entry(tc, "/fz/lib/c.py").Path = "/fz/lib/a.py" }))                                 // duplicate path
	f.Add(mutated(func(tc *toc) { entry(tc, "/fz/lib/b.so").Frames[0].Offset = 9223372036854775800 }))                // Offset+CSize overflow
	f.Add(mutated(func(tc *toc) { tc.Entries[1].Listing = append(tc.Entries[1].Listing, tc.Entries[1].Listing[0]) })) // a name listed twice
	f.Add(mutated(func(tc *toc) { entry(tc, "/fz").Dots = []int{0, 4} }))                                             // ".." past the read's end
	f.Fuzz(func(t *testing.T, raw []byte) {
		im, err := openBytes(withTOC(data, raw))
		if err != nil {
			return
		}
		defer im.Close()
		exerciseImage(t, im)
	})
}

// FuzzTOC feeds arbitrary TOCs (header and body) to the decoder and checks
// alone, seeded with the TOCs of real files' images: whatever is accepted
// must encode back to the same bytes (the reader and the writer agree on
// every field), and Lookup must find every entry.
func FuzzTOC(f *testing.F) {
	for _, img := range [][]byte{fuzzImage(f), realImage(f)} {
		_, raw := splitImage(f, img)
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) < tocHeaderSize {
			return
		}
		le := binary.LittleEndian
		h, err := parseTOCHeader(raw, int64(le.Uint64(raw[16:])))
		if err != nil {
			return
		}
		im := &Image{dataEnd: int64(h.DataEnd)}
		if err := im.load(&h, raw[tocHeaderSize:]); err != nil {
			return
		}
		tc := im.toc
		tc.Pilots, tc.Build = im.Pilots(), im.BuildInfo()
		h2, body, err := encodeTOC(&tc)
		if err != nil {
			t.Fatalf("an accepted TOC does not encode: %v", err)
		}
		h2.MetaSize, h2.BodySize = h.MetaSize, h.BodySize // meta: see below
		if !bytes.Equal(h2.marshal(), raw[:tocHeaderSize]) {
			t.Fatalf("header re-encodes differently:\n%x\n%x", h2.marshal(), raw[:tocHeaderSize])
		}
		// The meta area may hold JSON the encoder writes differently (key
		// order, spaces); the records and strings must not differ.
		l := h.layout()
		if !bytes.Equal(body[:l.meta], raw[tocHeaderSize:tocHeaderSize+l.meta]) {
			t.Fatalf("an accepted TOC re-encodes to other records or strings")
		}
		for i := range im.Entries() {
			if e, ok := im.Lookup(im.Entries()[i].Path); !ok || e != &im.Entries()[i] {
				t.Fatalf("Lookup(%q) does not find entry %d", im.Entries()[i].Path, i)
			}
		}
	})
}

// realImage is an image of real files (Python's json package and a few
// shared libraries, realSet): a seed shaped like what builds produce.
func realImage(t testing.TB) []byte {
	img, _ := writeImage(t, realSet(t), WriteOptions{Workers: 2})
	return img
}

// exerciseImage reads every entry, verifies, and extracts into a directory
// inside a sentinel directory, then checks that nothing appeared next to it
// and that every symlink created resolves inside it.
func exerciseImage(t *testing.T, im *Image) {
	for i := range im.Entries() {
		e := &im.Entries()[i]
		if rc, err := im.Content(e); err == nil {
			buf := make([]byte, 64<<10)
			for {
				if _, err := rc.Read(buf); err != nil {
					break
				}
			}
		}
	}
	im.Verify(context.Background())
	sentinel := t.TempDir()
	x := filepath.Join(sentinel, "x")
	err := im.Extract(context.Background(), x, ExtractOptions{Workers: 2})
	names, _ := os.ReadDir(sentinel)
	if len(names) > 1 || (len(names) == 1 && names[0].Name() != "x") {
		t.Fatalf("Extract wrote next to its target: %v", names)
	}
	if err != nil {
		if len(names) != 0 {
			t.Fatalf("failed Extract (%v) left %s behind", err, x)
		}
		return
	}
	filepath.Walk(x, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			resolved := filepath.Clean(filepath.Join(filepath.Dir(p), target))
			if filepath.IsAbs(target) || (resolved != x && !strings.HasPrefix(resolved, x+"/")) {
				t.Fatalf("symlink %s -> %s leaves %s", p, target, x)
			}
		}
		return nil
	})
}

package image

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// smallImage is a valid image of a few real files, one of them over a frame.
func smallImage(t testing.TB) ([]byte, []Entry) {
	t.Helper()
	var es []Entry
	for _, p := range []string{"/usr/lib/python3.11/json/__init__.py", "/usr/lib/python3.11/json/decoder.py",
		"/usr/lib/x86_64-linux-gnu/libcrypto.so.3", "/usr/lib/x86_64-linux-gnu/libz.so.1"} {
		es = append(es, entryFor(t, p))
	}
	es = withParents(t, es)
	img, _ := writeImage(t, es, WriteOptions{})
	return img, es
}

// withoutDots rewrites img's TOC in the layout version 2 had before the
// dots table (docs/SPEC.md 4): what main wrote before the listings merge.
func withoutDots(t testing.TB, img []byte) []byte {
	data, raw := splitImage(t, img)
	h, err := parseTOCHeader(raw, int64(len(data)))
	if err != nil || h.ByType[1] == 0 {
		t.Fatalf("want an image with directories: %v", err)
	}
	l := h.layout()
	body := raw[tocHeaderSize:]
	h.BodySize -= l.objects - l.dots
	old := append(h.marshal(), body[:l.dots]...)
	return withTOC(data, append(old, body[l.objects:]...))
}

func wantOpenError(t *testing.T, name string, img []byte, want string) {
	t.Helper()
	im, err := openBytes(img)
	if err == nil {
		im.Close()
		t.Errorf("%s: Open accepted the image", name)
		return
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%s: Open error %q does not mention %q", name, err, want)
	}
}

func TestOpenRejectsBrokenFiles(t *testing.T) {
	img, _ := smallImage(t)
	flip := func(off int) []byte {
		b := append([]byte(nil), img...)
		b[off] ^= 0x40
		return b
	}
	wantOpenError(t, "empty", nil, "shorter than")
	wantOpenError(t, "truncated by one byte", img[:len(img)-1], "not a dlbundle image")
	wantOpenError(t, "truncated in the data", img[:len(img)/2], "not a dlbundle image")
	wantOpenError(t, "footer magic", flip(len(img)-footerPayloadSize), "not a dlbundle image")
	wantOpenError(t, "version", setFooterVersion(img, 3), "version 3")
	wantOpenError(t, "flags", flip(len(img)-footerPayloadSize+12), "flags")
	wantOpenError(t, "toc offset", flip(len(img)-footerPayloadSize+16), "table of contents")
	wantOpenError(t, "toc digest", flip(len(img)-footerSize-10), "digest mismatch")
	wantOpenError(t, "not a toc", withTOC(nil, bytes.Repeat([]byte("not a table of contents "), 10)), "no table-of-contents header")
	wantOpenError(t, "version 1", setFooterVersion(img, 1), "image format version 1: rebuild with dlbundle build")
	wantOpenError(t, "version 2 before the dots table", withoutDots(t, img), "development build of format version 2 (no positions of . and .. in its table of contents): rebuild")
	wantOpenError(t, "a zip file", append([]byte("PK\x03\x04"), make([]byte, 100)...), "not a dlbundle image")
}

func TestOpenRejectsHostileTOC(t *testing.T) {
	img, _ := smallImage(t)
	reg := func(tc *toc) *Entry { // the multi-frame object
		for i := range tc.Entries {
			if len(tc.Entries[i].Frames) > 1 {
				return &tc.Entries[i]
			}
		}
		t.Fatal("no multi-frame entry")
		return nil
	}
	small := func(tc *toc) *Entry {
		for i := range tc.Entries {
			if len(tc.Entries[i].Frames) == 1 {
				return &tc.Entries[i]
			}
		}
		t.Fatal("no single-frame entry")
		return nil
	}
	cases := []struct {
		name, want string
		mutate     func(*toc)
	}{
		{"dotdot path", "not clean", func(tc *toc) { reg(tc).Path = "/usr/../../etc/shadow" }},
		{"relative path", "not absolute", func(tc *toc) { reg(tc).Path = "usr/lib/x.so" }},
		{"empty path", "paths are 1 to", func(tc *toc) { reg(tc).Path = "" }},
		{"4,000-byte path", "paths are 1 to 3072 bytes", func(tc *toc) { reg(tc).Path = "/" + strings.Repeat("d/", 1999) + "x" }},
		{"NUL in path", "NUL", func(tc *toc) { reg(tc).Path = "/usr/lib/a\x00b" }},
		{"duplicate path", "twice", func(tc *toc) { small(tc).Path = reg(tc).Path }},
		{"size larger than frames", "frames hold", func(tc *toc) { reg(tc).Size += 1 << 20 }},
		{"size over 4 GiB", "content bytes", func(tc *toc) { reg(tc).Size = 1 << 40 }},
		{"frame outside file", "out of range", func(tc *toc) {
			e := reg(tc)
			e.Frames[len(e.Frames)-1].CSize += 1 << 20
		}},
		{"negative offset", "out of range", func(tc *toc) { reg(tc).Frames[0].Offset = -5 }},
		{"absurd usize", "out of range", func(tc *toc) { reg(tc).Frames[0].USize = 1 << 40 }},
		{"gap between frames", "does not follow", func(tc *toc) { reg(tc).Frames[1].Offset++ }},
		{"overlapping objects", "overlap", func(tc *toc) {
			a, b := reg(tc), small(tc)
			b.Frames[0].Offset = a.Frames[0].Offset + 1
		}},
		{"shared frames, other content", "overlap", func(tc *toc) {
			a, b := reg(tc), small(tc)
			b.Frames, b.Size = append([]Frame(nil), a.Frames...), a.Size
		}},
		{"unknown type", "unknown type", func(tc *toc) {
			e := &tc.Entries[0] // a directory: the dots record goes (only a directory has one)
			e.Type, e.Dots, e.DotDotIno = "fifo", nil, 0
		}},
		{"below a symlink", "lies below", func(tc *toc) {
			tc.Entries = append(tc.Entries, Entry{Path: "/usr/lib/x86_64-linux-gnu/libz.so.1/x", Type: TypeMissing, Order: len(tc.Entries)})
		}},
		{"empty symlink target", "symlink target", func(tc *toc) {
			for i := range tc.Entries {
				if tc.Entries[i].Type == TypeSymlink {
					tc.Entries[i].Target = ""
				}
			}
		}},
		{"listing with slash", "invalid name", func(tc *toc) { tc.Entries[0].Listing[0].Name = "../x" }},
		{"listing names a file twice", "twice", func(tc *toc) { tc.Entries[0].Listing[1].Name = tc.Entries[0].Listing[0].Name }},
		{". and .. at one position", "not two positions", func(tc *toc) { tc.Entries[0].Dots = []int{1, 1} }},
		{".. beyond the listing", "not two positions", func(tc *toc) { tc.Entries[0].Dots = []int{0, len(tc.Entries[0].Listing) + 2} }},
		{". at 2^32-1", "not two positions", func(tc *toc) { tc.Entries[0].Dots = []int{-1, 0} }},
		{"frame over 4 MiB", "out of range", func(tc *toc) { reg(tc).Frames[0].USize = 8 << 20 }},
		{"mode type mismatch", "does not match", func(tc *toc) { reg(tc).Mode = 0o040755 }},
		{"missing with frames", "objects", func(tc *toc) {
			e := small(tc)
			e.Type = TypeMissing
		}},
		{"data end", "data ends", func(tc *toc) { tc.DataEnd-- }},
		{"root not a dir", "/ must be a directory", func(tc *toc) {
			tc.Entries[0].Path = "/"
			tc.Entries[0].Type = TypeMissing
			tc.Entries[0].Listing, tc.Entries[0].Dots, tc.Entries[0].DotDotIno = nil, nil, 0
		}},
	}
	for _, c := range cases {
		wantOpenError(t, c.name, rewriteTOC(t, img, c.mutate), c.want)
	}
}

// A corrupted data frame passes Open (the TOC is intact) but Content, Verify
// and Extract detect it, and Extract leaves nothing behind.
func TestCorruptDataDetected(t *testing.T) {
	img, _ := smallImage(t)
	im0, err := openBytes(img)
	if err != nil {
		t.Fatal(err)
	}
	var big *Entry
	for i := range im0.Entries() {
		if e := &im0.Entries()[i]; len(e.Frames) > 1 {
			big = e
		}
	}
	for _, where := range []struct {
		name string
		off  int64
	}{
		{"first frame", big.Frames[0].Offset + big.Frames[0].CSize/2},
		{"last frame", big.Frames[1].Offset + big.Frames[1].CSize/2},
		{"frame header", big.Frames[1].Offset + 1},
	} {
		bad := append([]byte(nil), img...)
		bad[where.off] ^= 0xff
		im, err := openBytes(bad)
		if err != nil {
			t.Fatalf("%s: Open: %v", where.name, err)
		}
		if err := im.Verify(context.Background()); err == nil {
			t.Errorf("%s: Verify passed a corrupt image", where.name)
		}
		rc, _ := im.Content(big)
		if _, err := io.ReadAll(rc); err == nil {
			t.Errorf("%s: Content read a corrupt object without error", where.name)
		}
		dir := filepath.Join(t.TempDir(), "x")
		if err := im.Extract(context.Background(), dir, ExtractOptions{Workers: 2}); err == nil {
			t.Errorf("%s: Extract passed a corrupt image", where.name)
		}
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Errorf("%s: failed Extract left %s behind (%v)", where.name, dir, err)
		}
		if err := im.Extract(context.Background(), dir, ExtractOptions{SkipDigests: true}); err == nil {
			t.Errorf("%s: Extract with SkipDigests passed a corrupt frame (the zstd checksum must catch it)", where.name)
		}
		existing := t.TempDir()
		im.Extract(context.Background(), existing, ExtractOptions{})
		if names, _ := os.ReadDir(existing); len(names) != 0 {
			t.Errorf("%s: failed Extract into an empty dir left %d entries", where.name, len(names))
		}
	}
}

// A content digest that does not match the frames is caught by Verify and
// Content; a frames digest that does not match is caught by Extract too.
func TestDigestMismatchDetected(t *testing.T) {
	img, _ := smallImage(t)
	firstObject := func(tc *toc) *Entry {
		for i := range tc.Entries {
			if len(tc.Entries[i].Frames) > 0 {
				return &tc.Entries[i]
			}
		}
		t.Fatal("no object")
		return nil
	}
	badContent := rewriteTOC(t, img, func(tc *toc) { firstObject(tc).SHA256 = strings.Repeat("0", 64) })
	im, err := openBytes(badContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.Verify(context.Background()); err == nil || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("Verify: %v, want a digest error", err)
	}
	for i := range im.Entries() {
		if e := &im.Entries()[i]; len(e.Frames) > 0 {
			rc, _ := im.Content(e)
			if _, err := io.ReadAll(rc); err == nil || !strings.Contains(err.Error(), "digest") {
				t.Fatalf("Content: %v, want a digest error", err)
			}
			break
		}
	}

	badFrames := rewriteTOC(t, img, func(tc *toc) { firstObject(tc).FramesSHA256 = strings.Repeat("0", 64) })
	im, err = openBytes(badFrames)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.Verify(context.Background()); err == nil || !strings.Contains(err.Error(), "compressed frames") {
		t.Fatalf("Verify: %v, want a frames digest error", err)
	}
	dir := filepath.Join(t.TempDir(), "x")
	if err := im.Extract(context.Background(), dir, ExtractOptions{}); err == nil || !strings.Contains(err.Error(), "compressed frames") {
		t.Fatalf("Extract: %v, want a frames digest error", err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("failed Extract left %s behind", dir)
	}
	if err := im.Extract(context.Background(), dir, ExtractOptions{SkipDigests: true}); err != nil {
		t.Fatalf("Extract with SkipDigests checks no SHA-256, yet: %v", err)
	}
}

// A cancelled extraction (dlbundle extract on SIGINT, a stage timing out)
// leaves nothing behind.
func TestExtractCancelledCleansUp(t *testing.T) {
	img, _ := smallImage(t)
	im, err := openBytes(img)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := filepath.Join(t.TempDir(), "x")
	if err := im.Extract(ctx, dir, ExtractOptions{}); err == nil {
		t.Fatal("Extract with a cancelled context succeeded")
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("cancelled Extract left %s behind", dir)
	}
}

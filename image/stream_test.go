package image

import (
	"bytes"
	"context"
	"flag"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

var updateHostile = flag.Bool("update-hostile", false, "rewrite testdata/hostile/*.dlimg")

// The hostile stream images: valid TOC, digests and frames,
// but a cpio stream that says more than, or other than, the TOC. Written by
// TestHostileImagesUpToDate -update-hostile from fuzzImage; kept as files so
// that the fuzz targets start from them too.
var hostileStreams = []struct {
	file, want string
}{
	{"extra-absolute-member.dlimg", "does not have"},
	{"extra-dotdot-member.dlimg", "does not have"},
	{"symlink-target-mismatch.dlimg", "target"},
	{"type-mismatch.dlimg", "where the table of contents has"},
	{"member-name-mismatch.dlimg", "where the table of contents has"},
}

func readHostile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "hostile", name))
	if err != nil {
		t.Fatalf("%v (regenerate with go test ./image -run TestHostileImagesUpToDate -update-hostile)", err)
	}
	return b
}

// hostileImages builds the files of hostileStreams from fuzzImage.
func hostileImages(t testing.TB) map[string][]byte {
	img := fuzzImage(t)
	data, js := splitImage(t, img)
	tc := *decodeRaw(t, js, int64(len(data)))
	// The last gap: after the last object's frames, the members of the
	// entries after it (two symlinks) and the trailer.
	var lastEnd int64
	for _, e := range tc.Entries {
		if n := len(e.Frames); n > 0 {
			lastEnd = max(lastEnd, e.Frames[n-1].Offset+e.Frames[n-1].CSize)
		}
	}
	dec, _ := zstd.NewReader(nil)
	defer dec.Close()
	raw, err := dec.DecodeAll(data[lastEnd:], nil)
	if err != nil {
		t.Fatal(err)
	}
	trailerLen := int(headerLen("TRAILER!!!"))
	members, trail := raw[:len(raw)-trailerLen], raw[len(raw)-trailerLen:]
	member := func(name string, mode uint64, content string) []byte {
		e := Entry{Path: "/" + name, Type: TypeRegular, Mode: uint32(mode)}
		info := cpioInfo(&e, 999, 1, int64(len(content)))
		info.Name, info.Mode = name, mode
		b, err := metaMember(info, []byte(content))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	enc, _ := zstd.NewWriter(nil)
	defer enc.Close()
	withLastGap := func(raw []byte, mutate func(*toc)) []byte {
		d := append(append([]byte(nil), data[:lastEnd]...), enc.EncodeAll(raw, nil)...)
		t2 := tc
		t2.Entries = append([]Entry(nil), tc.Entries...)
		t2.DataEnd = int64(len(d))
		if mutate != nil {
			mutate(&t2)
		}
		return withTOC(d, encodeRaw(t, &t2))
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	entry := func(tc *toc, p string) *Entry {
		for i := range tc.Entries {
			if tc.Entries[i].Path == p {
				return &tc.Entries[i]
			}
		}
		t.Fatalf("no entry %s", p)
		return nil
	}
	return map[string][]byte{
		"extra-absolute-member.dlimg": withLastGap(cat(members, member("/tmp/dlbundle-hostile-abs", 0o100644, "pwned\n"), trail), nil),
		"extra-dotdot-member.dlimg":   withLastGap(cat(members, member("../dlbundle-hostile-dotdot", 0o100644, "pwned\n"), trail), nil),
		// Same length as the TOC's target, so that only the bytes differ.
		"symlink-target-mismatch.dlimg": withLastGap(cat(bytes.Replace(members, []byte("/etc/passwd"), []byte("/etc/shadow"), 1), trail), nil),
		// The stream has the symlink fz/link, the TOC a directory there.
		"type-mismatch.dlimg": withLastGap(raw, func(tc *toc) {
			e := entry(tc, "/fz/link")
			e.Type, e.Target, e.Mode = TypeDir, "", 0o40755
		}),
		// The stream names fz/abs ../../abs (same length in the header's name).
		"member-name-mismatch.dlimg": withLastGap(cat(bytes.Replace(members, []byte("fz/abs\x00"), []byte("../ab\x00\x00"), 1), trail), nil),
	}
}

// The committed hostile images are what hostileImages builds.
func TestHostileImagesUpToDate(t *testing.T) {
	imgs := hostileImages(t)
	dir := filepath.Join("testdata", "hostile")
	if *updateHostile {
		os.MkdirAll(dir, 0o755)
		for name, b := range imgs {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, h := range hostileStreams {
		if imgs[h.file] == nil {
			t.Errorf("hostileImages does not build %s", h.file)
		}
		readHostile(t, h.file)
	}
}

// Extract (and so exec's staging) refuses an image whose cpio stream and TOC
// disagree, as Verify does, and leaves nothing behind.
func TestExtractRefusesStreamTOCMismatch(t *testing.T) {
	for _, h := range hostileStreams {
		img := readHostile(t, h.file)
		im, err := openBytes(img)
		if err != nil {
			t.Fatalf("%s: Open must accept it (only the stream is hostile): %v", h.file, err)
		}
		if err := im.Verify(context.Background()); err == nil {
			t.Errorf("%s: Verify passed", h.file)
		}
		for _, skip := range []bool{false, true} {
			dir := filepath.Join(t.TempDir(), "x")
			err := im.Extract(context.Background(), dir, ExtractOptions{Workers: 2, SkipDigests: skip})
			if err == nil || !strings.Contains(err.Error(), h.want) {
				t.Errorf("%s (SkipDigests %v): Extract: %v, want an error mentioning %q", h.file, skip, err, h.want)
			}
			if _, err := os.Lstat(dir); !os.IsNotExist(err) {
				t.Errorf("%s: failed Extract left %s behind", h.file, dir)
			}
		}
		im.Close()
	}
	// The image they were made from extracts.
	im, err := openBytes(fuzzImage(t))
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	if err := im.Extract(context.Background(), filepath.Join(t.TempDir(), "x"), ExtractOptions{}); err != nil {
		t.Fatalf("valid image: %v", err)
	}
}

// README's recipe, zstd -dc | cpio -idm --no-absolute-filenames, keeps the
// hostile members inside the working directory; without the flag, GNU cpio
// writes the absolute one where it says. Run with the real tools.
func TestReadmeCpioRecipeStaysInside(t *testing.T) {
	for _, tool := range []string{"zstd", "cpio", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (make deps installs it): %v", tool, err)
		}
	}
	for _, name := range []string{"extra-absolute-member.dlimg", "extra-dotdot-member.dlimg"} {
		img, err := filepath.Abs(filepath.Join("testdata", "hostile", name))
		if err != nil {
			t.Fatal(err)
		}
		sentinel := t.TempDir()
		work := filepath.Join(sentinel, "work")
		os.Mkdir(work, 0o755)
		cmd := exec.Command("sh", "-c", `zstd -dc "$1" | cpio -idm --no-absolute-filenames --quiet`, "sh", img)
		cmd.Dir = work
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		if names, _ := os.ReadDir(sentinel); len(names) != 1 {
			t.Errorf("%s: cpio --no-absolute-filenames wrote next to its directory: %v", name, names)
		}
		if _, err := os.Lstat("/tmp/dlbundle-hostile-abs"); err == nil {
			t.Errorf("%s: cpio --no-absolute-filenames wrote /tmp/dlbundle-hostile-abs", name)
		}
		if _, err := os.Lstat(filepath.Join(work, "fz", "lib", "a.py")); err != nil {
			t.Errorf("%s: the recipe did not extract the image: %v", name, err)
		}
	}
}

// A frame offset near 2^63 made Offset+CSize overflow and pass the bounds
// check; the image is refused at Open.
func TestOpenRefusesOverflowingFrameOffset(t *testing.T) {
	img := fuzzImage(t)
	for _, c := range []struct {
		off  int64
		want string
	}{{math.MaxInt64 - 8, "out of range"}, {math.MaxInt64, "out of range"}, {1 << 62, "out of range"}} {
		bad := rewriteTOC(t, img, func(tc *toc) {
			for i := range tc.Entries {
				if e := &tc.Entries[i]; len(e.Frames) == 1 {
					e.Frames[0].Offset = c.off
					return
				}
			}
		})
		wantOpenError(t, "frame offset", bad, c.want)
	}
}

// A frame declaring more content than zstd can expand it to is refused at
// Open: the declared sizes are what staging checks against free space.
func TestOpenRefusesImpossibleFrameRatio(t *testing.T) {
	img := fuzzImage(t)
	bad := rewriteTOC(t, img, func(tc *toc) {
		for i := range tc.Entries {
			if e := &tc.Entries[i]; len(e.Frames) == 1 {
				e.Frames[0].USize = e.Frames[0].CSize*maxFrameRatio + 1
				e.Size = e.Frames[0].USize
				return
			}
		}
	})
	wantOpenError(t, "frame ratio", bad, "ratio")
}

package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/u-root/u-root/pkg/cpio"
	"golang.org/x/sys/unix"
)

// realSet is a slice of a real Python + shared library installation: source
// files, directories, symlinks (libz.so.1 -> libz.so.1.2.13) and a shared
// object larger than one frame (libcrypto, > 4 MiB).
func realSet(t testing.TB) []Entry {
	t.Helper()
	var es []Entry
	for _, d := range []string{"/usr/lib/python3.11/json", "/usr/lib/python3.11/email", "/usr/lib/python3.11/encodings"} {
		es = append(es, treeEntries(t, d)...)
	}
	lib := "/usr/lib/x86_64-linux-gnu/"
	for _, f := range []string{"libz.so.1", "libz.so.1.2.13", "libexpat.so.1", "libcrypto.so.3", "libssl.so.3"} {
		p := lib + f
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			if target, _ := filepath.EvalSymlinks(p); target != "" && !strings.HasPrefix(target, lib) {
				continue
			}
		}
		es = append(es, entryFor(t, p))
	}
	es = append(es,
		Entry{Path: "/usr/lib/python3.11/json/_nonexistent.py", Type: TypeMissing},
		Entry{Path: "/usr/lib/python3.11/lib-dynload", Type: TypeExternal})
	return withParents(t, es)
}

func fileSHA(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestRoundTripRealFiles(t *testing.T) {
	in := realSet(t)
	img, st := writeImage(t, in, WriteOptions{Workers: 2, Build: map[string]string{"host": "test"},
		Pilots: []json.RawMessage{json.RawMessage(`{"rec":"header","command":["python3"]}`)}})
	if st.Entries != len(in) || st.RawBytes == 0 || st.StoredBytes >= st.RawBytes {
		t.Fatalf("stats %+v for %d entries", st, len(in))
	}
	im, err := openBytes(img)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	if im.BuildInfo()["host"] != "test" || len(im.Pilots()) != 1 || !strings.HasPrefix(im.TOCDigest(), "sha256:") {
		t.Fatalf("build info %v, pilots %d, digest %q", im.BuildInfo(), len(im.Pilots()), im.TOCDigest())
	}
	got := im.Entries()
	if len(got) != len(in) {
		t.Fatalf("%d entries, want %d", len(got), len(in))
	}
	multi := false
	for i := range in {
		a, b := &in[i], &got[i]
		if a.Path != b.Path || a.Type != b.Type || a.Size != b.Size || a.MtimeNS != b.MtimeNS || a.Mode != b.Mode ||
			a.Target != b.Target || !slices.Equal(a.Listing, b.Listing) || !slices.Equal(a.Dots, b.Dots) ||
			a.DotDotIno != b.DotDotIno || b.Order != i || a.Ino != b.Ino {
			t.Fatalf("entry %d: wrote %+v, read %+v", i, a, b)
		}
		if b.Type != TypeRegular {
			continue
		}
		if len(b.Frames) > 1 {
			multi = true
		}
		if want := fileSHA(t, a.Path); b.SHA256 != want {
			t.Fatalf("%s: sha256 %s, want %s", a.Path, b.SHA256, want)
		}
		rc, err := im.Content(b)
		if err != nil {
			t.Fatal(err)
		}
		c, err := io.ReadAll(rc)
		if err != nil {
			t.Fatalf("%s: %v", b.Path, err)
		}
		src, _ := os.ReadFile(a.Path)
		if !bytes.Equal(c, src) {
			t.Fatalf("%s: content differs", a.Path)
		}
	}
	if !multi {
		t.Fatal("no object was split into several frames (libcrypto should be)")
	}
	if e, ok := im.Lookup("/usr/lib/python3.11/json/__init__.py"); !ok || e.Type != TypeRegular {
		t.Fatalf("Lookup: %v %v", e, ok)
	}
	if _, ok := im.Lookup("/usr/lib/python3.11/json/nope.py"); ok {
		t.Fatal("Lookup found a path that is not in the image")
	}
	if err := im.Verify(context.Background()); err != nil {
		t.Fatalf("Verify: %v", err)
	}

	// On disk (unix.Pwrite) and on tmpfs (rawPwrite, the stage's case).
	shm, err := os.MkdirTemp("/dev/shm", "dlbundle-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	for _, parent := range []string{t.TempDir(), shm} {
		dir := filepath.Join(parent, "x")
		pfd, err := unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if memFS := isMemFS(pfd); memFS != (parent == shm) {
			t.Fatalf("isMemFS(%s) = %v", parent, memFS)
		}
		unix.Close(pfd)
		extractMatches(t, im, in, dir)
	}
}

// extractMatches extracts im into dir and checks every entry of in there.
func extractMatches(t *testing.T, im *Image, in []Entry, dir string) {
	t.Helper()
	if err := im.Extract(context.Background(), dir, ExtractOptions{Workers: 2}); err != nil {
		t.Fatalf("Extract: %v", err)
	}
	for _, e := range in {
		local := dir + e.Path
		fi, err := os.Lstat(local)
		switch e.Type {
		case TypeMissing, TypeExternal:
			if err == nil {
				t.Fatalf("%s (%s) was extracted", e.Path, e.Type)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", e.Path, err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Mode != e.Mode {
			t.Fatalf("%s: mode %#o, want %#o", e.Path, st.Mode, e.Mode)
		}
		if e.Type != TypeSymlink && st.Mtim.Nano() != e.MtimeNS {
			t.Fatalf("%s: mtime %d, want %d", e.Path, st.Mtim.Nano(), e.MtimeNS)
		}
		if e.Type == TypeRegular && fileSHA(t, local) != fileSHA(t, e.Path) {
			t.Fatalf("%s: extracted content differs", e.Path)
		}
	}
	// The symlink resolves inside dir to the bundled file.
	if got, want := fileSHA(t, dir+"/usr/lib/x86_64-linux-gnu/libz.so.1"), fileSHA(t, "/usr/lib/x86_64-linux-gnu/libz.so.1"); got != want {
		t.Fatal("extracted libz.so.1 symlink does not resolve to the bundled library")
	}
}

// Debian's zstd and cpio read the image as a cpio archive in load order.
func TestDebianZstdCpioCompatible(t *testing.T) {
	for _, tool := range []string{"zstd", "cpio"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (make deps): %v", tool, err)
		}
	}
	in := realSet(t)
	src := t.TempDir()
	dup := filepath.Join(src, "dup")
	os.MkdirAll(dup, 0o755)
	data := bytes.Repeat([]byte("same content\n"), 1000)
	for _, n := range []string{"a.txt", "b.txt"} {
		os.WriteFile(filepath.Join(dup, n), data, 0o644)
	}
	in = append(in, withParents(t, []Entry{entryFor(t, dup+"/a.txt"), entryFor(t, dup+"/b.txt")})...)
	img, _ := writeImage(t, in, WriteOptions{Workers: 2})
	imgPath := filepath.Join(t.TempDir(), "app.dlimg")
	os.WriteFile(imgPath, img, 0o644)

	out, err := exec.Command("sh", "-c", "zstd -dc "+imgPath+" | cpio -it --quiet").CombinedOutput()
	if err != nil {
		t.Fatalf("zstd -dc | cpio -it: %v\n%s", err, out)
	}
	var want []string
	for _, e := range in {
		if e.Path != "/" && (e.Type == TypeRegular || e.Type == TypeDir || e.Type == TypeSymlink) {
			want = append(want, strings.TrimPrefix(e.Path, "/"))
		}
	}
	if got := strings.Fields(string(out)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("cpio -it lists %d names, want %d in load order:\n%s", len(got), len(want), out)
	}

	x := t.TempDir()
	cmd := exec.Command("sh", "-c", "zstd -dc "+imgPath+" | cpio -idm --quiet")
	cmd.Dir = x
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -idm: %v\n%s", err, out)
	}
	for _, e := range in {
		if e.Type == TypeRegular {
			if got := fileSHA(t, x+e.Path); got != fileSHA(t, e.Path) {
				t.Fatalf("cpio extracted %s with different content", e.Path)
			}
		}
	}
	if fileSHA(t, x+dup+"/b.txt") != fileSHA(t, dup+"/b.txt") {
		t.Fatal("deduplicated b.txt not restored by cpio")
	}
}

func TestReproducible(t *testing.T) {
	in := realSet(t)
	a, _ := writeImage(t, in, WriteOptions{Workers: 2})
	b, _ := writeImage(t, in, WriteOptions{Workers: 1})
	if !bytes.Equal(a, b) {
		t.Fatalf("two writes of the same input differ (%d and %d bytes)", len(a), len(b))
	}
}

func TestDedupe(t *testing.T) {
	dir := t.TempDir()
	content := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	other := append([]byte(nil), content...)
	other[100] ^= 1 // same size, different content
	for n, c := range map[string][]byte{"a": content, "b": other, "c": content, "d": content} {
		if err := os.WriteFile(filepath.Join(dir, n), c, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(dir, "d"), 0o755)
	var es []Entry
	for _, n := range []string{"a", "b", "c", "d"} {
		es = append(es, entryFor(t, filepath.Join(dir, n)))
	}
	var done, total int64
	img, st := writeImage(t, withParents(t, es), WriteOptions{Progress: func(d, t int64) { done, total = d, t }})
	if done != total || total != 2*int64(len(content)) {
		t.Fatalf("progress ended at %d of %d, want 2 MiB of 2 MiB (duplicates are not read)", done, total)
	}
	if st.DedupedBytes != 2*int64(len(content)) || st.Objects != 2 {
		t.Fatalf("stats %+v: want 2 objects and 2 MiB deduplicated", st)
	}
	if len(img) > len(content) { // two 1 MiB objects of a repetitive pattern compress to almost nothing
		t.Fatalf("image of %d bytes: duplicates stored?", len(img))
	}
	im, err := openBytes(img)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := im.Lookup(dir + "/a")
	c, _ := im.Lookup(dir + "/c")
	b, _ := im.Lookup(dir + "/b")
	if len(c.Frames) == 0 || c.Frames[0] != a.Frames[0] || b.Frames[0] == a.Frames[0] {
		t.Fatalf("frames a %v b %v c %v: want c sharing a's, b its own", a.Frames, b.Frames, c.Frames)
	}
	if err := im.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
	x := t.TempDir()
	if err := im.Extract(context.Background(), x, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c", "d"} {
		if fileSHA(t, x+dir+"/"+n) != fileSHA(t, dir+"/"+n) {
			t.Fatalf("%s differs after extraction", n)
		}
	}
	if fi, _ := os.Stat(x + dir + "/d"); fi.Mode().Perm() != 0o755 {
		t.Fatalf("d: mode %v, want 0755 (its own, not a's)", fi.Mode())
	}
}

func TestWriteFailsWhenFileChanged(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "lib.so")
	os.WriteFile(p, []byte("hello"), 0o644)
	e := entryFor(t, p)
	os.WriteFile(p, []byte("hello, longer now"), 0o644)
	_, err := Write(io.Discard, []Entry{e}, WriteOptions{})
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "changed") {
		t.Fatalf("Write of a file that grew: %v; want an error naming %s", err, p)
	}
	e.Size = 100 // shrank
	_, err = Write(io.Discard, []Entry{e}, WriteOptions{})
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("Write of a file that shrank: %v", err)
	}
	e.Size = 0 // was empty
	_, err = Write(io.Discard, []Entry{e}, WriteOptions{})
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("Write of an empty file that has content now: %v", err)
	}
	os.Remove(p)
	if _, err = Write(io.Discard, []Entry{e}, WriteOptions{}); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("Write of a file that vanished: %v", err)
	}
}

func TestSymlinkTargetsStayInside(t *testing.T) {
	cases := []struct{ link, target, want string }{
		{"/lib", "usr/lib", "usr/lib"},
		{"/lib", "/usr/lib", "usr/lib"},
		{"/usr/lib/x/libz.so", "../../../../../../etc/passwd", "../../../etc/passwd"},
		{"/a/b", "/", "../"},
		{"/a/b", "c", "c"},
		{"/a/b", "/a/c/d", "c/d"},
	}
	for _, c := range cases {
		if got := insideTarget(c.link, c.target); got != c.want {
			t.Errorf("insideTarget(%q, %q) = %q, want %q", c.link, c.target, got, c.want)
		}
	}
	// Extract: hostile absolute and climbing targets resolve inside dir.
	es := []Entry{
		{Path: "/etc", Type: TypeDir},
		{Path: "/etc/passwd-link", Type: TypeSymlink, Target: "/etc/passwd"},
		{Path: "/etc/up", Type: TypeSymlink, Target: "../../../../../../../../tmp"},
	}
	img, _ := writeImage(t, es, WriteOptions{})
	im, err := openBytes(img)
	if err != nil {
		t.Fatal(err)
	}
	x := t.TempDir()
	if err := im.Extract(context.Background(), x, ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"/etc/passwd-link", "/etc/up"} {
		target, _ := os.Readlink(x + l)
		resolved := filepath.Join(filepath.Dir(x+l), target)
		if !strings.HasPrefix(resolved, x+"/") {
			t.Fatalf("%s -> %q resolves to %s, outside %s", l, target, resolved, x)
		}
	}
}

func TestExtractRefusesNonEmptyDir(t *testing.T) {
	img, _ := writeImage(t, []Entry{{Path: "/d", Type: TypeDir}}, WriteOptions{})
	im, _ := openBytes(img)
	x := t.TempDir()
	os.WriteFile(filepath.Join(x, "keep"), nil, 0o644)
	if err := im.Extract(context.Background(), x, ExtractOptions{}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Extract into a non-empty dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(x, "keep")); err != nil {
		t.Fatal("Extract removed a file it did not create")
	}
}

// A listing is kept in the order the build read it (the order the app sees
// natively: docs/SPEC.md), with where the read returned "." and ".." and the
// d_ino of ".."; a directory whose dots came first reads back without
// positions (nil: [0, 1]).
func TestListingOrderKept(t *testing.T) {
	listing := []DirEntry{{Name: "zeta", Type: TypeRegular, Ino: 7}, {Name: "alpha", Type: TypeDir, Ino: 5}, {Name: "mid", Type: TypeSymlink, Ino: 9}}
	other := []DirEntry{{Name: "b", Type: TypeRegular, Ino: 3}, {Name: "a", Type: TypeRegular, Ino: 4}}
	img, _ := writeImage(t, []Entry{
		{Path: "/", Type: TypeDir},
		{Path: "/d", Type: TypeDir, Listing: listing, DotDotIno: 2, Dots: []int{4, 1}, Order: 1},
		{Path: "/e", Type: TypeDir, Listing: other, DotDotIno: 1 << 40, Dots: []int{0, 1}, Order: 2},
		{Path: "/f", Type: TypeDir, Order: 3},
	}, WriteOptions{})
	im, err := openBytes(img)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		path      string
		listing   []DirEntry
		dots      []int
		dotdotIno uint64
	}{
		{"/d", listing, []int{4, 1}, 2},
		{"/e", other, nil, 1 << 40},
		{"/f", nil, nil, 0},
	} {
		e, ok := im.Lookup(want.path)
		if !ok || !slices.Equal(e.Listing, want.listing) || !slices.Equal(e.Dots, want.dots) || e.DotDotIno != want.dotdotIno {
			t.Fatalf("%s read back: listing %+v, dots %v, dotdot_ino %d; want %+v in that order, dots %v, dotdot_ino %d",
				want.path, e.Listing, e.Dots, e.DotDotIno, want.listing, want.dots, want.dotdotIno)
		}
	}
}

// Write refuses a load plan its own reader would reject, naming the problem.
func TestWriteRejectsInvalidPlan(t *testing.T) {
	cases := []struct {
		name, want string
		es         []Entry
	}{
		{"below a symlink", "lies below", []Entry{
			{Path: "/lib", Type: TypeSymlink, Target: "usr/lib"},
			{Path: "/lib/libc.so.6", Type: TypeMissing}}},
		{"a listing naming a file twice", "twice", []Entry{
			{Path: "/d", Type: TypeDir, Listing: []DirEntry{{Name: "b", Type: TypeRegular}, {Name: "a", Type: TypeRegular}, {Name: "b", Type: TypeDir}}}}},
		{"duplicate path", "twice", []Entry{{Path: "/x", Type: TypeMissing}, {Path: "/x", Type: TypeMissing}}},
		{"relative path", "not absolute", []Entry{{Path: "x", Type: TypeMissing}}},
		{"unclean path", "not clean", []Entry{{Path: "/a/../b", Type: TypeMissing}}},
		{". and .. beyond the listing", "not two positions", []Entry{
			{Path: "/d", Type: TypeDir, Listing: []DirEntry{{Name: "a", Type: TypeRegular}}, Dots: []int{0, 3}}}},
		{"three positions of . and ..", "not two positions", []Entry{{Path: "/d", Type: TypeDir, Dots: []int{0, 1, 2}}}},
		{"a file with a .. inode", "only a directory", []Entry{{Path: "/x", Type: TypeMissing, DotDotIno: 5}}},
	}
	for _, c := range cases {
		_, err := Write(io.Discard, c.es, WriteOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Write error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
}

// Regular files over the cpio limit are left out with a warning and recorded
// as external (a sparse file: no 4 GiB of disk needed).
func TestHugeFileLeftOutWithWarning(t *testing.T) {
	p := filepath.Join(t.TempDir(), "huge.bin")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1<<32 + 10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var warnings []string
	img, _ := writeImage(t, withParents(t, []Entry{entryFor(t, p)}), WriteOptions{Warn: func(m string) { warnings = append(warnings, m) }})
	im, err := openBytes(img)
	if err != nil {
		t.Fatal(err)
	}
	e, ok := im.Lookup(p)
	if !ok || e.Type != TypeExternal || len(warnings) != 1 || !strings.Contains(warnings[0], p) {
		t.Fatalf("entry %+v, warnings %q: want external and one warning naming %s", e, warnings, p)
	}
}

// The writer formats newc headers itself (see cpioHeader); they must be
// byte-identical to u-root's.
func TestCpioHeaderMatchesURoot(t *testing.T) {
	for _, info := range []cpio.Info{
		{Ino: 1, Mode: 0o100644, UID: 1000, GID: 100, NLink: 1, MTime: 1700000000, FileSize: 5, Name: "usr/lib/x.so"},
		{Ino: 0xffffffff, Mode: 0o100755, NLink: 3, MTime: 0xffffffff, FileSize: 1, Name: "a"},
		{Ino: 7, Mode: 0o100600, NLink: 1, FileSize: 3, Name: "usr/lib/python3.11/encodings/__init__.py"},
	} {
		var buf bytes.Buffer
		rec := cpio.Record{Info: info, ReaderAt: bytes.NewReader(make([]byte, info.FileSize))}
		if err := cpio.Newc.Writer(&buf).WriteRecord(rec); err != nil {
			t.Fatal(err)
		}
		want := buf.Bytes()[:headerLen(info.Name)]
		if got := cpioHeader(info); !bytes.Equal(got, want) {
			t.Errorf("%s: header\n%q\nu-root writes\n%q", info.Name, got, want)
		}
	}
}

// Linux names are bytes, and version 2 stores them as bytes: a name that is
// not UTF-8 is kept as it is (version 1's JSON could not hold it).
func TestNonUTF8NamesKept(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "lib\xff.so")
	if err := os.WriteFile(bad, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var warnings []string
	es := []Entry{entryFor(t, dir), entryFor(t, bad)}
	img, _ := writeImage(t, withParents(t, es), WriteOptions{Warn: func(m string) { warnings = append(warnings, m) }})
	im, err := openBytes(img)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := im.Lookup(bad); !ok {
		t.Fatalf("%q missing", bad)
	}
	d, ok := im.Lookup(dir)
	if !ok || len(d.Listing) != 1 || d.Listing[0].Name != "lib\xff.so" {
		t.Fatalf("listing of %s: %+v", dir, d)
	}
	if len(warnings) != 0 {
		t.Fatalf("warnings %q", warnings)
	}
}

// A path too long for a stage (docs/SPEC.md 1.3) is left out of the image
// with a warning, and the build goes on.
func TestLongPathLeftOut(t *testing.T) {
	long := "/" + strings.Repeat("d/", 1999) + "x.so"
	var warnings []string
	img, _ := writeImage(t, []Entry{{Path: "/", Type: TypeDir}, {Path: long, Type: TypeMissing}, {Path: "/short", Type: TypeMissing}},
		WriteOptions{Warn: func(m string) { warnings = append(warnings, m) }})
	im, err := openBytes(img)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := im.Lookup(long); ok || len(im.Entries()) != 2 {
		t.Fatalf("the %d-byte path was kept (%d entries)", len(long), len(im.Entries()))
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "4003 bytes") {
		t.Fatalf("warnings %q: want one naming the path's length", warnings)
	}
}

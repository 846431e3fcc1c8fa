package image

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
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
		{Path: "/fz", Type: TypeDir, Mode: 0o40755, Listing: []DirEntry{{Name: "lib", Type: TypeDir}, {Name: "link", Type: TypeSymlink}}},
		{Path: "/fz/lib", Type: TypeDir, Mode: 0o40755},
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
	for _, h := range hostileStreams { // issue 10: stream and TOC disagree
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

// FuzzExtract keeps the data frames and footer of a valid image and fuzzes
// the TOC JSON: every check of Open and Extract is reachable.
func FuzzExtract(f *testing.F) {
	img := fuzzImage(f)
	data, js := splitImage(f, img)
	f.Add(js)
	f.Add([]byte(strings.Replace(string(js), `"/fz/lib/a.py"`, `"/fz/../a.py"`, 1)))
	f.Add([]byte(strings.Replace(string(js), `"lib/a.py"`, `"../../../../etc/passwd"`, 1)))
	f.Add(regexp.MustCompile(`"off":[0-9]+`).ReplaceAll(js, []byte(`"off":9223372036854775800`))) // issue 10: Offset+CSize overflow
	f.Fuzz(func(t *testing.T, js []byte) {
		im, err := openBytes(withTOC(data, js))
		if err != nil {
			return
		}
		defer im.Close()
		exerciseImage(t, im)
	})
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

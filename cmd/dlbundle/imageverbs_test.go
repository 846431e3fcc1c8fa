package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/clitest"
)

// buildCLI is the CLI built once per test binary (the verbs exit with their
// own status, so they are tested as a program).
func buildCLI(t *testing.T) string { return clitest.CLI(t) }

// runCLI runs bin and returns stdout+stderr and the exit status.
func runCLI(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// imageOfTree writes an image of a small tree: a copy of a real shared
// library, a Python source, a symlink, a directory and a missing path.
func imageOfTree(t *testing.T) (img, root string) {
	t.Helper()
	root = filepath.Join(t.TempDir(), "app")
	os.MkdirAll(root+"/lib", 0o755)
	libz, err := os.ReadFile("/usr/lib/x86_64-linux-gnu/libz.so.1")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(root+"/lib/libz.so.1.2.13", libz, 0o755)
	os.WriteFile(root+"/lib/mod.py", []byte("import os\n"), 0o644)
	os.Symlink("libz.so.1.2.13", root+"/lib/libz.so.1")
	var es []image.Entry
	for _, p := range []string{root, root + "/lib", root + "/lib/libz.so.1.2.13", root + "/lib/mod.py", root + "/lib/libz.so.1"} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		e := image.Entry{Path: p, Mode: st.Mode, MtimeNS: st.Mtim.Nano()}
		switch {
		case fi.IsDir():
			e.Type = image.TypeDir
			des, _ := os.ReadDir(p)
			for _, d := range des {
				ty := image.TypeRegular
				if d.IsDir() {
					ty = image.TypeDir
				} else if d.Type()&os.ModeSymlink != 0 {
					ty = image.TypeSymlink
				}
				e.Listing = append(e.Listing, image.DirEntry{Name: d.Name(), Type: ty})
			}
		case fi.Mode()&os.ModeSymlink != 0:
			e.Type = image.TypeSymlink
			e.Target, _ = os.Readlink(p)
		default:
			e.Type, e.Size, e.Kind = image.TypeRegular, fi.Size(), image.KindELFShared
		}
		es = append(es, e)
	}
	es = append(es, image.Entry{Path: root + "/lib/libnope.so", Type: image.TypeMissing})
	var buf bytes.Buffer
	if _, err := image.Write(&buf, es, image.WriteOptions{Pilots: []json.RawMessage{
		json.RawMessage(`{"rec":"header","command":["./app","--fast"],"host":"node17","glibc":"2.36"}`)}}); err != nil {
		t.Fatal(err)
	}
	img = filepath.Join(t.TempDir(), "app.dlimg")
	if err := os.WriteFile(img, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return img, root
}

func TestInspectVerifyExtractVerbs(t *testing.T) {
	bin := buildCLI(t)
	img, root := imageOfTree(t)

	out, code := runCLI(t, bin, "inspect", img)
	for _, want := range []string{"./app --fast", "node17", "glibc 2.36", "elf-shared", root + "/lib/libnope.so", "libz.so.1.2.13", "arch       x86_64\n"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("inspect (exit %d) does not show %q:\n%s", code, want, out)
		}
	}
	out, _ = runCLI(t, bin, "inspect", "--list", img)
	if !strings.Contains(out, root+"/lib/libz.so.1 -> libz.so.1.2.13") {
		t.Fatalf("inspect --list lacks the symlink:\n%s", out)
	}
	out, _ = runCLI(t, bin, "inspect", "--json", img)
	var s struct {
		Entries int
		ByType  map[string]int `json:"by_type"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Entries != 6 || s.ByType["reg"] != 2 || s.ByType["missing"] != 1 {
		t.Fatalf("inspect --json: %v %+v\n%s", err, s, out)
	}

	if out, code := runCLI(t, bin, "verify", "--against-source", img); code != 0 {
		t.Fatalf("verify --against-source of a fresh image: exit %d\n%s", code, out)
	}
	dir := filepath.Join(t.TempDir(), "tree")
	if out, code := runCLI(t, bin, "extract", img, dir); code != 0 {
		t.Fatalf("extract: exit %d\n%s", code, out)
	}
	if b, err := os.ReadFile(dir + root + "/lib/libz.so.1"); err != nil || len(b) == 0 {
		t.Fatalf("extracted symlink does not lead to the library: %v", err)
	}
	if out, code := runCLI(t, bin, "extract", img, dir); code == 0 || !strings.Contains(out, "not empty") {
		t.Fatalf("extract into a non-empty dir: exit %d\n%s", code, out)
	}

	// Stale: content changed, a missing path appeared.
	os.WriteFile(root+"/lib/mod.py", []byte("import re\n"), 0o644) // same size
	os.WriteFile(root+"/lib/libnope.so", nil, 0o644)
	out, code = runCLI(t, bin, "verify", "--against-source", img)
	if code != 3 || !strings.Contains(out, "stale: "+root+"/lib/mod.py: content differs") ||
		!strings.Contains(out, "stale: "+root+"/lib/libnope.so: recorded as missing, now exists") {
		t.Fatalf("verify --against-source after changes: exit %d, want 3\n%s", code, out)
	}
	// what matters first: the content and missing-file lines before the
	// listing that the new libnope.so changed
	if c, l := strings.Index(out, "content differs"), strings.Index(out, "listing changed"); l < 0 || c > l ||
		strings.Index(out, "recorded as missing") > l || !strings.Contains(out, "--from "+img) {
		t.Fatalf("verify --against-source does not put content and missing files first, or advise build --from:\n%s", out)
	}
	if _, code := runCLI(t, bin, "verify", img); code != 0 {
		t.Fatalf("plain verify of an intact but stale image: exit %d, want 0", code)
	}

	// Corrupt: one byte of data flipped.
	b, _ := os.ReadFile(img)
	b[len(b)/3] ^= 0xff
	bad := filepath.Join(t.TempDir(), "bad.dlimg")
	os.WriteFile(bad, b, 0o644)
	if out, code := runCLI(t, bin, "verify", bad); code != 1 || !strings.Contains(out, "corrupt") {
		t.Fatalf("verify of a corrupt image: exit %d, want 1\n%s", code, out)
	}
}

// Regression: inspect printed image-controlled strings raw, so a
// newline in a path forged a line of output (and an escape sequence could
// drive the terminal). Paths, symlink targets and the pilot's command line
// now come out Go-quoted when they hold anything unprintable.
func TestInspectEscapesControlBytes(t *testing.T) {
	bin := buildCLI(t)
	forged := "\nmissing paths (known not to exist): 0\n  /forged"
	content := filepath.Join(t.TempDir(), "c")
	os.WriteFile(content, []byte("\x7fELF not really"), 0o644)
	es := []image.Entry{
		{Path: "/", Type: image.TypeDir},
		{Path: "/app/lib" + forged + ".so", Type: image.TypeRegular, Size: 15, Kind: image.KindData, SourcePath: content},
		{Path: "/app/miss" + forged, Type: image.TypeMissing},
		{Path: "/app/dir\x1b[2J\x1b]0;pwned\x07", Type: image.TypeDir},
		{Path: "/app/link", Type: image.TypeSymlink, Target: "\r/forged\u202e"},
	}
	var buf bytes.Buffer
	if _, err := image.Write(&buf, es, image.WriteOptions{
		Pilots: []json.RawMessage{json.RawMessage(`{"rec":"header","command":["./app","--x\n/forged"],"host":"node\u001b[31m"}`)},
		Build:  map[string]string{"host": "h\r/forged"},
	}); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "hostile.dlimg")
	os.WriteFile(img, buf.Bytes(), 0o644)
	for _, args := range [][]string{{"inspect", img}, {"inspect", "--list", img}} {
		out, code := runCLI(t, bin, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, out)
		}
		for i := 0; i < len(out); i++ {
			if c := out[i]; (c < ' ' && c != '\n') || c == 0x7f {
				t.Errorf("%v prints control byte %#x: %q", args, c, out[max(0, i-40):min(len(out), i+40)])
				break
			}
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "/forged") && !strings.Contains(line, `\n`) && !strings.Contains(line, `\r`) {
				t.Errorf("%v: a line forged by the image: %q", args, line)
			}
		}
		if strings.Contains(out, "\u202e") {
			t.Errorf("%v prints a right-to-left override", args)
		}
	}
}

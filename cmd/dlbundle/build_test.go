package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/trace"
)

// writeTestTrace writes a trace of a pilot that read the given files, as
// `dlbundle trace` would, to name.
func writeTestTrace(t *testing.T, name string, files ...string) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := trace.NewWriter(f, trace.Header{Command: []string{"app"}, Cwd: "/", Start: "2026-01-01T00:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range files {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		size, mt, fd := st.Size(), st.ModTime().UnixNano(), 3
		if err := w.Event(&trace.Event{T: int64(i), Op: trace.OpOpen, Path: p, FD: &fd, Size: &size, MtimeNS: &mt}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(0, 1); err != nil {
		t.Fatal(err)
	}
}

func TestBuildIsReproducibleAndAtomic(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	app := filepath.Join(dir, "app")
	files := []string{app + "/lib/libc.so.6", app + "/a.dat", app + "/b.dat"}
	if err := os.MkdirAll(app+"/lib", 0o755); err != nil {
		t.Fatal(err)
	}
	libc, err := os.ReadFile("/usr/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		t.Fatal(err)
	}
	for i, content := range [][]byte{libc, []byte("same"), []byte("same")} {
		if err := os.WriteFile(files[i], content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeTestTrace(t, "dlbundle.trace.1", files[1])
	writeTestTrace(t, "dlbundle.trace.0", files[0], files[2])
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	for _, out := range []string{"one.dlimg", "two.dlimg"} {
		c := &BuildCmd{Output: out, Level: 3, Include: []string{app}} // outputs outside the traced tree
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
	}
	one, _ := os.ReadFile("one.dlimg")
	two, _ := os.ReadFile("two.dlimg")
	if len(one) == 0 || !bytes.Equal(one, two) {
		t.Fatalf("two builds of the same traces differ (%d and %d bytes)", len(one), len(two))
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
	im, err := image.OpenFile("one.dlimg")
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	if got := im.BuildInfo()["time"]; got != "2023-11-14T22:13:20Z" {
		t.Errorf("build time %q, want SOURCE_DATE_EPOCH's", got)
	}
	if len(im.Pilots()) != 2 {
		t.Errorf("%d pilots, want both ranks' headers", len(im.Pilots()))
	}
	var order []string
	for _, e := range im.Entries() {
		if e.Type == image.TypeRegular {
			order = append(order, filepath.Base(e.Path))
		}
	}
	// Rank 0 first (t=0: libc, t=1: b), rank 1 at t=0 (a): merged by time since start.
	if strings.Join(order, " ") != "libc.so.6 a.dat b.dat" {
		t.Errorf("load order %v", order)
	}
}

func TestBuildErrorsSayWhatToDo(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	run := func(c *BuildCmd) string {
		t.Helper()
		err := c.Run()
		if err == nil {
			t.Fatalf("%+v succeeded", c)
		}
		return err.Error()
	}
	if msg := run(&BuildCmd{Output: "app.dlimg"}); !strings.Contains(msg, "run `dlbundle trace -- CMD` first") {
		t.Errorf("no trace: %s", msg)
	}
	os.WriteFile("notes.txt", []byte("hello\n"), 0o644)
	if msg := run(&BuildCmd{Output: "app.dlimg", Traces: []string{"notes.txt"}}); !strings.Contains(msg, "notes.txt: not a dlbundle trace") {
		t.Errorf("not a trace: %s", msg)
	}
	os.WriteFile("v2.trace", []byte(`{"rec":"header","format":"dlbundle-trace","version":2}`+"\n"), 0o644)
	if msg := run(&BuildCmd{Output: "app.dlimg", Traces: []string{"v2.trace"}}); !strings.Contains(msg, "version 2") {
		t.Errorf("wrong version: %s", msg)
	}
	writeTestTrace(t, "dlbundle.trace", "/usr/bin/env")
	if msg := run(&BuildCmd{Output: filepath.Join(dir, "no-such-dir", "app.dlimg")}); !strings.Contains(msg, "writable -o") {
		t.Errorf("unwritable -o: %s", msg)
	}
	if msg := run(&BuildCmd{Output: dir}); !strings.Contains(msg, "is a directory") {
		t.Errorf("-o a directory: %s", msg)
	}
	os.WriteFile("app.py", []byte("print(1)\n"), 0o644)
	writeTestTrace(t, "app.trace", filepath.Join(dir, "app.py"))
	if msg := run(&BuildCmd{Output: "app.dlimg", Traces: []string{"app.trace"}, Exclude: []string{dir}}); !strings.Contains(msg, "nothing to bundle: 1 excluded by --exclude") {
		t.Errorf("nothing to bundle: %s", msg)
	}
	if msg := run(&BuildCmd{}); !strings.Contains(msg, "-o app.dlimg") {
		t.Errorf("no -o: %s", msg)
	}
	if msg := run(&BuildCmd{Output: "app.dlimg", Level: 99}); !strings.Contains(msg, "level") {
		t.Errorf("bad level: %s", msg)
	}
	if _, err := os.Stat("app.dlimg"); err == nil {
		t.Errorf("a failed build left app.dlimg")
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

func TestBuildDryRunListsThePlanAndWritesNothing(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	writeTestTrace(t, "dlbundle.trace", "/usr/bin/env")
	var out bytes.Buffer
	if err := (&BuildCmd{DryRun: true, summary: &out}).Run(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{" reg      elf-exec ", " /usr/bin/env\n", "no image written (--dry-run)", "1 reg, "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out.String())
		}
	}
	if names, _ := os.ReadDir(dir); len(names) != 1 {
		t.Errorf("dry run wrote files: %v", names)
	}
}

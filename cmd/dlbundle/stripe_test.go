package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeLFS puts an lfs on PATH that logs its arguments, answers getstripe
// with getstripeStatus and, for setstripe, creates the file (as the real one
// does) or fails.
func fakeLFS(t *testing.T, getstripeStatus int, setstripeOK bool) string {
	bin := t.TempDir()
	log := filepath.Join(bin, "log")
	set := `: > "$4"; exit 0`
	if !setstripeOK {
		set = `echo "error: setstripe: Operation not supported" >&2; exit 95`
	}
	script := "#!/bin/sh\necho \"$*\" >> " + log + "\ncase $1 in\ngetstripe) exit " + itoa(getstripeStatus) + " ;;\nsetstripe) " + set + " ;;\nesac\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "lfs"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":/usr/bin:/bin")
	return log
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestBuildStripesOnLustre: on Lustre (lfs getstripe -d succeeds) the image
// file is created by lfs setstripe -c -1 and build says so; when setstripe
// fails build says that and writes with the default layout; off Lustre
// nothing is said or tried.
func TestBuildStripesOnLustre(t *testing.T) {
	dir := t.TempDir()
	var msg strings.Builder
	log := fakeLFS(t, 0, true)
	f, err := createImageFile(dir, ".app.dlimg.tmp-*", &msg)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	calls, _ := os.ReadFile(log)
	if !strings.Contains(string(calls), "setstripe -c -1 "+f.Name()) || !strings.Contains(msg.String(), "striped the image over all OSTs") {
		t.Errorf("lfs calls %q, message %q; want setstripe -c -1 on %s", calls, msg.String(), f.Name())
	}

	msg.Reset()
	fakeLFS(t, 0, false)
	f, err = createImageFile(dir, ".app.dlimg.tmp-*", &msg)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if !strings.Contains(msg.String(), "setstripe -c -1 failed") || !strings.Contains(msg.String(), "Operation not supported") {
		t.Errorf("failed setstripe: message %q", msg.String())
	}

	msg.Reset()
	log = fakeLFS(t, 2, true)
	if f, err = createImageFile(dir, ".app.dlimg.tmp-*", &msg); err != nil {
		t.Fatal(err)
	}
	f.Close()
	calls, _ = os.ReadFile(log)
	if msg.Len() != 0 || strings.Contains(string(calls), "setstripe") {
		t.Errorf("off Lustre: message %q, lfs calls %q", msg.String(), calls)
	}
}

// TestBuildOnLustreEndToEnd: the build verb through a fake lfs writes a
// complete image and says it striped it.
func TestBuildOnLustreEndToEnd(t *testing.T) {
	bin := buildCLI(t)
	log := fakeLFS(t, 0, true)
	dir := t.TempDir()
	writeTestTrace(t, filepath.Join(dir, "app.trace"), "/bin/true")
	out := filepath.Join(dir, "app.dlimg")
	got, code := runCLI(t, bin, "build", "-o", out, filepath.Join(dir, "app.trace"))
	if code != 0 || !strings.Contains(got, "lfs setstripe -c -1") {
		t.Fatalf("build exit %d:\n%s", code, got)
	}
	calls, _ := os.ReadFile(log)
	if !strings.Contains(string(calls), "setstripe -c -1 "+dir+"/.app.dlimg.tmp-") {
		t.Errorf("lfs calls %q", calls)
	}
	if _, code := runCLI(t, bin, "verify", out); code != 0 {
		t.Error("the striped image does not verify")
	}
}

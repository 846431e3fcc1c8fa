package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image/registry/registrytest"
)

// `-o /dev/null` is what users type to discard output; as root, trace -o,
// trace --html and build -o renamed their temporary file over it and turned
// /dev/null into a regular file for every user of the node. Checked, as the
// red team did, on a copy of /dev/null made with mknod (the real one is not
// put at risk): it stays a character device, and what was written went into
// it. A FIFO with a reader gets the output; one without is refused at once.
func TestOutputsWriteToDevicesNeverReplaceThem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("makes a device with mknod: run the tests as root")
	}
	dir := t.TempDir()
	t.Chdir(dir)
	null := filepath.Join(dir, "null")
	if err := unix.Mknod(null, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	isDevice := func(what string) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(null, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != unix.Mkdev(1, 3) {
			t.Fatalf("after %s, %s is no longer the character device 1:3 (mode %#o, %v)", what, null, st.Mode, err)
		}
	}
	if err := (&TraceCmd{Command: []string{"/bin/true"}, Output: null, Quiet: true}).Run(); err != nil {
		t.Fatalf("trace -o %s: %v", null, err)
	}
	isDevice("trace -o")
	// (the page is drawn from the trace file, so that one is real)
	if err := (&TraceCmd{Command: []string{"/bin/true"}, Output: "true.trace", Quiet: true, HTML: null}).Run(); err != nil {
		t.Fatalf("trace --html %s: %v", null, err)
	}
	isDevice("trace --html")
	writeTestTrace(t, "app.trace", "/usr/bin/env")
	if err := (&BuildCmd{Output: null, Traces: []string{"app.trace"}, summary: io.Discard}).Run(); err != nil {
		t.Fatalf("build -o %s: %v", null, err)
	}
	isDevice("build -o")
	if left, _ := filepath.Glob(filepath.Join(dir, ".null.tmp-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}

	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	err := (&TraceCmd{Command: []string{"/bin/true"}, Output: fifo, Quiet: true}).Run()
	if err == nil || !strings.Contains(err.Error(), "FIFO that no process reads") {
		t.Errorf("trace -o FIFO without a reader: %v; want a refusal", err)
	}
	got, ran := make(chan string, 1), make(chan struct{})
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		unix.SetNonblock(int(r.Fd()), false)
		// A read of a FIFO that no writer holds open returns EOF at once,
		// also before trace has opened its end: an EOF means "not yet" until
		// trace has returned (its end closed), then the rest is read.
		var b []byte
		for {
			select {
			case <-ran:
				rest, _ := io.ReadAll(r)
				got <- string(append(b, rest...))
				return
			default:
			}
			more, _ := io.ReadAll(r)
			b = append(b, more...)
			if len(more) == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	err = (&TraceCmd{Command: []string{"/bin/true"}, Output: fifo, Quiet: true}).Run()
	close(ran)
	if err != nil {
		t.Fatalf("trace -o FIFO with a reader: %v", err)
	}
	if b := <-got; !strings.Contains(b, `"header"`) {
		t.Errorf("the reader of the FIFO got %d bytes, not the trace: %.200q", len(b), b)
	}
	var st unix.Stat_t
	if unix.Lstat(fifo, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		t.Errorf("the FIFO was replaced (mode %#o)", st.Mode)
	}
}

// A trace lists argv, the working directory and every path the app looked
// up (~/.netrc among them); it and its page were 0644 whatever the umask.
// Both are now 0600 less the umask, and a previous trace of the caller's is
// replaced with the same mode.
func TestTracesAndPagesArePrivate(t *testing.T) {
	dir := t.TempDir()
	old := unix.Umask(0o022)
	defer unix.Umask(old)
	out, page := filepath.Join(dir, "ls.trace"), filepath.Join(dir, "ls.html")
	for round := range 2 { // the second replaces the first
		if err := (&TraceCmd{Command: []string{"/bin/true"}, Output: out, Quiet: true, HTML: page}).Run(); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{out, page} {
			fi, err := os.Stat(p)
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("round %d: %s: mode %v, %v; want 0600 (umask 022)", round, p, fi.Mode(), err)
			}
		}
	}
	unix.Umask(0o077)
	if err := (&TraceCmd{Command: []string{"/bin/true"}, Output: out, Quiet: true}).Run(); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o600 {
		t.Errorf("umask 077: mode %v; want 0600", fi.Mode())
	}
}

// Root writing an output never replaces another user's file (it is theirs:
// remove it first), nor writes below a directory another user made in a
// directory every user can write (uid 1001's /tmp/out, made first).
func TestOutputRefusesOthersFilesAndDirectories(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("plays uid 1001: run the tests as root")
	}
	dir := t.TempDir()
	theirs := filepath.Join(dir, "theirs.trace")
	if err := os.WriteFile(theirs, []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(theirs, 1001, 1001)
	err := (&TraceCmd{Command: []string{"/bin/true"}, Output: theirs, Quiet: true}).Run()
	if err == nil || !strings.Contains(err.Error(), "is a file of uid 1001, not yours") {
		t.Errorf("trace -o over uid 1001's file: %v; want a refusal", err)
	}
	if b, _ := os.ReadFile(theirs); string(b) != "theirs" {
		t.Errorf("uid 1001's file was replaced: %q", b)
	}
	tmp := filepath.Join(dir, "tmp")
	os.Mkdir(tmp, 0o700)
	os.Chmod(tmp, 0o777|os.ModeSticky)
	made := filepath.Join(tmp, "out")
	os.Mkdir(made, 0o777)
	os.Chown(made, 1001, 1001)
	err = (&TraceCmd{Command: []string{"/bin/true"}, Output: filepath.Join(made, "x.trace"), Quiet: true}).Run()
	if err == nil || !strings.Contains(err.Error(), "owned by uid 1001 and lies in "+tmp) {
		t.Errorf("trace -o below uid 1001's directory in a shared one: %v; want a refusal", err)
	}
	if names, _ := os.ReadDir(made); len(names) > 0 {
		t.Errorf("root wrote into uid 1001's directory: %v", names)
	}
}

// `dlbundle ls` created the stage dir it was asked to list (and its
// parents); listing now creates nothing, says there is nothing yet, and
// lists an existing stage dir as before.
func TestLsCreatesNothing(t *testing.T) {
	top := t.TempDir()
	stage := filepath.Join(top, "a", "b", "stage")
	if err := (&LsCmd{StageDir: stage}).Run(); err != nil {
		t.Fatalf("ls of a stage dir that does not exist: %v", err)
	}
	if names, _ := os.ReadDir(top); len(names) != 0 {
		t.Fatalf("ls created %v in %s", names, top)
	}
	if err := os.MkdirAll(stage, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := (&LsCmd{StageDir: stage}).Run(); err != nil {
		t.Fatalf("ls of an empty stage dir: %v", err)
	}
	if names, _ := os.ReadDir(stage); len(names) != 0 {
		t.Errorf("ls created %v in the stage dir", names)
	}
}

// pull -o /dev/null (or a FIFO) once refused, since a download is renamed
// over -o and a device cannot be: it now gets the verified image, copied
// from a private temporary download, and stays a device; a FIFO's reader
// gets the same bytes as a pull into a file; a FIFO no one reads is refused
// before anything is fetched.
func TestPullStreamsToDeviceOrFIFO(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("makes a device with mknod: run the tests as root")
	}
	dir := t.TempDir()
	null := filepath.Join(dir, "null")
	if err := unix.Mknod(null, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	addr, _ := registrytest.StartDistribution(t)
	t.Chdir(dir)
	writeTestTrace(t, "app.trace", "/usr/bin/env")
	ref := "oci://" + addr + "/apps/null:v1"
	if err := (&BuildCmd{Output: "app.dlimg", Traces: []string{"app.trace"}, Push: ref, summary: io.Discard}).Run(); err != nil {
		t.Fatal(err)
	}
	if err := (&PullCmd{Ref: ref, Output: null}).Run(); err != nil {
		t.Errorf("pull -o %s (a copy of /dev/null): %v", null, err)
	}
	var st unix.Stat_t
	if unix.Lstat(null, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		t.Errorf("pull replaced the device (mode %#o)", st.Mode)
	}
	if err := (&PullCmd{Ref: ref, Output: "file.dlimg"}).Run(); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile("file.dlimg")
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := (&PullCmd{Ref: ref, Output: fifo}).Run(); err == nil || !strings.Contains(err.Error(), "no process reads") {
		t.Errorf("pull -o a FIFO without a reader: %v; want a refusal", err)
	}
	got := make(chan []byte)
	go func() {
		f, err := os.Open(fifo) // blocks until pull opens it
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- b
	}()
	var err error
	for range 100 { // until the reader has opened its end
		if err = (&PullCmd{Ref: ref, Output: fifo}).Run(); err == nil || !strings.Contains(err.Error(), "no process reads") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("pull -o a FIFO with a reader: %v", err)
	}
	if b := <-got; len(want) == 0 || !bytes.Equal(b, want) {
		t.Errorf("the FIFO's reader got %d bytes, a pull into a file %d; want the same bytes", len(b), len(want))
	}
}

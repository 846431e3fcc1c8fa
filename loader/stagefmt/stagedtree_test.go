package stagefmt

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
)

// TestMarkNodeELFStaysInStage: MarkNodeELF (run by the stager, maybe root)
// reads the staged copy of every ELF entry of the table. A staged tree holds
// the image's symlinks: a relative one leading out of the stage must not
// make it read a file of the node, and a FIFO must not hang it. Before, it
// opened STAGE/root + path with open(2): it followed ../../ out of the stage
// (and marked the node's file as the image's ELF object), and blocked on the
// FIFO for ever.
func TestMarkNodeELFStaysInStage(t *testing.T) {
	t.Run("openat2", testMarkNodeELFStaysInStage)
	t.Run("os.Root", func(t *testing.T) { // kernels before 5.6
		withoutOpenat2 = true
		defer func() { withoutOpenat2 = false }()
		testMarkNodeELFStaysInStage(t)
	})
}

func testMarkNodeELFStaysInStage(t *testing.T) {
	class, data, machine, ok := nodeELF()
	if !ok {
		t.Skip("no node ELF identification for this architecture")
	}
	head := make([]byte, 20)
	copy(head, "\x7fELF")
	head[4], head[5] = class, data
	binary.LittleEndian.PutUint16(head[18:], machine)

	top := t.TempDir()
	dir := filepath.Join(top, "stage")
	outside := filepath.Join(top, "outside")
	for _, d := range []string{filepath.Join(dir, RootDir, "l"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The node's file the image's symlink leads to: ELF of this node.
	if err := os.WriteFile(filepath.Join(outside, "libnode.so"), head, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../outside", filepath.Join(dir, RootDir, "out")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, RootDir, "l", "fifo.so"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, RootDir, "l", "libok.so"), head, 0o644); err != nil {
		t.Fatal(err)
	}
	es := []image.Entry{
		{Path: "/l", Type: image.TypeDir},
		{Path: "/l/fifo.so", Type: image.TypeRegular, Kind: image.KindELFShared, Mode: 0o100644},
		{Path: "/l/libok.so", Type: image.TypeRegular, Kind: image.KindELFShared, Mode: 0o100644},
		{Path: "/out", Type: image.TypeSymlink, Target: "../../../outside"},
		{Path: "/out/libnode.so", Type: image.TypeRegular, Kind: image.KindELFShared, Mode: 0o100644},
	}
	tab, err := EncodeTable(es)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, TableFile), tab, 0o444); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- MarkNodeELF(dir) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		// Unblock the open of the FIFO so that the test ends.
		if f, err := os.OpenFile(filepath.Join(dir, RootDir, "l", "fifo.so"), os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatal("markNodeELF blocked on a FIFO in the staged tree")
	}
	got, err := os.ReadFile(filepath.Join(dir, TableFile))
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{"/l/libok.so": true, "/l/fifo.so": false, "/out/libnode.so": false} {
		_, flags, ok := Lookup(got, p)
		if !ok {
			t.Fatalf("%s: not in the table", p)
		}
		if (flags&FlagELFNode != 0) != want {
			t.Errorf("%s: node-ELF flag %v, want %v", p, flags&FlagELFNode != 0, want)
		}
	}
}

// TestDetectPreloadReadsStagedLibcOnly: the staged libc that decides the
// preload build is read below the staged root; an image whose ld.so
// directory is a symlink out of the stage, to a libc that defines
// GLIBC_2.34, gets the build for older glibc (nothing read outside).
func TestDetectPreloadReadsStagedLibcOnly(t *testing.T) {
	nodeLibc := NodeLibc()
	if !LibcDefines(nodeLibc, "GLIBC_2.34") {
		t.Skip("this node's libc has no GLIBC_2.34: nothing to tell apart")
	}
	libc, err := os.ReadFile(nodeLibc)
	if err != nil {
		t.Fatal(err)
	}
	top := t.TempDir()
	dir := filepath.Join(top, "stage")
	outside := filepath.Join(top, "outside")
	for _, d := range []string{outside, dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteShim(filepath.Join(dir, ShimDir)); err != nil {
		t.Fatal(err)
	}
	ld := DynamicLinker()
	for name, content := range map[string][]byte{filepath.Base(ld): []byte("ld"), "libc.so.6": libc} {
		if err := os.WriteFile(filepath.Join(outside, name), content, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(dir, RootDir)
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	lddir := filepath.Dir(ld) // /lib64: a symlink in the stage to ../../outside
	up, _ := filepath.Rel(filepath.Dir(filepath.Join(root, lddir)), outside)
	if err := os.MkdirAll(filepath.Dir(filepath.Join(root, lddir)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(up, filepath.Join(root, lddir)); err != nil {
		t.Fatal(err)
	}
	es := []image.Entry{
		{Path: lddir, Type: image.TypeDir},
		{Path: ld, Type: image.TypeRegular, Kind: image.KindELFShared, Mode: 0o100755},
		{Path: filepath.Join(lddir, "libc.so.6"), Type: image.TypeRegular, Kind: image.KindELFShared, Mode: 0o100755},
	}
	tab, err := EncodeTable(es)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, TableFile), tab, 0o444); err != nil {
		t.Fatal(err)
	}
	if got := DetectPreload(dir); got != PreloadObject {
		t.Errorf("detectPreload = %s: it read the libc outside the stage", got)
	}
	// The same libc inside the stage is read.
	os.Remove(filepath.Join(root, lddir))
	if err := os.Rename(outside, filepath.Join(root, lddir)); err != nil {
		t.Fatal(err)
	}
	if got := DetectPreload(dir); got != Preload234Object {
		t.Errorf("detectPreload = %s with the staged libc of glibc >= 2.34, want %s", got, Preload234Object)
	}
}

// FuzzLibcDefines: the staged libc's version table is an image's bytes,
// parsed as root while staging. The seed is a small shared object that
// defines GLIBC_2.2.5 and GLIBC_2.34, built here with gcc.
func FuzzLibcDefines(f *testing.F) {
	if seed := versionedObject(f); seed != nil {
		if !libcDefinesIn(bytes.NewReader(seed), "GLIBC_2.34") || libcDefinesIn(bytes.NewReader(seed), "GLIBC_9.99") {
			f.Fatal("the seed's version definitions are not read")
		}
		f.Add(seed)
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		libcDefinesIn(bytes.NewReader(b), "GLIBC_2.34")
	})
}

func versionedObject(f *testing.F) []byte {
	if _, err := exec.LookPath("gcc"); err != nil {
		return nil
	}
	dir := f.TempDir()
	script := filepath.Join(dir, "v.map")
	if err := os.WriteFile(script, []byte("GLIBC_2.2.5 { global: f; local: *; };\nGLIBC_2.34 { global: g; } GLIBC_2.2.5;\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	src := filepath.Join(dir, "v.c")
	if err := os.WriteFile(src, []byte("int f(void) { return 1; }\nint g(void) { return 2; }\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	so := filepath.Join(dir, "v.so")
	if out, err := exec.CommandContext(context.Background(), "gcc", "-shared", "-fPIC", "-nostdlib", "-s",
		"-Wl,--version-script="+script, "-o", so, src).CombinedOutput(); err != nil {
		f.Fatalf("gcc: %v\n%s", err, out)
	}
	b, err := os.ReadFile(so)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

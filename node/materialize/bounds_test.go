package materialize

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/treeimage"
	"github.com/dlbundle/dlbundle/loader/stagefmt"
)

var updateHostile = flag.Bool("update-hostile", false, "rewrite testdata/hostile/*.dlimg")

// The hostile images that bound staging, written by TestHostileImagesUpToDate
// -update-hostile with the real writer and kept in testdata/hostile:
//
//   - listing-amplifier: 40,000 one- to four-byte names listed in a directory
//     whose path is 3,000 bytes long (an image holds paths up to 3,072). The
//     TOC says ~1 MB; the lookup table would be 130 MB (every listed name
//     becomes a row holding the full path).
//   - zeros-64m: one file of 64 MiB of zeros, 10 KB of image.
//   - files-20k: a directory of 20,000 empty files (an inode each; listed
//     names cost no inode since the table holds the listings).
func hostileImages(t testing.TB) map[string][]byte {
	write := func(es []image.Entry) []byte {
		var buf bytes.Buffer
		if _, err := image.Write(&buf, es, image.WriteOptions{Level: 19}); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	names := func(n int) []image.DirEntry {
		var l []image.DirEntry
		for i := 0; i < n; i++ {
			l = append(l, image.DirEntry{Name: fmt.Sprintf("%x", i), Type: image.TypeRegular})
		}
		return l
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	files := func(n int) []image.Entry {
		es := []image.Entry{{Path: "/", Type: image.TypeDir, Mode: 0o40755},
			{Path: "/many", Type: image.TypeDir, Mode: 0o40755, Order: 1, Listing: names(n)}}
		for i, d := range names(n) {
			es = append(es, image.Entry{Path: "/many/" + d.Name, Type: image.TypeRegular, Mode: 0o100644, Order: 2 + i, SourcePath: empty})
		}
		return es
	}
	long := "/" + strings.Repeat(strings.Repeat("d", 199)+"/", 20)[:2999]
	zeros := filepath.Join(t.TempDir(), "zeros")
	if err := os.WriteFile(zeros, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(zeros, 64<<20); err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{
		"listing-amplifier.dlimg": write([]image.Entry{
			{Path: "/", Type: image.TypeDir, Mode: 0o40755},
			{Path: long, Type: image.TypeDir, Mode: 0o40755, Order: 1, Listing: names(40000)},
		}),
		"zeros-64m.dlimg": write([]image.Entry{
			{Path: "/", Type: image.TypeDir, Mode: 0o40755},
			{Path: "/zeros", Type: image.TypeRegular, Mode: 0o100644, Size: 64 << 20, Order: 1, SourcePath: zeros},
		}),
		"files-20k.dlimg": write(files(20000)),
	}
}

func TestHostileImagesUpToDate(t *testing.T) {
	dir := filepath.Join("testdata", "hostile")
	if *updateHostile {
		os.MkdirAll(dir, 0o755)
		for name, b := range hostileImages(t) {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, name := range []string{"listing-amplifier.dlimg", "zeros-64m.dlimg", "files-20k.dlimg"} {
		openHostile(t, name).Close()
	}
}

func openHostile(t testing.TB, name string) *image.Image {
	t.Helper()
	im, err := image.OpenFile(filepath.Join("testdata", "hostile", name))
	if err != nil {
		t.Fatalf("%v (regenerate with go test ./node/materialize -run TestHostileImagesUpToDate -update-hostile)", err)
	}
	return im
}

// smallTmpfs mounts a tmpfs of the given size and inode count (root only:
// the tests run as root, like the Slurm and FUSE ones).
func smallTmpfs(t *testing.T, opts string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Fatalf("mount a %s tmpfs on %s (needs root): %v", opts, dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// Materialize refuses, before writing anything, an image whose lookup table
// would be out of proportion to its TOC (an 11 KB image once took
// 35 s and 1.18 GB to write a 160 MB table).
func TestMaterializeRefusesTableAmplification(t *testing.T) {
	im := openHostile(t, "listing-amplifier.dlimg")
	defer im.Close()
	if n := stagefmt.TableSize(im.Entries()); n < 100<<20 {
		t.Fatalf("the hostile image's table would be %d bytes; the test needs one over 100 MB", n)
	}
	dir := t.TempDir()
	err := Materialize(context.Background(), im, dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "lookup table would take") {
		t.Fatalf("Materialize: %v, want a refusal naming the table", err)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("refused Materialize wrote %d entries first", len(names))
	}
}

// Materialize refuses an image whose declared content does not fit in the
// stage's file system, before writing anything (a 10 KB image of 64 MiB of
// zeros into an 8 MiB tmpfs), and one whose files need more inodes than are
// free.
func TestMaterializeRefusesWhatDoesNotFit(t *testing.T) {
	for _, c := range []struct{ image, mount, want string }{
		{"zeros-64m.dlimg", "size=8m", "only"},
		{"files-20k.dlimg", "size=64m,nr_inodes=5000", "inodes"},
	} {
		im := openHostile(t, c.image)
		dir := smallTmpfs(t, c.mount)
		err := Materialize(context.Background(), im, dir, Options{})
		im.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, unix.ENOSPC) {
			t.Errorf("%s in a %s tmpfs: Materialize: %v, want an ENOSPC refusal mentioning %q", c.image, c.mount, err, c.want)
		}
		if names, _ := os.ReadDir(dir); len(names) != 0 {
			t.Errorf("%s: refused Materialize wrote %d entries first", c.image, len(names))
		}
	}
	// Where it fits, the same images stage.
	for _, name := range []string{"zeros-64m.dlimg", "files-20k.dlimg"} {
		im := openHostile(t, name)
		if err := Materialize(context.Background(), im, smallTmpfs(t, "size=96m"), Options{}); err != nil {
			t.Errorf("%s in a 96 MiB tmpfs: %v", name, err)
		}
		im.Close()
	}
}

// stagefmt.TableSize is exactly what stagefmt.EncodeTable writes.
func TestTableSizeMatchesEncodeTable(t *testing.T) {
	for _, name := range []string{"files-20k.dlimg", "zeros-64m.dlimg"} {
		im := openHostile(t, name)
		es := im.Entries()
		tab, err := stagefmt.EncodeTable(es)
		if err != nil {
			t.Fatal(err)
		}
		if n := stagefmt.TableSize(es); n != uint64(len(tab)) {
			t.Errorf("%s: stagefmt.TableSize %d, stagefmt.EncodeTable wrote %d", name, n, len(tab))
		}
		im.Close()
	}
	es := treeimage.Entries(t, "/usr/lib/python3.11/json")
	tab, err := stagefmt.EncodeTable(es)
	if err != nil {
		t.Fatal(err)
	}
	if n := stagefmt.TableSize(es); n != uint64(len(tab)) {
		t.Errorf("python json tree: stagefmt.TableSize %d, stagefmt.EncodeTable wrote %d", n, len(tab))
	}
}

// cancelAfterExtract is an image whose extraction ends with the context
// cancelled: SIGTERM arriving as the last frame is written.
type cancelAfterExtract struct {
	*image.Image
	cancel context.CancelFunc
}

func (c cancelAfterExtract) Extract(ctx context.Context, dir string, opts image.ExtractOptions) error {
	err := c.Image.Extract(ctx, dir, opts)
	c.cancel()
	return err
}

// A signal after the extraction still ends staging: the steps after it look
// at the context (SIGTERM once did not stop an image with 800,000
// listing placeholders, and the app started anyway). The table, the shim
// objects and the ld.so probe are made beside the extraction; what follows
// it (the preload's choice, which the app's start reads, and the search
// rules) is not written.
func TestMaterializeStopsWhenCancelledAfterExtract(t *testing.T) {
	im := openHostile(t, "files-20k.dlimg")
	defer im.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	err := Materialize(ctx, cancelAfterExtract{im, cancel}, dir, Options{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Materialize after a cancel: %v, want context.Canceled", err)
	}
	for _, after := range []string{filepath.Join(stagefmt.ShimDir, stagefmt.PreloadChoice), stagefmt.SearchFile} {
		if _, err := os.Lstat(filepath.Join(dir, after)); err == nil {
			t.Errorf("cancelled Materialize went on to write %s", after)
		}
	}
}

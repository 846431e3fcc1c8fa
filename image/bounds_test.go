package image

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// manyEntriesImage writes, to a file, an image whose TOC holds n entries of
// type typ (missing or dir) named /m0000000, /m0000001, ...: the hostile
// image of issue 18 item 6 (3 million entries in a few MB). Its body is
// streamed through the compressor, so that the test does not hold it.
func manyEntriesImage(t testing.TB, n int, typ Type) string {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trailer()
	if err != nil {
		t.Fatal(err)
	}
	data := enc.EncodeAll(tr, nil)
	pathLen := len(fmt.Sprintf("/m%07d", 0))
	h := tocHeader{DataEnd: uint64(len(data)), Entries: uint32(n), StringsSize: uint32(n * pathLen), Arch: ArchAny}
	h.ByType[typeCodes[typ]-1] = uint32(n)
	h.BodySize = h.layout().end
	dir := t.TempDir()
	p := filepath.Join(dir, "many.dlimg")
	var comp strings.Builder
	zw, err := zstd.NewWriter(&comp, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriterSize(zw, 1<<20)
	rec := make([]byte, entryRecSize)
	for i := 0; i < n; i++ {
		clear(rec)
		binary.LittleEndian.PutUint32(rec[0:], uint32(i*pathLen))
		binary.LittleEndian.PutUint16(rec[4:], uint16(pathLen))
		rec[6] = typeCodes[typ]
		bw.Write(rec)
	}
	for i := 0; i < n; i++ {
		fmt.Fprintf(bw, "/m%07d", i)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	payload := append(h.marshal(), comp.String()...)
	out := append(data, skippableHeader(tocFrameMagic, len(payload))...)
	out = append(out, payload...)
	ft := footer{Version: FormatVersion, TOCOffset: int64(len(data)), TOCLength: int64(len(out) - len(data)), TOCSHA256: sha256.Sum256(payload)}
	out = append(out, ft.marshal()...)
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// allocatedBy is how many bytes fn allocates on the Go heap.
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Issue 18 item 6: 3 million entries in a 2.4 MB image cost version 1 4.0 GB
// and 41 s before any refusal (here: 3.08 GB of RSS, 4.7 GB allocated, open
// accepted it). The TOC header declares the count: Open refuses it from
// there, having read the file's tail and nothing more; and an image within
// the fixed limits that cannot fit the stage file system (inodes) is
// refused the same way, with ENOSPC.
func TestOpenRefusesHugeTOCInConstantMemory(t *testing.T) {
	huge := manyEntriesImage(t, 3_000_000, TypeMissing)
	fi, _ := os.Stat(huge)
	t.Logf("%d entries in a %d-byte image", 3_000_000, fi.Size())
	var err error
	alloc := allocatedBy(func() { _, err = OpenFile(huge) })
	if err == nil || !strings.Contains(err.Error(), "declares 3000000 entries, more than the 1000000") {
		t.Fatalf("Open: %v; want a refusal naming the declared count and the limit", err)
	}
	if alloc > 1<<20 {
		t.Errorf("refusing allocated %d bytes; want at most 1 MiB (the file's tail)", alloc)
	}

	// 200,000 directories are within the limits; a stage with 1,000
	// inodes cannot hold them.
	dirs := manyEntriesImage(t, 200_000, TypeDir)
	stage := t.TempDir()
	if err := unix.Mount("tmpfs", stage, "tmpfs", 0, "size=64m,nr_inodes=1000"); err != nil {
		t.Fatalf("mount a small tmpfs (needs root): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(stage, unix.MNT_DETACH) })
	alloc = allocatedBy(func() { _, err = OpenFileWith(dirs, OpenOptions{StageDir: stage}) })
	if !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), "declares 200000 files, directories and symlinks") {
		t.Fatalf("Open for a 1,000-inode stage: %v; want ENOSPC naming the declared count", err)
	}
	if alloc > 1<<20 {
		t.Errorf("refusing for the stage allocated %d bytes; want at most 1 MiB", alloc)
	}
	// Without a stage to fit, the same image opens (it is valid).
	im, err := OpenFile(dirs)
	if err != nil {
		t.Fatalf("the 200,000-directory image is valid: %v", err)
	}
	im.Close()
}

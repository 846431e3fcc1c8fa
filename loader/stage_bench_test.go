package loader

// Benchmarks for docs/bench/stage.md (make bench-stage):
//
//	BenchmarkStageCold    a cold node: Stage of an image of real shared libraries
//	                      (open, extract with digest checks, table, publish)
//	BenchmarkZstdDecodeAll the same frames decoded in memory by zstd DecodeAll on
//	                      all cores: the ceiling for staging on this machine
//
// Both report uncompressed MB/s. The image is built once per run from
// DLBUNDLE_BENCH_TREE (default /usr/lib/x86_64-linux-gnu): shared libraries of
// up to 16 MiB each, 256 MiB in all.

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/dlbundle/dlbundle/image"
)

var (
	benchImageOnce sync.Once
	benchImagePath string
	benchRawBytes  int64
)

func benchImage(b *testing.B) (string, int64) {
	benchImageOnce.Do(func() {
		tree := os.Getenv("DLBUNDLE_BENCH_TREE")
		if tree == "" {
			tree = "/usr/lib/x86_64-linux-gnu"
		}
		var entries []image.Entry
		var total int64
		filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() || !strings.Contains(d.Name(), ".so") || total > 256<<20 {
				return nil
			}
			info, err := d.Info()
			if err != nil || info.Size() > 16<<20 {
				return nil // a few huge libraries would make the set unrepresentative
			}
			entries = append(entries, image.Entry{Path: p, Type: image.TypeRegular, Mode: uint32(info.Mode().Perm()) | 0o100000,
				Size: info.Size(), MtimeNS: info.ModTime().UnixNano(), Order: len(entries)})
			total += info.Size()
			return nil
		})
		dir, err := os.MkdirTemp("", "dlbundle-bench")
		if err != nil {
			b.Fatal(err)
		}
		benchImagePath = filepath.Join(dir, "bench.dlimg")
		f, err := os.Create(benchImagePath)
		if err != nil {
			b.Fatal(err)
		}
		st, err := image.Write(f, entries, image.WriteOptions{})
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
		benchRawBytes = st.RawBytes
		b.Logf("bench image: %d files, %d MiB raw, %d MiB stored", st.Objects, st.RawBytes>>20, st.StoredBytes>>20)
	})
	return benchImagePath, benchRawBytes
}

func BenchmarkStageCold(b *testing.B) {
	img, raw := benchImage(b)
	b.SetBytes(raw)
	for b.Loop() {
		b.StopTimer()
		dir, err := OpenStageDir(filepath.Join(benchStageParent(b), "stage"))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := Stage(context.Background(), StageRequest{Dir: dir, Open: OpenImage(img, dir, MaterializeOptions{})}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		removeTree(dir)
		b.StartTimer()
	}
}

// benchStageParent is a fresh directory where exec would stage by default:
// /dev/shm when it is a writable tmpfs.
func benchStageParent(b *testing.B) string {
	parent := filepath.Dir(DefaultStageDir())
	dir, err := os.MkdirTemp(parent, "dlbundle-bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { removeTree(dir) })
	return dir
}

func BenchmarkZstdDecodeAll(b *testing.B) {
	img, raw := benchImage(b)
	im, err := image.OpenFile(img)
	if err != nil {
		b.Fatal(err)
	}
	var frames []image.Frame
	for _, e := range im.Entries() {
		frames = append(frames, e.Frames...)
	}
	im.Close()
	f, err := os.Open(img)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.SetBytes(raw)
	for b.Loop() {
		// Read the file front to back, as staging does, and decode on all cores.
		work := make(chan image.Frame)
		var wg sync.WaitGroup
		for range runtime.NumCPU() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dec, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
				defer dec.Close()
				var out []byte
				for fr := range work {
					buf := make([]byte, fr.CSize)
					if _, err := f.ReadAt(buf, fr.Offset); err != nil && err != io.EOF {
						b.Error(err)
						return
					}
					if out, err = dec.DecodeAll(buf, out[:0]); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		for _, fr := range frames {
			work <- fr
		}
		close(work)
		wg.Wait()
	}
}

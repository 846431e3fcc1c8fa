package image

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// The Python stdlib + numpy file set of docs/bench/image.md: everything under
// /usr/lib/python3.11 and numpy, and the shared libraries numpy's extension
// modules load (ldd).
func benchSet(b *testing.B) []Entry {
	b.Helper()
	numpy := "/usr/lib/python3/dist-packages/numpy"
	var es []Entry
	for _, d := range []string{"/usr/lib/python3.11", numpy} {
		filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
			if err == nil && (de.Type().IsRegular() || de.IsDir() || de.Type()&os.ModeSymlink != 0) {
				es = append(es, entryFor(b, p))
			}
			return nil
		})
	}
	sos, _ := filepath.Glob(numpy + "/*/*.so")
	libs := map[string]bool{}
	re := regexp.MustCompile(`=> (/\S+)`)
	for _, so := range sos {
		out, _ := exec.Command("ldd", so).Output()
		for _, m := range re.FindAllStringSubmatch(string(out), -1) {
			if real, err := filepath.EvalSymlinks(m[1]); err == nil && !libs[real] {
				libs[real] = true
				es = append(es, entryFor(b, real))
			}
		}
	}
	return withParents(b, es)
}

func rawBytes(es []Entry) int64 {
	var n int64
	for _, e := range es {
		if e.Type == TypeRegular {
			n += e.Size
		}
	}
	return n
}

// BenchmarkImage measures, in one run on the same data and level: raw zstd
// EncodeAll (files in memory, cut into the writer's frames, all cores) vs
// Write; raw DecodeAll of the image's frames vs Extract into /dev/shm.
func BenchmarkImage(b *testing.B) {
	es := benchSet(b)
	raw := rawBytes(es)
	workers := runtime.NumCPU()
	var files [][]byte
	for _, e := range es {
		if e.Type == TypeRegular {
			c, err := os.ReadFile(e.Path)
			if err != nil {
				b.Fatal(err)
			}
			files = append(files, c)
		}
	}
	b.Logf("file set: %d entries, %d regular files, %.1f MiB", len(es), len(files), float64(raw)/(1<<20))

	b.Run("EncodeAll", func(b *testing.B) {
		enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(3)),
			zstd.WithEncoderConcurrency(workers), zstd.WithEncoderCRC(true))
		defer enc.Close()
		var chunks [][]byte
		for _, f := range files {
			for len(f) > maxFrameContent {
				chunks = append(chunks, f[:maxFrameContent])
				f = f[maxFrameContent:]
			}
			chunks = append(chunks, f)
		}
		measure(b, raw, nil, func() {
			parallel(workers, len(chunks), func(i int, buf []byte) []byte { return enc.EncodeAll(chunks[i], buf[:0]) })
		})
	})
	b.Run("Write", func(b *testing.B) {
		var st WriteStats
		measure(b, raw, nil, func() {
			var err error
			if st, err = Write(io.Discard, es, WriteOptions{Workers: workers}); err != nil {
				b.Fatal(err)
			}
		})
		b.ReportMetric(float64(st.StoredBytes)/float64(raw), "size/raw")
	})
	var buf bytes.Buffer
	if _, err := Write(&buf, es, WriteOptions{Workers: workers}); err != nil {
		b.Fatal(err)
	}
	img := buf.Bytes()
	im, err := openBytes(img)
	if err != nil {
		b.Fatal(err)
	}
	var frames [][]byte
	var usizes []int
	for _, o := range im.owners() {
		for k, f := range im.Entries()[o].Frames {
			frames = append(frames, img[f.Offset:f.Offset+f.CSize])
			usizes = append(usizes, int(im.frameRawSize(o, k)))
		}
	}
	b.Run("DecodeAll", func(b *testing.B) {
		dec, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(workers))
		defer dec.Close()
		measure(b, raw, nil, func() {
			parallel(workers, len(frames), func(i int, buf []byte) []byte {
				if cap(buf) < usizes[i]+64 { // the slack that lets the decoder use fast copies
					buf = make([]byte, 0, usizes[i]+64)
				}
				out, err := dec.DecodeAll(frames[i], buf[:0])
				if err != nil {
					b.Error(err)
				}
				return out
			})
		})
	})
	decodeFrames := func(digests bool) func() {
		return func() {
			if err := im.decodeObjects(context.Background(), workers, discardSink{}, nil, digests); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Extract's pipeline without files, without and with SHA-256.
	b.Run("DecodeFrames", func(b *testing.B) { measure(b, raw, nil, decodeFrames(false)) })
	b.Run("DecodeFrames+SHA256", func(b *testing.B) { measure(b, raw, nil, decodeFrames(true)) })
	shm, err := os.MkdirTemp("/dev/shm", "dlbundle-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(shm)
	x := filepath.Join(shm, "x")
	extract := func(skip bool) func() {
		return func() {
			if err := im.Extract(context.Background(), x, ExtractOptions{Workers: workers, SkipDigests: skip}); err != nil {
				b.Fatal(err)
			}
		}
	}
	clean := func() { os.RemoveAll(x) }
	b.Run("Extract", func(b *testing.B) { measure(b, raw, clean, extract(false)) })
	b.Run("Extract-SkipDigests", func(b *testing.B) { measure(b, raw, clean, extract(true)) })
}

// cpuTime is the process's user+system CPU time: on a shared machine, CPU
// seconds per byte compare more stably than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs body in b.Loop (prep, when not nil, before each run and
// outside the timings) and reports CPU ms per op and MB per CPU second.
func measure(b *testing.B, raw int64, prep, body func()) {
	b.SetBytes(raw)
	var cpu time.Duration
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	n := 0
	for b.Loop() {
		if prep != nil {
			b.StopTimer()
			prep()
			b.StartTimer()
		}
		c0 := cpuTime()
		body()
		cpu += cpuTime() - c0
		n++
	}
	runtime.ReadMemStats(&ms1)
	b.ReportMetric(float64(ms1.NumGC-ms0.NumGC)/float64(n), "gc/op")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(n)/1e6, "alloc-MB/op")
	b.ReportMetric(float64(cpu.Milliseconds())/float64(n), "cpu-ms/op")
	b.ReportMetric(float64(raw)*float64(n)/1e6/cpu.Seconds(), "MB/cpu-s")
}

// parallel runs f(0..n-1) on workers goroutines; each keeps its buffer.
func parallel(workers, n int, f func(i int, buf []byte) []byte) {
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for i := range next {
				buf = f(i, buf)
			}
		}()
	}
	wg.Wait()
}

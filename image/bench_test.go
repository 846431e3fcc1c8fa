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
	"strconv"
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

// BenchmarkImage measures, on the same data at the same level, each
// iteration back to back (the machine is shared: ratios within an iteration
// are what to quote):
//   - Write vs raw zstd EncodeAll (files already in memory, cut into the
//     writer's 4 MiB frames, all cores);
//   - Extract into /dev/shm (with and without SHA-256 checks) and Extract's
//     decoding pipeline without files (with and without SHA-256) vs raw
//     DecodeAll of the image's frames (all cores).
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
	var chunks [][]byte
	for _, f := range files {
		for len(f) > maxFrameContent {
			chunks = append(chunks, f[:maxFrameContent])
			f = f[maxFrameContent:]
		}
		chunks = append(chunks, f)
	}
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(3)),
		zstd.WithEncoderConcurrency(workers), zstd.WithEncoderCRC(true))
	defer enc.Close()
	dec, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(workers))
	defer dec.Close()

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
	shm, err := os.MkdirTemp("/dev/shm", "dlbundle-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(shm)
	x := filepath.Join(shm, "x")

	steps := []struct {
		name string
		prep func()
		run  func()
	}{
		{"encodeall", nil, func() {
			parallel(workers, len(chunks), func(i int, buf []byte) []byte { return enc.EncodeAll(chunks[i], buf[:0]) })
		}},
		{"write", nil, func() {
			if _, err := Write(io.Discard, es, WriteOptions{Workers: workers}); err != nil {
				b.Fatal(err)
			}
		}},
		{"decodeall", nil, func() {
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
		}},
		{"decodeframes", nil, func() { // Extract's pipeline, no files, no SHA-256
			if err := im.decodeObjects(context.Background(), workers, discardSink{}, nil, digestChecks{}); err != nil {
				b.Fatal(err)
			}
		}},
		{"decodeframes+sha", nil, func() { // with Extract's check (compressed frames)
			if err := im.decodeObjects(context.Background(), workers, discardSink{}, nil, digestChecks{frames: true}); err != nil {
				b.Fatal(err)
			}
		}},
		{"decodeframes+contentsha", nil, func() { // with Verify's content check
			if err := im.decodeObjects(context.Background(), workers, discardSink{}, nil, digestChecks{content: true}); err != nil {
				b.Fatal(err)
			}
		}},
		{"writefiles", func() { os.RemoveAll(x); os.Mkdir(x, 0o755) }, func() {
			// The floor for materialising: the same files, already in
			// memory, written to /dev/shm (flat, 0644), all cores.
			parallel(workers, len(files), func(i int, buf []byte) []byte {
				if err := os.WriteFile(filepath.Join(x, strconv.Itoa(i)), files[i], 0o644); err != nil {
					b.Error(err)
				}
				return buf
			})
		}},
		{"extract-nosha", func() { os.RemoveAll(x) }, func() {
			if err := im.Extract(context.Background(), x, ExtractOptions{Workers: workers, SkipDigests: true}); err != nil {
				b.Fatal(err)
			}
		}},
		{"extract", func() { os.RemoveAll(x) }, func() {
			if err := im.Extract(context.Background(), x, ExtractOptions{Workers: workers}); err != nil {
				b.Fatal(err)
			}
		}},
	}
	wall := make([]time.Duration, len(steps))
	cpu := make([]time.Duration, len(steps))
	n := 0
	for b.Loop() {
		for i, st := range steps {
			if st.prep != nil {
				b.StopTimer()
				st.prep()
				b.StartTimer()
			}
			w0, c0 := time.Now(), cpuTime()
			st.run()
			wall[i] += time.Since(w0)
			cpu[i] += cpuTime() - c0
		}
		n++
	}
	mbs := func(d time.Duration) float64 { return float64(raw) * float64(n) / 1e6 / d.Seconds() }
	for i, st := range steps {
		b.ReportMetric(mbs(wall[i]), st.name+"-MB/s")
		b.ReportMetric(mbs(cpu[i]), st.name+"-MB/cpu-s")
	}
	b.ReportMetric(float64(len(img))/float64(raw), "size/raw")
}

// cpuTime is the process's user+system CPU time: on a shared machine, CPU
// seconds per byte compare more stably than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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

package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/oneproc"
	"github.com/dlbundle/dlbundle/squash"
	"github.com/dlbundle/dlbundle/trace"
)

// TestMain lets the test binary act as the tracer's stub (`dlbundle
// __trace-stub`), so that the benchmarks can run a real pilot. Otherwise it
// gives the tests every core, as main does for every verb but exec: the
// package's initializers ran on one P (internal/oneproc).
func TestMain(m *testing.M) {
	trace.BecomeStubIfAsked()
	oneproc.Restore()
	os.Exit(m.Run())
}

var numpyPilot struct {
	once  sync.Once
	trace string
	raw   int64
	files []string
	err   error
}

// numpyTrace traces `python3 -c 'import numpy'` once (Debian's python3-numpy).
func numpyTrace(b *testing.B) (string, int64, []string) {
	p := &numpyPilot
	p.once.Do(func() {
		dir, err := os.MkdirTemp("", "dlbundle-bench-")
		if err != nil {
			p.err = err
			return
		}
		self, _ := os.Executable()
		p.trace = filepath.Join(dir, "numpy.trace")
		res, err := trace.Run(trace.Options{
			Command: []string{"/usr/bin/env", "-i", "PYTHONNOUSERSITE=1", "/usr/bin/python3", "-c", "import numpy"},
			Output:  p.trace, Quiet: true, Stub: []string{self, trace.StubVerb, "--"},
			Getenv: func(string) string { return "" },
		})
		if err == nil && res.Exit != 0 {
			err = fmt.Errorf("python3 -c 'import numpy' exited %d (is python3-numpy installed?)", res.Exit)
		}
		if err != nil {
			p.err = err
			return
		}
		ts, err := squash.Load([]string{p.trace})
		if err != nil {
			p.err = err
			return
		}
		plan, err := squash.Build(ts, squash.Options{})
		if err != nil {
			p.err = err
			return
		}
		for _, e := range plan.Entries {
			if e.Type == image.TypeRegular {
				p.raw += e.Size
				p.files = append(p.files, e.Path)
			}
		}
	})
	if p.err != nil {
		b.Fatal(p.err)
	}
	return p.trace, p.raw, p.files
}

// BenchmarkBuildNumpy: `dlbundle build` end to end (read the trace, plan,
// compress on all cores, write, fsync, rename), MB/s of input content; each
// iteration also times raw zstd EncodeAll of the same files (already in
// memory, level 3, one call per file, all cores), the ceiling for build, so
// that their ratio is measured under the same load on a shared machine.
func BenchmarkBuildNumpy(b *testing.B) {
	tr, raw, files := numpyTrace(b)
	var contents [][]byte
	for _, f := range files {
		c, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		contents = append(contents, c)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(3)), zstd.WithEncoderConcurrency(runtime.NumCPU()))
	if err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(b.TempDir(), "numpy.dlimg")
	var buildTime, zstdTime time.Duration
	for b.Loop() {
		t0 := time.Now()
		c := &BuildCmd{Output: out, Traces: []string{tr}, Level: 3, summary: io.Discard}
		if err := c.Run(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if encodeAll(enc, contents) == 0 {
			b.Fatal("nothing compressed")
		}
		buildTime += t1.Sub(t0)
		zstdTime += time.Since(t1)
	}
	st, _ := os.Stat(out)
	mbps := func(d time.Duration) float64 { return float64(raw) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(buildTime), "build-MB/s")
	b.ReportMetric(mbps(zstdTime), "zstd-MB/s")
	b.ReportMetric(zstdTime.Seconds()/buildTime.Seconds(), "build/zstd")
	b.ReportMetric(float64(raw)/float64(st.Size()), "raw/image")
	b.ReportMetric(float64(raw)/1e6, "input-MB")
}

// encodeAll compresses every buffer with EncodeAll from NumCPU goroutines and
// returns the compressed bytes.
func encodeAll(enc *zstd.Encoder, contents [][]byte) int64 {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	next := make(chan []byte)
	for w := 0; w < runtime.NumCPU(); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dst []byte
			for c := range next {
				dst = enc.EncodeAll(c, dst[:0])
				mu.Lock()
				total += int64(len(dst))
				mu.Unlock()
			}
		}()
	}
	for _, c := range contents {
		next <- c
	}
	close(next)
	wg.Wait()
	return total
}

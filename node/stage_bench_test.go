package node

// Benchmarks for docs/bench/stage.md (make bench-stage):
//
//	BenchmarkStageCold    a cold node: Stage of an image of real shared libraries
//	                      (open, extract with digest checks, table, publish)
//	BenchmarkExtractOnly  image.Extract alone, to the same place
//	BenchmarkStageMemory  RSS/PSS per rank of the staged files mapped by N ranks
//	BenchmarkStageVsDecodeAll both alternately in each iteration: their ratio
//	                      under the same load
//	BenchmarkZstdDecodeAll the same frames decoded in memory by zstd DecodeAll on
//	                      all cores: the ceiling for staging on this machine
//
// Both report uncompressed MB/s. The image is built once per run: from a
// pilot of `python3 -c 'import torch'` (Debian's python3-torch, ~560 MiB raw),
// or, when torch is missing or DLBUNDLE_BENCH_TREE names a directory, from
// its shared libraries (default /usr/lib/x86_64-linux-gnu, 256 MiB).
// DLBUNDLE_BENCH_IMAGE=FILE benchmarks an existing image instead.

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/image/registry"
	"github.com/dlbundle/dlbundle/internal/clitest"
	"github.com/dlbundle/dlbundle/node/materialize"
)

var (
	benchImageOnce sync.Once
	benchImagePath string
	benchRawBytes  int64
)

func benchImage(b *testing.B) (string, int64) {
	benchImageOnce.Do(func() {
		// One fixed place per user, rewritten by every run: no pile of temp dirs.
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("dlbundle-bench-%d", os.Getuid()))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		benchImagePath = filepath.Join(dir, "bench.dlimg")
		if given := os.Getenv("DLBUNDLE_BENCH_IMAGE"); given != "" {
			benchImagePath = given
		}
		if os.Getenv("DLBUNDLE_BENCH_IMAGE") != "" || os.Getenv("DLBUNDLE_BENCH_TREE") == "" && torchImage(b, dir, benchImagePath) {
			im, err := image.OpenFile(benchImagePath)
			if err != nil {
				b.Fatal(err)
			}
			for _, e := range im.Entries() {
				if e.Type == image.TypeRegular {
					benchRawBytes += e.Size
				}
			}
			b.Logf("bench image: `import torch` pilot, %d entries, %d MiB raw, %d MiB image", len(im.Entries()), benchRawBytes>>20, im.Size()>>20)
			im.Close()
			return
		}
		benchRawBytes = libraryImage(b, benchImagePath)
	})
	return benchImagePath, benchRawBytes
}

// torchImage builds the image of a pilot run of `python3 -c 'import torch'`
// (Debian's python3-torch: ~560 MiB raw, ~1,800 files, most of it
// libtorch_cpu.so) with the CLI, as a user would; false when torch is not
// installed.
func torchImage(b *testing.B, dir, out string) bool {
	env := clitest.CleanEnv(dir)
	probe := exec.Command("/usr/bin/python3", "-c", "import torch")
	probe.Env = env
	if probe.Run() != nil {
		b.Log("python3-torch not installed: benchmarking an image of shared libraries instead")
		return false
	}
	bin := clitest.CLI(b)
	for _, args := range [][]string{{"trace", "-q", "-o", "torch.trace", "--", "/usr/bin/python3", "-c", "import torch"},
		{"build", "-o", out, "torch.trace"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env = dir, env
		if o, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", args, err, o)
		}
	}
	return true
}

// libraryImage writes an image of the shared libraries in
// DLBUNDLE_BENCH_TREE (default /usr/lib/x86_64-linux-gnu), each of up to
// 16 MiB, 256 MiB in all, and returns its raw size.
func libraryImage(b *testing.B, out string) int64 {
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
	f, err := os.Create(out)
	if err != nil {
		b.Fatal(err)
	}
	st, err := image.Write(f, entries, image.WriteOptions{})
	if err != nil {
		b.Fatal(err)
	}
	f.Close()
	b.Logf("bench image: %d files, %d MiB raw, %d MiB stored", st.Objects, st.RawBytes>>20, st.StoredBytes>>20)
	return st.RawBytes
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
		if _, err := Stage(context.Background(), StageRequest{Dir: dir, Open: OpenImage(img, dir, materialize.Options{}, registry.Options{})}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		removeTree(dir)
		b.StartTimer()
	}
}

// BenchmarkExtractOnly is image.Extract alone into the same place: the
// share of staging that is decompression, digests and writing files.
func BenchmarkExtractOnly(b *testing.B) {
	img, raw := benchImage(b)
	im, err := image.OpenFile(img)
	if err != nil {
		b.Fatal(err)
	}
	defer im.Close()
	b.SetBytes(raw)
	for b.Loop() {
		b.StopTimer()
		dir := filepath.Join(benchStageParent(b), "x")
		b.StartTimer()
		if err := im.Extract(context.Background(), dir, image.ExtractOptions{}); err != nil {
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
	frames := imageFrames(b, img)
	b.SetBytes(raw)
	for b.Loop() {
		decodeAll(b, img, frames)
	}
}

// BenchmarkStageVsDecodeAll alternates a cold Stage and a raw DecodeAll of
// the same frames in every iteration, so that their ratio is measured under
// the same load (the machine is shared): reported as stage/decode-%. Each
// iteration also measures the two costs staging adds to decoding that it
// cannot drop (docs/bench/stage.md): writing as many bytes into the stage
// dir's file system (pwrite of 4 MiB blocks on all cores: page allocation
// and copy, floor-write) and the SHA-256 of the compressed frames in memory
// (the frames digests, on all cores: floor-sha).
func BenchmarkStageVsDecodeAll(b *testing.B) {
	img, raw := benchImage(b)
	frames := imageFrames(b, img)
	comp := readFrames(b, img, frames)
	var stageNS, decodeNS, stageCPU, decodeCPU, writeCPU, shaCPU int64
	var stageRU, decodeRU rusageDelta
	for b.Loop() {
		parent := benchStageParent(b)
		dir, err := OpenStageDir(filepath.Join(parent, "stage"))
		if err != nil {
			b.Fatal(err)
		}
		t0, c0, r0 := time.Now(), cpuNS(), rusage()
		if _, err := Stage(context.Background(), StageRequest{Dir: dir, Open: OpenImage(img, dir, materialize.Options{}, registry.Options{})}); err != nil {
			b.Fatal(err)
		}
		t1, c1, r1 := time.Now(), cpuNS(), rusage()
		decodeAll(b, img, frames)
		t2, c2, r2 := time.Now(), cpuNS(), rusage()
		// The floor writes into pages that the stage just freed, as each
		// stage writes into those of the previous iteration's.
		removeTree(dir)
		c2w := cpuNS()
		writeFloor(b, parent, raw)
		c3 := cpuNS()
		removeTree(parent)
		c3s := cpuNS()
		shaFloor(comp)
		c4 := cpuNS()
		stageNS += t1.Sub(t0).Nanoseconds()
		decodeNS += t2.Sub(t1).Nanoseconds()
		stageCPU += c1 - c0
		decodeCPU += c2 - c1
		writeCPU += c3 - c2w
		shaCPU += c4 - c3s
		stageRU.add(r0, r1)
		decodeRU.add(r1, r2)
	}
	n := float64(b.N)
	b.ReportMetric(float64(raw)*n/float64(stageNS)*1e3, "stage-MB/s")
	b.ReportMetric(float64(raw)*n/float64(decodeNS)*1e3, "decode-MB/s")
	b.ReportMetric(100*float64(decodeNS)/float64(stageNS), "stage/decode-%")
	// CPU time (user+sys of this process) per GB of content: what the two
	// cost whatever else the machine runs.
	b.ReportMetric(float64(stageCPU)/n/float64(raw)*1e3, "stage-CPU-ms/GB")
	b.ReportMetric(float64(decodeCPU)/n/float64(raw)*1e3, "decode-CPU-ms/GB")
	b.ReportMetric(float64(writeCPU)/n/float64(raw)*1e3, "floor-write-CPU-ms/GB")
	b.ReportMetric(float64(shaCPU)/n/float64(raw)*1e3, "floor-sha-CPU-ms/GB")
	// Counts that do not depend on the load: page faults and context
	// switches of the process (all threads) per stage and per decode.
	b.ReportMetric(float64(stageRU.minflt)/n, "stage-faults")
	b.ReportMetric(float64(decodeRU.minflt)/n, "decode-faults")
	b.ReportMetric(float64(stageRU.csw)/n, "stage-ctxsw")
	b.ReportMetric(float64(decodeRU.csw)/n, "decode-ctxsw")
}

// rusageDelta sums minor faults and context switches (voluntary and not)
// between two getrusage samples.
type rusageDelta struct{ minflt, csw int64 }

func (d *rusageDelta) add(a, b syscall.Rusage) {
	d.minflt += b.Minflt - a.Minflt
	d.csw += b.Nvcsw + b.Nivcsw - a.Nvcsw - a.Nivcsw
}

func rusage() syscall.Rusage {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru
}

// writeFloor writes size bytes into new files in dir with pwrite of 4 MiB
// blocks, one file per core, as staging writes the decoded frames.
func writeFloor(b *testing.B, dir string, size int64) {
	buf := make([]byte, 4<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	workers := int64(runtime.NumCPU())
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("floor-%d", w)))
			if err != nil {
				b.Error(err)
				return
			}
			defer f.Close()
			for off := int64(0); off < size/workers; off += int64(len(buf)) {
				if _, err := f.WriteAt(buf[:min(int64(len(buf)), size/workers-off)], off); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// readFrames reads the compressed frames into memory, for shaFloor.
func readFrames(b *testing.B, img string, frames []image.Frame) [][]byte {
	f, err := os.Open(img)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	out := make([][]byte, len(frames))
	for i, fr := range frames {
		out[i] = make([]byte, fr.CSize)
		if _, err := f.ReadAt(out[i], fr.Offset); err != nil && err != io.EOF {
			b.Fatal(err)
		}
	}
	return out
}

// shaFloor hashes the compressed frames (in memory: reading them is a cost
// of the decode too) with SHA-256, split between the cores.
func shaFloor(comp [][]byte) {
	workers := runtime.NumCPU()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := sha256.New()
			for i := w; i < len(comp); i += workers {
				h.Write(comp[i])
			}
		}()
	}
	wg.Wait()
}

// cpuNS is the user+system CPU time of this process so far.
func cpuNS() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func imageFrames(b *testing.B, img string) []image.Frame {
	im, err := image.OpenFile(img)
	if err != nil {
		b.Fatal(err)
	}
	defer im.Close()
	var frames []image.Frame
	for _, e := range im.Entries() {
		frames = append(frames, e.Frames...)
	}
	return frames
}

// decodeAll reads the frames front to back, as staging does, and decodes
// them in memory with zstd DecodeAll on all cores.
func decodeAll(b *testing.B, img string, frames []image.Frame) {
	f, err := os.Open(img)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
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
					continue
				}
				if out, err = dec.DecodeAll(buf, out[:0]); err != nil {
					b.Error(err)
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

// BenchmarkStageMemory: N ranks of `import numpy` run from one stage; the
// memory of the staged files they map (from /proc/PID/smaps) is shared, so
// the proportional share (PSS) per rank falls as N grows while RSS does not.
// Reported per rank, in KiB, for N=1 and N=8.
func BenchmarkStageMemory(b *testing.B) {
	bin := clitest.CLI(b)
	dir := b.TempDir()
	env := clitest.CleanEnv(dir)
	app := []string{"/usr/bin/python3", "-c", "import numpy, sys, time; print('ready', flush=True); sys.stdin.read()"}
	for _, args := range [][]string{append([]string{"trace", "-q", "--"}, app...), {"build", "-o", "app.dlimg"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env, cmd.Stdin = dir, env, strings.NewReader("")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	stage := filepath.Join(benchStageParent(b), "stage")
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) {
			for b.Loop() {
				rss, pss := runRanks(b, n, bin, env, append([]string{"exec", "--stage-dir", stage, filepath.Join(dir, "app.dlimg"), "--"}, app...), stage)
				b.ReportMetric(float64(rss)/float64(n), "stage-RSS-KiB/rank")
				b.ReportMetric(float64(pss)/float64(n), "stage-PSS-KiB/rank")
			}
		})
	}
}

// runRanks starts n copies of the command, waits until each is ready, and
// sums Rss and Pss of their mappings of files under stage.
func runRanks(b *testing.B, n int, bin string, env, args []string, stage string) (rss, pss int64) {
	var cmds []*exec.Cmd
	var stdins []io.Closer
	defer func() {
		for _, c := range stdins {
			c.Close()
		}
		for _, c := range cmds {
			c.Wait()
		}
	}()
	for range n {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		cmds, stdins = append(cmds, cmd), append(stdins, in)
		line := make([]byte, 6)
		if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
			b.Fatalf("rank did not start: %q %v", line, err)
		}
	}
	for _, c := range cmds {
		r, p := stageMemory(b, c.Process.Pid, stage)
		rss, pss = rss+r, pss+p
	}
	return rss, pss
}

// stageMemory sums Rss and Pss (KiB) of pid's mappings of files under stage.
func stageMemory(b *testing.B, pid int, stage string) (rss, pss int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		b.Fatal(err)
	}
	inStage := false
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-"):
			inStage = len(f) >= 6 && strings.HasPrefix(f[5], stage+"/")
		case inStage && len(f) == 3 && f[0] == "Rss:":
			v, _ := strconv.ParseInt(f[1], 10, 64)
			rss += v
		case inStage && len(f) == 3 && f[0] == "Pss:":
			v, _ := strconv.ParseInt(f[1], 10, 64)
			pss += v
		}
	}
	if rss == 0 {
		b.Fatalf("pid %d maps nothing from the stage %s", pid, stage)
	}
	return rss, pss
}

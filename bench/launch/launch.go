package launch

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dlbundle/dlbundle/examples/loadtest"
	"github.com/dlbundle/dlbundle/internal/cluster"
	"github.com/dlbundle/dlbundle/internal/slowfs"
)

// Modes, in the order they are measured.
const (
	ModeNative  = "native"
	ModeExec    = "dlbundle"
	ModeSbcast  = "dlbundle+sbcast"
	projectNode = 1000
)

// Options say what to measure.
type Options struct {
	Nodes, Ranks int // fake nodes, ranks per node
	Runs         int // runs per mode (the median time is reported)
	Loadtest     loadtest.Config
	Costs        slowfs.Costs
	Dlbundle     string
	Log          io.Writer
}

// DefaultOptions is what `make bench-launch` measures.
func DefaultOptions() Options {
	return Options{Nodes: 3, Ranks: 4, Runs: 3, Loadtest: loadtest.Default(),
		Costs: slowfs.Costs{Metadata: 200 * time.Microsecond, ReadPerMiB: time.Millisecond}, Log: os.Stderr}
}

// Row is one mode's result (the median run; ops and bytes are the same in
// every run of a mode).
type Row struct {
	Mode                     string
	MetaOps                  uint64        // metadata operations on the shared file system per job
	Bytes                    uint64        // bytes read from it per job
	Time                     time.Duration // the job step, first rank started to last rank ended (median)
	OpsPerNode, BytesPerNode float64
	FixedOps, FixedBytes     uint64 // per job, independent of the node count (sbcast's one read)
}

// Results are the rows and what they were measured on.
type Results struct {
	Opts       Options
	ImageBytes int64
	AppFiles   int
	Rows       []Row
	Date       string
	Machine    string
}

// Run builds the app on the shared file system, bundles it, starts the
// cluster and measures every mode.
func Run(ctx context.Context, o Options) (*Results, error) {
	var fsys *slowfs.FS
	c, err := cluster.Start(cluster.Options{Nodes: o.Nodes, MountShared: func(src, mnt string) (func() error, error) {
		f, err := slowfs.Mount(src, mnt, slowfs.Costs{})
		fsys = f
		if err != nil {
			return nil, err
		}
		return f.Unmount, nil
	}})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	res := &Results{Opts: o, Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Machine: machine()}
	logf := func(f string, a ...any) { fmt.Fprintf(o.Log, "bench-launch: "+f+"\n", a...) }

	appDir := filepath.Join(c.Shared, "app")
	cfg := o.Loadtest
	cfg.OutputDir = appDir
	logf("building the loadtest app (%d libraries) on the shared file system", cfg.Libs)
	if _, err := loadtest.Build(ctx, cfg); err != nil {
		return nil, err
	}
	app := filepath.Join(appDir, "app")
	res.AppFiles = countFiles(appDir)
	img := filepath.Join(c.Shared, "app.dlimg")
	tr := filepath.Join(c.Dir, "app.trace")
	for _, argv := range [][]string{
		{o.Dlbundle, "trace", "-q", "-o", tr, "--", app},
		{o.Dlbundle, "build", "--include", c.Shared, "-o", img, tr},
	} {
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	st, err := os.Stat(img)
	if err != nil {
		return nil, err
	}
	res.ImageBytes = st.Size()
	fsys.SetCosts(o.Costs)

	scripts := map[string]string{
		ModeNative: fmt.Sprintf("srun %s", app),
		ModeExec:   fmt.Sprintf("srun %s exec --stage-dir /dev/shm/bench-$SLURM_JOB_ID %s -- %s", o.Dlbundle, img, app),
		ModeSbcast: fmt.Sprintf(`sbcast --force %[2]s /tmp/app-$SLURM_JOB_ID.dlimg
srun --ntasks=$SLURM_JOB_NUM_NODES --ntasks-per-node=1 %[1]s stage -q --consume --stage-dir /dev/shm/bench-$SLURM_JOB_ID /tmp/app-$SLURM_JOB_ID.dlimg
srun %[1]s exec --stage-dir /dev/shm/bench-$SLURM_JOB_ID /tmp/app-$SLURM_JOB_ID.dlimg -- %[3]s`, o.Dlbundle, img, app),
	}
	for _, mode := range []string{ModeNative, ModeExec, ModeSbcast} {
		row := Row{Mode: mode}
		// One node, then all: what grows with the nodes and what a job pays once.
		var ops, bytes [2]uint64
		for i, nodes := range []int{1, o.Nodes} {
			var times []time.Duration
			for run := 0; run < o.Runs; run++ {
				fsys.Reset()
				d, out, err := job(ctx, c, scripts[mode], nodes, o.Ranks)
				if err != nil {
					return nil, fmt.Errorf("%s: %v\n%s", mode, err, out)
				}
				if n := strings.Count(out, "loadtest ok"); n != nodes*o.Ranks {
					return nil, fmt.Errorf("%s: %d of %d ranks reported success:\n%s", mode, n, nodes*o.Ranks, out)
				}
				s := fsys.Stats()
				ops[i], bytes[i] = s.MetadataOps(), s.BytesRead
				times = append(times, d)
				logf("%s, %d nodes x %d ranks, run %d: %v, %d metadata ops, %d bytes", mode, nodes, o.Ranks, run+1, d.Round(time.Millisecond), ops[i], bytes[i])
			}
			row.Time = median(times) // the last: all nodes
		}
		row.MetaOps, row.Bytes = ops[1], bytes[1]
		k := float64(o.Nodes - 1)
		row.OpsPerNode = max(0, (float64(ops[1])-float64(ops[0]))/k)
		row.FixedOps = uint64(max(0, float64(ops[0])-row.OpsPerNode))
		// Fake nodes share one kernel, so one node's reads can be served
		// from the page cache another node just filled: the byte counts
		// of K nodes undercount real nodes. A mode whose bytes grow with
		// the nodes is taken to read on every node what it reads on one.
		if bytes[1] > bytes[0] {
			row.BytesPerNode = float64(bytes[0])
		} else {
			row.FixedBytes = bytes[0]
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// job runs script as a batch job on every node with m tasks per node and
// returns the time between its first and last line (the steps alone, not
// sbatch's scheduling) and its output.
func job(ctx context.Context, c *cluster.Cluster, script string, nodes, m int) (time.Duration, string, error) {
	// Not in Shared: the job's script and output are not the app's traffic.
	dir, err := os.MkdirTemp(c.Dir, "job-")
	if err != nil {
		return 0, "", err
	}
	defer os.RemoveAll(dir)
	file, out := filepath.Join(dir, "job.sh"), filepath.Join(dir, "out")
	body := "#!/bin/bash\nset -e\necho t0=$(date +%s.%N)\n" + script + "\necho t1=$(date +%s.%N)\n"
	if err := os.WriteFile(file, []byte(body), 0o755); err != nil {
		return 0, "", err
	}
	cmd := c.Command("sbatch", "--parsable", "-o", out, "-N", strconv.Itoa(nodes), "--ntasks-per-node="+strconv.Itoa(m), file)
	id, err := cmd.Output()
	if err != nil {
		return 0, "", fmt.Errorf("sbatch: %v", err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		b, _ := os.ReadFile(out)
		text := string(b)
		if strings.Contains(text, "t1=") {
			t0, t1 := stamp(text, "t0="), stamp(text, "t1=")
			return time.Duration((t1 - t0) * float64(time.Second)), text, nil
		}
		state, _ := c.Command("squeue", "-h", "-t", "all", "-j", strings.TrimSpace(string(id)), "-o", "%T").Output()
		if s := strings.TrimSpace(string(state)); s == "FAILED" || s == "CANCELLED" || s == "TIMEOUT" {
			return 0, text, fmt.Errorf("job %s", s)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, text, fmt.Errorf("job did not finish")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func stamp(text, key string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, key); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// At returns the projected metadata operations and bytes of a job of n nodes.
func (row Row) At(n int) (ops, bytes float64) {
	return float64(row.FixedOps) + row.OpsPerNode*float64(n), float64(row.FixedBytes) + row.BytesPerNode*float64(n)
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

func countFiles(dir string) int {
	n := 0
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n++
		}
		return nil
	})
	return n
}

func machine() string {
	out, _ := exec.Command("uname", "-srm").Output()
	cpus := 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		cpus = strings.Count(string(b), "processor\t:")
	}
	return fmt.Sprintf("%s, %d CPUs", strings.TrimSpace(string(out)), cpus)
}

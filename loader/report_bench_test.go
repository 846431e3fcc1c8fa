package loader

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/dlbundle/dlbundle/internal/treeimage"
)

// BenchmarkReportPerProcess: what a process's report line costs, the price
// of the node's records that every exec leaves (docs/bench). The same
// process (/bin/cat of a bundled file and of a path the image lacks) runs
// under the shim without a report file and with one in /dev/shm (where
// exec's default stage dir keeps the records); the difference of the two
// is the cost per process.
//
//	go test -run '^$' -bench BenchmarkReportPerProcess -benchtime 400x -count 5 ./loader/
func BenchmarkReportPerProcess(b *testing.B) {
	root := b.TempDir()
	tree := filepath.Join(root, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "etc"), 0o755); err != nil {
		b.Fatal(err)
	}
	conf := filepath.Join(tree, "etc", "conf")
	if err := os.WriteFile(conf, []byte("x\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	// Beside the tree, before the image: listed in the root's listing,
	// not bundled; its open passes through and is reported.
	lacked := filepath.Join(root, "lacked.txt")
	if err := os.WriteFile(lacked, []byte("y\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	stage := stageEntries(b, root, treeimage.Entries(b, tree))
	// Where exec's default stage dir puts the records: /dev/shm when it
	// is there (a tmpfs), else the test's directory.
	recs, err := os.MkdirTemp("/dev/shm", "dlbundle-bench-records-")
	if err != nil {
		recs = filepath.Join(root, "records")
		if err := os.MkdirAll(recs, 0o700); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { os.RemoveAll(recs) })
	report := filepath.Join(recs, "run.report")
	envs := [2][]string{
		ShimEnv(stage, []string{"PATH=/usr/bin:/bin"}, EnvOptions{}),
		ShimEnv(stage, []string{"PATH=/usr/bin:/bin"}, EnvOptions{Report: report}),
	}
	// The two alternate, so that the load of a shared machine falls on
	// both alike; the medians are compared.
	var took [2][]time.Duration
	for i := 0; i < b.N; i++ {
		for k, env := range envs {
			cmd := exec.Command("/bin/cat", conf, lacked)
			cmd.Env = env
			start := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			took[k] = append(took[k], time.Since(start))
		}
	}
	if st, err := os.Stat(report); err != nil || st.Size() == 0 {
		b.Fatalf("no report written: %v", err)
	}
	median := func(d []time.Duration) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[len(d)/2].Nanoseconds())
	}
	without, with := median(took[0]), median(took[1])
	b.ReportMetric(without, "ns/process-without")
	b.ReportMetric(with, "ns/process-with-report")
	b.ReportMetric(with-without, "ns/report")
}

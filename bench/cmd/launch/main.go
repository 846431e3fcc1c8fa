// Command launch runs the benchmark at width through a real launcher (see
// bench/launch) and writes docs/bench/launch.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/dlbundle/dlbundle/bench/launch"
)

func main() {
	o := launch.DefaultOptions()
	out := flag.String("out", "docs/bench", "directory for launch.md")
	flag.StringVar(&o.Dlbundle, "dlbundle", "bin/dlbundle", "the dlbundle binary")
	flag.IntVar(&o.Nodes, "nodes", o.Nodes, "fake nodes")
	flag.IntVar(&o.Ranks, "ranks", o.Ranks, "ranks per node")
	flag.IntVar(&o.Runs, "runs", o.Runs, "runs per mode")
	flag.Parse()
	abs, err := filepath.Abs(o.Dlbundle)
	if err != nil {
		fail(err)
	}
	o.Dlbundle = abs
	res, err := launch.Run(context.Background(), o)
	if err != nil {
		fail(err)
	}
	// Everything from the "## Flux" section on (Flux's broadcast, the Slurm
	// plugin's --dlbundle-bcast) comes from launcher tests (launchers/flux,
	// internal/cluster), not from this run: it is kept as it was.
	path := filepath.Join(*out, "launch.md")
	var flux string
	if old, err := os.ReadFile(path); err == nil {
		if i := strings.Index(string(old), "\n## Flux\n"); i >= 0 {
			flux = string(old[i:])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		fail(err)
	}
	res.Markdown(f)
	io.WriteString(f, flux)
	if err := f.Close(); err != nil {
		fail(err)
	}
	res.Markdown(os.Stdout)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-launch:", err)
	os.Exit(1)
}

// Command demo is `make demo`: a quick run of the start-up benchmark
// (bench/startup) that shows what dlbundle is for. It serves a C app and
// Python from slowfs, a contended shared file system, starts 1 and 16 ranks
// at the same instant natively and through dlbundle exec, and ends with one
// screen: metadata operations per rank, start-up of the last rank, the
// speed-up and the projection to 1,000 nodes; it writes summary.txt,
// demo.svg and results.csv to --out. Needs root (FUSE mount).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/dlbundle/dlbundle/bench/startup"
)

type cli struct {
	Out       string   `default:"bin/demo" placeholder:"DIR" help:"Where to write summary.txt, demo.svg and results.csv."`
	Dlbundle  string   `default:"bin/dlbundle" placeholder:"PATH" help:"dlbundle binary."`
	Scenarios []string `default:"${scenarios}" help:"Apps: loadtest (C, many shared libraries), python (stdlib imports), numpy."`
	Ranks     []int    `default:"${ranks}" help:"Numbers of ranks started at the same instant."`
	ShmDir    string   `default:"/dev/shm" placeholder:"DIR" help:"tmpfs for the ideal copies and the stage dirs."`
	WorkDir   string   `placeholder:"DIR" help:"Scratch for the shared tree and the mount (default: the system temp dir)."`
}

func main() {
	startup.MaybeRunGate() // ranks start as this binary behind a gate
	def := startup.DemoOptions()
	var c cli
	kong.Parse(&c, kong.Description("What dlbundle is for: start-up at width, native vs dlbundle exec, on a contended shared file system (slowfs)."),
		kong.Vars{"scenarios": join(def.Scenarios), "ranks": join(def.Ranks)})
	if err := run(c, def); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(c cli, opts startup.Options) error {
	dlb, err := filepath.Abs(c.Dlbundle)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dlb); err != nil {
		return fmt.Errorf("dlbundle binary %s: %w (run make first)", dlb, err)
	}
	opts.Dlbundle, opts.Scenarios, opts.Ranks, opts.ShmDir, opts.WorkDir = dlb, c.Scenarios, c.Ranks, c.ShmDir, c.WorkDir
	fmt.Printf("== dlbundle demo: building %v, then starting %v ranks of each on slowfs, natively and through\n"+
		"   dlbundle exec (trace once, build one image, exec); about a minute. Progress:\n", opts.Scenarios, opts.Ranks)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	if _, err := startup.Demo(ctx, opts, c.Out, os.Stdout); err != nil {
		return err
	}
	fmt.Printf("(measured in %v; all figures: %s)\n", time.Since(start).Round(time.Second), filepath.Join(c.Out, startup.DemoCSV))
	return nil
}

func join[T any](xs []T) string {
	s := ""
	for i, x := range xs {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprint(x)
	}
	return s
}

// Command startup is the start-up-at-width benchmark: it serves app
// trees from slowfs, a contended shared file system, starts 1..64 ranks at the
// same instant natively, from tmpfs (ideal) and through dlbundle exec, and
// writes results.csv, startup.svg and startup.md. Needs root (FUSE mount).
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
	"github.com/dlbundle/dlbundle/examples/loadtest"
)

type cli struct {
	Out        string        `default:"docs/bench" placeholder:"DIR" help:"Where to write results.csv, startup.svg and startup.md."`
	Scenarios  []string      `default:"loadtest,python,numpy,spack" help:"Scenarios to run: loadtest (C, many shared libraries), python (stdlib imports), numpy, spack (100 prefixes with absolute RUNPATHs)."`
	Ranks      []int         `default:"1,4,16,64" help:"Numbers of ranks started at the same instant."`
	Service    time.Duration `help:"Metadata service time of slowfs (e.g. 200us). Default: calibrated per scenario so that native start-up of one rank is --slowdown times the ideal."`
	Slowdown   float64       `default:"5" help:"Calibration target: native / ideal start-up of one rank."`
	MinService time.Duration `default:"5us" help:"Floor of the calibrated service time (the FUSE round trip alone may already exceed the target)."`
	ReadPerMib time.Duration `name:"read-per-mib" default:"1ms" help:"Cost of one MiB of file data on the shared data path."`
	Dlbundle   string        `default:"bin/dlbundle" placeholder:"PATH" help:"dlbundle binary for the dlbundle-cold/-warm modes; empty to skip them."`
	Libs       int           `default:"${libs}" help:"loadtest: shared libraries."`
	DataKib    int           `name:"data-kib" default:"${datakib}" help:"loadtest: read-only data per library, KiB."`
	Imports    string        `placeholder:"MODULES" help:"python: modules to import (default: a stdlib set, see bench/startup)."`
	WorkDir    string        `placeholder:"DIR" help:"Scratch for the shared tree and the mount (default: the system temp dir)."`
	ShmDir     string        `default:"/dev/shm" placeholder:"DIR" help:"tmpfs for the ideal copies and the stage dirs."`
}

func main() {
	startup.MaybeRunGate() // ranks start as this binary behind a gate
	def := loadtest.Default()
	var c cli
	kong.Parse(&c, kong.Description(`Start-up at width: native vs ideal vs dlbundle exec on a contended shared file system.

Builds each scenario's app tree inside the source directory of slowfs (a FUSE
file system whose metadata operations queue on one server), then for every
rank count starts that many ranks at the same instant in five modes: native
(from the mount), ideal (a tmpfs copy), dlbundle-cold (dlbundle exec, empty
stage dir), dlbundle-warm (stage reused) and dlbundle-env (stage reused, no
launcher: the variables dlbundle env gives, as the Slurm and Flux plugins). Writes results.csv, startup.svg
and startup.md to --out. Needs root, or fusermount3 (package fuse3).

    startup                                     # what make bench-startup runs
    startup --ranks 1,4 --scenarios python      # a quick look
    startup --service 200us --dlbundle ''       # fixed service time, no dlbundle`),
		kong.Vars{"libs": fmt.Sprint(def.Libs), "datakib": fmt.Sprint(def.DataKiB)})
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "startup:", err)
		os.Exit(1)
	}
}

func run(c cli) error {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "startup: not root; mounting slowfs will need fusermount3 (package fuse3)")
	}
	opts := startup.DefaultOptions()
	opts.Scenarios, opts.Ranks, opts.Service, opts.Slowdown = c.Scenarios, c.Ranks, c.Service, c.Slowdown
	opts.MinService = c.MinService
	opts.ReadPerMiB, opts.PythonImports, opts.WorkDir, opts.ShmDir = c.ReadPerMib, c.Imports, c.WorkDir, c.ShmDir
	opts.Loadtest.Libs, opts.Loadtest.DataKiB = c.Libs, c.DataKib
	if c.Dlbundle != "" {
		abs, err := filepath.Abs(c.Dlbundle)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("dlbundle binary %s: %w (run make first, or pass --dlbundle '' to skip the dlbundle modes)", abs, err)
		}
		opts.Dlbundle = abs
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	res, err := startup.Run(ctx, opts)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(c.Out, "results.csv"), func(f *os.File) error { return res.WriteCSV(f) }); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(c.Out, "startup.svg"), func(f *os.File) error { return res.WriteSVG(f) }); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(c.Out, "startup.md"), func(f *os.File) error { res.WriteMarkdown(f, "startup.svg"); return nil }); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "startup: wrote %s/{results.csv,startup.svg,startup.md} in %v\n", c.Out, time.Since(start).Round(time.Second))
	return nil
}

func writeFile(path string, fill func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fill(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/dlbundle/dlbundle/loader"
)

// ReportCmd summarises DLBUNDLE_REPORT files.
type ReportCmd struct {
	Files []string `arg:"" name:"file" type:"existingfile" help:"Report file(s) written by 'dlbundle exec --report FILE' (or DLBUNDLE_REPORT=FILE): one JSON line per process."`
	All   bool     `help:"List every path and library in each category (default: the 30 most taken)."`
	JSON  bool     `name:"json" help:"Print the summary as JSON instead of text."`
}

// Help explains what the report shows.
func (c *ReportCmd) Help() string {
	return `Every process that runs under 'dlbundle exec' with a report file appends one line at
exit (or when killed by SIGTERM, or on abort()): how many lookups the shim answered from
the stage, answered as known missing, and passed through to the file system, with the
passed-through paths and the libraries ld.so loaded from outside the image. This verb
totals them and lists, most-taken first, node-local paths by policy (apart, nothing to
do), the libraries from outside the image, and the paths the image lacked (the app took
a path the pilot run did not see), so you can decide whether to re-trace and rebuild.

  srun dlbundle exec --report /scratch/run1.report app.dlimg -- ./myapp
  dlbundle report /scratch/run1.report`
}

// Run reads the files and prints the summary.
func (c *ReportCmd) Run() error {
	var all []loader.ProcessReport
	bad := 0
	for _, name := range c.Files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		rs, b, err := loader.ReadReports(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("read report %s: %w", name, err)
		}
		all = append(all, rs...)
		bad += b
	}
	if bad > 0 {
		fmt.Fprintf(os.Stderr, "dlbundle report: skipped %d lines that are not process reports\n", bad)
	}
	if len(all) == 0 {
		return fmt.Errorf("no process reports in %v; was the app run with 'dlbundle exec --report FILE'?", c.Files)
	}
	s := loader.Summarize(all)
	if c.JSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	limit := 30
	if c.All {
		limit = 0
	}
	return s.WriteText(os.Stdout, limit)
}

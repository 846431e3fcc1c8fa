package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/loader"
	"github.com/dlbundle/dlbundle/squash"
)

// ReportCmd summarises DLBUNDLE_REPORT files.
type ReportCmd struct {
	Files []string `arg:"" name:"file" type:"existingfile" help:"Report file(s) written by 'dlbundle exec --report FILE' (or DLBUNDLE_REPORT=FILE): one JSON line per process."`
	All   bool     `help:"List every path and library in each category (default: the 30 most taken)."`
	JSON  bool     `name:"json" help:"Print the summary as JSON instead of text."`
	Image string   `placeholder:"IMAGE" type:"existingfile" help:"The image the app ran from: the --include/--exclude it was built with decide which paths build left out by policy (default: build's default rules)."`

	out io.Writer // where the summary goes; nil means stdout (tests)
}

// Help explains what the report shows.
func (c *ReportCmd) Help() string {
	return `Every process that runs under 'dlbundle exec' with a report file appends one line at
exit (or when killed by SIGTERM, or on abort()): how many lookups the shim answered from
the stage, answered as known missing, and passed through to the file system, with the
passed-through paths and the libraries ld.so loaded from outside the image. This verb
totals them and lists, most-taken first, node-local paths by policy (apart, nothing to
do), paths in temporary or runtime directories (/tmp, /var/tmp, /run: build leaves them
out unless --include names them; re-tracing cannot help), the libraries from outside the
image, and the paths the image lacked (the app took a path the pilot run did not see), so
you can decide whether to re-trace or rebuild. The count before each path is the number of
processes that took it.

  srun dlbundle exec --report /scratch/run1.report app.dlimg -- ./myapp
  dlbundle report /scratch/run1.report
  dlbundle report --image app.dlimg /scratch/run1.report   # built with --include /tmp/...

Give --image when the image was built with --include or --exclude: paths under an
--include'd /tmp prefix are then lacked (re-trace), not left out by policy.`
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
	rules, err := c.rules()
	if err != nil {
		return err
	}
	s := loader.SummarizeWithRules(all, rules)
	out := c.out
	if out == nil {
		out = os.Stdout
	}
	if c.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	limit := 30
	if c.All {
		limit = 0
	}
	return s.WriteText(out, limit)
}

// rules are the build rules of --image, else build's defaults.
func (c *ReportCmd) rules() (*squash.Rules, error) {
	if c.Image == "" {
		return squash.NewRules(nil, nil)
	}
	im, err := image.OpenFile(c.Image)
	if err != nil {
		return nil, err
	}
	defer im.Close()
	rules, err := squash.RulesOfBuild(im.BuildInfo())
	if err != nil {
		return nil, fmt.Errorf("image %s records build rules this dlbundle cannot use: %v", c.Image, err)
	}
	return rules, nil
}

package main

import (
	"bufio"
	"fmt"
	"os"
	"time"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/internal/outfile"
	"github.com/dlbundle/dlbundle/internal/version"
	"github.com/dlbundle/dlbundle/report"
	"github.com/dlbundle/dlbundle/squash"
	"github.com/dlbundle/dlbundle/view"
)

// writePage draws the load-sequence page (package view) of traces, an image
// (nil: none) and report files into out, written beside it under a
// temporary name and renamed, so that a page open in a browser is replaced
// only by a complete one (package outfile).
func writePage(out string, traceFiles []string, imageName string, im *image.Image, reportFiles []string, untraced ...time.Duration) error {
	in := view.Input{TraceNames: traceFiles, Image: im, ImageName: imageName, ReportNames: reportFiles, Version: version.Version}
	if len(untraced) > 0 {
		in.Untraced = untraced[0]
	}
	if len(traceFiles) > 0 {
		traces, err := squash.Load(traceFiles)
		if err != nil {
			return err
		}
		in.Traces = traces
	}
	for _, name := range reportFiles {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		rs, _, err := report.ReadReports(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("read report %s: %w", name, err)
		}
		if len(rs) == 0 {
			return fmt.Errorf("%s holds no process reports; give the file 'dlbundle exec --report FILE' wrote", name)
		}
		in.Reports = append(in.Reports, rs...)
	}
	// A page draws the same lookups, argv and paths as its traces: private
	// (0600 less the umask), like them; a device or FIFO is written to,
	// never replaced (package outfile).
	f, err := outfile.Create(out, "page", "--html")
	if err != nil {
		return err
	}
	defer f.Discard()
	bw := bufio.NewWriter(f)
	err = view.Write(bw, in)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := f.Commit(outfile.Private()); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s: open it in a browser\n", out)
	return nil
}

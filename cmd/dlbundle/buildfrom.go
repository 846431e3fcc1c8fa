package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/report"
	"github.com/dlbundle/dlbundle/squash"
	"github.com/dlbundle/dlbundle/trace"
)

// inputKind is what a file given to build (or report) holds.
type inputKind int

const (
	inputTrace  inputKind = iota // a pilot's trace (dlbundle trace)
	inputReport                  // process reports (dlbundle exec --report, or a node's records)
	inputImage                   // an image (its place is --from)
)

// sniffInput tells a trace from a report by its first record: a trace
// starts with {"rec":"header","format":"dlbundle-trace",...}, a report
// line is a process's {"pid":N,...}. Anything else is named in the error.
func sniffInput(name string) (inputKind, error) {
	f, err := os.Open(name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("%s does not exist: give the traces `dlbundle trace` wrote or the reports of `dlbundle exec --report`", name)
		}
		return 0, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		if ok, _ := hasImageFooter(name, st.Size()); ok {
			return inputImage, nil
		}
	}
	r := bufio.NewReaderSize(f, 64<<10)
	var line []byte
	for len(bytes.TrimSpace(line)) == 0 {
		line, err = r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) == 0 && err != nil {
			return 0, fmt.Errorf("%s is empty: not a dlbundle trace nor a process report", name)
		}
	}
	var probe struct {
		Rec    string `json:"rec"`
		Format string `json:"format"`
		PID    int    `json:"pid"`
	}
	if json.Unmarshal(bytes.TrimSpace(line), &probe) != nil {
		return 0, fmt.Errorf("%s: not a dlbundle trace nor a process report (its first line is not JSON): give the traces `dlbundle trace` wrote or the reports of `dlbundle exec --report`", name)
	}
	switch {
	case probe.Rec == "header" && probe.Format == trace.FormatName:
		return inputTrace, nil
	case probe.Rec == "" && probe.PID > 0:
		return inputReport, nil
	case probe.Rec != "":
		return 0, fmt.Errorf("%s: not a dlbundle trace nor a process report (its first record is %q of format %q)", name, probe.Rec, probe.Format)
	}
	return 0, fmt.Errorf("%s: not a dlbundle trace nor a process report (its first line is JSON of another kind)", name)
}

// buildInputs are what a build reads, by kind.
type buildInputs struct {
	traces  []string
	reports []string
	image   *image.Image // --from, or nil
	from    string
}

// all is every input file, for the owner check and the summary.
func (in *buildInputs) all() []string {
	out := append(append([]string(nil), in.traces...), in.reports...)
	if in.from != "" {
		out = append(out, in.from)
	}
	return out
}

// phrase names the inputs in the summary: "2 trace(s)", "image app.dlimg
// and 3 report file(s)".
func (in *buildInputs) phrase() string {
	var parts []string
	if in.image != nil {
		parts = append(parts, "image "+in.from)
	}
	if len(in.traces) > 0 || (in.image == nil && len(in.reports) == 0) {
		parts = append(parts, fmt.Sprintf("%d trace(s)", len(in.traces)))
	}
	if len(in.reports) > 0 {
		parts = append(parts, fmt.Sprintf("%d report file(s)", len(in.reports)))
	}
	return strings.Join(parts, " and ")
}

// sortInputs sorts the positional arguments into traces and reports, and
// opens --from.
func (c *BuildCmd) sortInputs() (*buildInputs, error) {
	in := &buildInputs{from: c.From}
	for _, p := range c.Traces {
		k, err := sniffInput(p)
		if err != nil {
			return nil, err
		}
		switch k {
		case inputTrace:
			in.traces = append(in.traces, p)
		case inputReport:
			in.reports = append(in.reports, p)
		case inputImage:
			return nil, fmt.Errorf("%s is an image: give it with --from %s to fold its entries in", p, p)
		}
	}
	if c.From != "" {
		im, err := image.OpenFile(c.From)
		if err != nil {
			return nil, fmt.Errorf("--from %s: %w", c.From, err)
		}
		in.image = im
	}
	if len(in.reports) > 0 && in.image == nil && len(in.traces) == 0 {
		return nil, fmt.Errorf("reports say what a run lacked from an image: name that image, e.g. dlbundle build -o app.dlimg --from app.dlimg %s", in.reports[0])
	}
	return in, nil
}

// load reads the inputs as traces (squash.FromImage, squash.FromLacks for
// the made-up ones) and fills the options that depend on them: the image's
// pilots and build rules, and the time after which a path only reports name
// is an output of the run.
func (in *buildInputs) load(opts *squash.Options) ([]*trace.Trace, error) {
	traces, err := squash.Load(in.traces)
	if err != nil {
		return nil, err
	}
	var since time.Time
	for _, t := range traces {
		if s, err := time.Parse(time.RFC3339Nano, t.Header.Start); err == nil && s.After(since) {
			since = s
		}
	}
	var events int64
	for _, t := range traces {
		for _, e := range t.Events {
			events = max(events, e.T)
		}
	}
	if in.image != nil {
		st, err := os.Stat(in.from)
		if err != nil {
			return nil, err
		}
		if st.ModTime().After(since) {
			since = st.ModTime()
		}
		opts.Pilots = append(opts.Pilots, in.image.Pilots()...)
		info := in.image.BuildInfo()
		opts.Include = append(splitRules(info["include"]), opts.Include...)
		opts.Exclude = append(splitRules(info["exclude"]), opts.Exclude...)
		entries := in.image.Entries()
		traces = append(traces, squash.FromImage(entries, in.from))
		events = max(events, int64(len(entries)))
	}
	if len(in.reports) > 0 {
		var all []report.ProcessReport
		for _, name := range in.reports {
			rs, err := readReportFile(name)
			if err != nil {
				return nil, err
			}
			all = append(all, rs...)
		}
		traces = append(traces, squash.FromLacks(squash.Closure(report.Lacks(all)), in.reports[0], events+1))
		if !since.IsZero() && !opts.AllowChanged {
			opts.Since = since.UnixNano()
		}
	}
	return traces, nil
}

// splitRules splits build information's ':'-joined prefixes.
func splitRules(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ":") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// readReportFile reads one file of process reports, refusing one that holds
// none.
func readReportFile(name string) ([]report.ProcessReport, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rs, bad, err := report.ReadReports(f)
	if err != nil {
		return nil, fmt.Errorf("read report %s: %w", name, err)
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("%s holds no process reports (%d other lines)", name, bad)
	}
	return rs, nil
}

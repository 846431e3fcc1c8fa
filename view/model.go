package view

import (
	"encoding/json"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/dlbundle/dlbundle/image"
	"github.com/dlbundle/dlbundle/report"
	"github.com/dlbundle/dlbundle/squash"
	"github.com/dlbundle/dlbundle/trace"
)

// Input is what a page is drawn from; every part is optional, but a page
// needs a trace or an image.
type Input struct {
	Traces     []*trace.Trace
	TraceNames []string // file names, in the order of Traces
	Image      *image.Image
	ImageName  string
	Reports    []report.ProcessReport
	// ReportNames are the report files the reports were read from.
	ReportNames []string
	Version     string // dlbundle version, for the footer
	// Untraced is the app's start-up measured without a tracer (e.g. with
	// time(1)); 0: estimated from the pilot, ptrace's share taken out.
	Untraced time.Duration
	// Model is the model of start-up at width (nil: DefaultModel).
	Model *StartupModel
}

// Figures is everything the page shows, computed from an Input.
type Figures struct {
	Command string // the pilot's command line
	Runs    int    // pilot runs (traces)

	// From the traces.
	Events   int   // event records
	Lookups  int   // lookups (open for reading, stat, access, readlink, exec, listdir)
	Failed   int   // lookups that failed (ENOENT probes, mostly)
	Files    int   // distinct regular files opened for reading
	Bytes    int64 // their sizes at first open
	Duration int64 // ns: the longest trace (end record, else last event)
	Bins     []Bin
	BigFiles []FileOpen // the largest files opened, by size
	Dirs     []DirLane  // directories by lookups, in order of first use
	// OtherDirs sums the directories not in Dirs.
	OtherDirs DirLane

	// From the image.
	ImageSize   int64
	ImageDigest string
	Objects     int   // regular files
	RawBytes    int64 // their content
	StoredBytes int64 // their compressed frames, shared content once
	Prefixes    []Prefix
	Kinds       []string // kinds present, largest first (legend order)

	// What exec saves per pilot run (from the traces, and the image).
	Savings *Savings

	// From the reports.
	Report *report.Summary

	// Start-up per rank in seconds, measured and modelled (nil without a trace).
	Seconds *Seconds
}

// Bin is one slice of the pilot's run time.
type Bin struct {
	Start, End int64 // ns since the start of the run
	Found      int
	Failed     int
	Bytes      int64 // sizes of files first opened in this bin
}

// FileOpen is a regular file the pilot opened for reading, first time.
type FileOpen struct {
	T    int64 // ns since start
	Path string
	Size int64
	Kind string // from the image, when it holds the file
}

// DirLane is the lookups in one directory over time.
type DirLane struct {
	Dir        string
	Dirs       int // directories summed (OtherDirs)
	Found      int
	Failed     int
	Bytes      int64
	First      int64 // ns of the first lookup
	BinFound   []int
	BinFailed  []int
	firstIndex int
}

// BinWidth is the time one bin spans.
func (f *Figures) BinWidth() int64 { return f.Duration / numBins }

// Lookups is found + failed.
func (d DirLane) Lookups() int { return d.Found + d.Failed }

// Prefix is a part of the image's tree with the bytes it holds.
type Prefix struct {
	Path    string // a directory, or "dir/*" for the files directly in dir
	Objects int
	Raw     int64
	Stored  int64
	ByKind  map[string]int64
	Others  int // prefixes summed into this one ("other")
}

// Savings compares lookups on the shared file system per run: natively
// (every traced lookup of a path build's rules would not keep on the node)
// and under exec (those the image's table cannot answer).
type Savings struct {
	SharedNative int     // per run, from the traces
	NodeLocal    int     // per run: /proc, /sys, /dev, /tmp, /etc, ...: on the node anyway
	SharedExec   int     // per run, estimated from the traces and the image's table of contents
	PerProcess   float64 // from the reports: lookups passed to the file system per process (all of them)
	Processes    int     // from the reports
	Unanswered   []PathCount
}

// PathCount is a path with a count.
type PathCount struct {
	Path  string
	Count int
}

// Chart sizes: bins of the time axis, directory lanes, image prefixes.
const (
	numBins     = 60
	numDirs     = 18
	numPrefixes = 16
	numBigFiles = 8
)

// isLookup tells whether an event asks the file system for a path without
// changing it: the metadata operations start-up is made of.
func isLookup(ev *trace.Event) bool {
	if ev.Path == "" || ev.Writes() {
		return false
	}
	switch ev.Op {
	case trace.OpOpen, trace.OpStat, trace.OpAccess, trace.OpReadlink, trace.OpExec, trace.OpListdir:
		return true
	}
	return false
}

// laneOf is the directory a lookup searches: the parent of its path, or the
// directory itself for a listing.
func laneOf(ev *trace.Event) string {
	if ev.Op == trace.OpListdir {
		return ev.Path
	}
	return path.Dir(ev.Path)
}

// Compute reduces in to the page's figures.
func Compute(in Input) (*Figures, error) {
	f := &Figures{Runs: len(in.Traces)}
	if len(in.Traces) > 0 {
		f.Command = strings.Join(in.Traces[0].Header.Command, " ")
	}
	rules, err := rulesOf(in.Image)
	if err != nil {
		return nil, err
	}
	f.traceFigures(in.Traces, in.Image)
	if in.Image != nil {
		f.imageFigures(in.Image)
		if f.Command == "" {
			f.Command = pilotCommand(in.Image)
		}
	}
	if len(in.Traces) > 0 {
		f.Savings = savings(in.Traces, in.Image, rules)
	}
	if len(in.Reports) > 0 {
		s := report.SummarizeWithRules(in.Reports, rules)
		f.Report = &s
		if f.Savings == nil {
			f.Savings = &Savings{}
		}
		f.Savings.Processes = s.Processes
		f.Savings.PerProcess = float64(s.Passed) / float64(max(s.Processes, 1))
	}
	model := DefaultModel
	if in.Model != nil {
		model = *in.Model
	}
	var size int64
	if in.Image != nil {
		size = in.Image.Size()
	}
	f.Seconds = f.seconds(model, in.Untraced, size)
	return f, nil
}

// rulesOf are the rules the image was built with, or build's defaults.
func rulesOf(im *image.Image) (*squash.Rules, error) {
	if im == nil {
		return squash.NewRules(nil, nil)
	}
	return squash.RulesOfBuild(im.BuildInfo())
}

func (f *Figures) traceFigures(traces []*trace.Trace, im *image.Image) {
	for _, t := range traces {
		d := int64(0)
		if t.End != nil {
			d = t.End.WallNS
		}
		for i := range t.Events {
			d = max(d, t.Events[i].T)
		}
		f.Duration = max(f.Duration, d)
	}
	if f.Duration <= 0 {
		f.Duration = 1
	}
	f.Bins = make([]Bin, numBins)
	for i := range f.Bins {
		f.Bins[i].Start = f.Duration * int64(i) / numBins
		f.Bins[i].End = f.Duration * int64(i+1) / numBins
	}
	bin := func(t int64) int { return min(max(int(t*numBins/f.Duration), 0), numBins-1) }
	lanes := map[string]*DirLane{}
	var order []*DirLane
	var opens []FileOpen
	for _, t := range traces {
		opened := map[string]bool{} // first open per run
		for i := range t.Events {
			ev := &t.Events[i]
			f.Events++
			if !isLookup(ev) {
				continue
			}
			b := bin(ev.T)
			dir := laneOf(ev)
			l := lanes[dir]
			if l == nil {
				l = &DirLane{Dir: dir, First: ev.T, BinFound: make([]int, numBins), BinFailed: make([]int, numBins), firstIndex: len(order)}
				lanes[dir] = l
				order = append(order, l)
			}
			l.First = min(l.First, ev.T)
			f.Lookups++
			if ev.Err != "" {
				f.Failed++
				f.Bins[b].Failed++
				l.Failed++
				l.BinFailed[b]++
				continue
			}
			f.Bins[b].Found++
			l.Found++
			l.BinFound[b]++
			if ev.Op == trace.OpOpen && !ev.Dir && ev.Size != nil && !opened[ev.Path] {
				opened[ev.Path] = true
				f.Files++
				f.Bytes += *ev.Size
				f.Bins[b].Bytes += *ev.Size
				l.Bytes += *ev.Size
				opens = append(opens, FileOpen{T: ev.T, Path: ev.Path, Size: *ev.Size})
			}
		}
	}
	// The directories with the most lookups get a lane each, shown in the
	// order the app first searched them; the rest are summed in one.
	top := append([]*DirLane(nil), order...)
	sort.SliceStable(top, func(i, j int) bool { return top[i].Lookups() > top[j].Lookups() })
	if len(top) > numDirs {
		rest := top[numDirs:]
		top = top[:numDirs]
		o := DirLane{Dir: "other directories", BinFound: make([]int, numBins), BinFailed: make([]int, numBins), First: f.Duration}
		for _, l := range rest {
			o.Dirs++
			o.Found += l.Found
			o.Failed += l.Failed
			o.Bytes += l.Bytes
			o.First = min(o.First, l.First)
			for b := range l.BinFound {
				o.BinFound[b] += l.BinFound[b]
				o.BinFailed[b] += l.BinFailed[b]
			}
		}
		f.OtherDirs = o
	}
	sort.SliceStable(top, func(i, j int) bool { return top[i].firstIndex < top[j].firstIndex })
	for _, l := range top {
		f.Dirs = append(f.Dirs, *l)
	}
	sort.SliceStable(opens, func(i, j int) bool { return opens[i].Size > opens[j].Size })
	if len(opens) > numBigFiles {
		opens = opens[:numBigFiles]
	}
	for i := range opens {
		if im != nil {
			if e, ok := im.Lookup(opens[i].Path); ok {
				opens[i].Kind = string(e.Kind)
			}
		}
	}
	sort.SliceStable(opens, func(i, j int) bool { return opens[i].T < opens[j].T })
	f.BigFiles = opens
}

// pilotCommand is the command of the image's first pilot, for a page drawn
// without traces.
func pilotCommand(im *image.Image) string {
	for _, raw := range im.Pilots() {
		var h trace.Header
		if err := json.Unmarshal(raw, &h); err == nil && len(h.Command) > 0 {
			return strings.Join(h.Command, " ")
		}
	}
	return ""
}

// dirNode is a directory of the image's tree with the regular files below it.
type dirNode struct {
	path     string
	children map[string]*dirNode
	own      Prefix // files directly in this directory
	total    Prefix // everything below
}

func newDirNode(p string) *dirNode {
	return &dirNode{path: p, children: map[string]*dirNode{},
		own: Prefix{Path: path.Join(p, "*"), ByKind: map[string]int64{}}, total: Prefix{Path: p, ByKind: map[string]int64{}}}
}

func (p *Prefix) add(kind string, raw, stored int64) {
	p.Objects++
	p.Raw += raw
	p.Stored += stored
	p.ByKind[kind] += raw
}

func (p *Prefix) merge(q Prefix) {
	p.Objects += q.Objects
	p.Raw += q.Raw
	p.Stored += q.Stored
	for k, v := range q.ByKind {
		p.ByKind[k] += v
	}
}

func (f *Figures) imageFigures(im *image.Image) {
	f.ImageSize, f.ImageDigest = im.Size(), im.TOCDigest()
	root := newDirNode("/")
	stored := map[int64]bool{} // content shared by several paths is stored once
	kindBytes := map[string]int64{}
	es := im.Entries()
	for i := range es {
		e := &es[i]
		if e.Type != image.TypeRegular {
			continue
		}
		kind := string(e.Kind)
		if kind == "" {
			kind = "unknown"
		}
		var st int64
		if len(e.Frames) > 0 && !stored[e.Frames[0].Offset] {
			stored[e.Frames[0].Offset] = true
			for _, fr := range e.Frames {
				st += fr.CSize
			}
		}
		f.Objects++
		f.RawBytes += e.Size
		f.StoredBytes += st
		kindBytes[kind] += e.Size
		n := root
		n.total.add(kind, e.Size, st)
		dir := path.Dir(e.Path)
		for _, c := range strings.Split(strings.Trim(dir, "/"), "/") {
			if c == "" {
				continue
			}
			child := n.children[c]
			if child == nil {
				child = newDirNode(path.Join(n.path, c))
				n.children[c] = child
			}
			n = child
			n.total.add(kind, e.Size, st)
		}
		n.own.add(kind, e.Size, st)
	}
	for k := range kindBytes {
		f.Kinds = append(f.Kinds, k)
	}
	sort.Slice(f.Kinds, func(i, j int) bool {
		if kindBytes[f.Kinds[i]] != kindBytes[f.Kinds[j]] {
			return kindBytes[f.Kinds[i]] > kindBytes[f.Kinds[j]]
		}
		return f.Kinds[i] < f.Kinds[j]
	})
	if f.Objects > 0 {
		f.Prefixes = prefixes(root, numPrefixes)
	}
}

// prefixes cuts the tree into at most n parts that say where the bytes are:
// starting from the root, the largest part that has subdirectories is
// replaced by them (and by the files directly in it) until there are n;
// parts beyond n, the smallest, are summed into "other".
func prefixes(root *dirNode, n int) []Prefix {
	type part struct {
		node *dirNode // nil: the files directly in a directory (a leaf)
		p    Prefix
	}
	descend := func(d *dirNode) *dirNode { // through directories with one subdirectory and no files
		for len(d.children) == 1 && d.own.Objects == 0 {
			for _, c := range d.children {
				d = c
			}
		}
		return d
	}
	r := descend(root)
	parts := []part{{r, r.total}}
	for len(parts) < n {
		best := -1
		for i, p := range parts {
			if p.node != nil && len(p.node.children) > 0 && (best < 0 || p.p.Raw > parts[best].p.Raw) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		d := parts[best].node
		parts = append(parts[:best], parts[best+1:]...)
		if d.own.Objects > 0 {
			parts = append(parts, part{nil, d.own})
		}
		for _, c := range d.children {
			c = descend(c)
			parts = append(parts, part{c, c.total})
		}
	}
	out := make([]Prefix, len(parts))
	for i, p := range parts {
		out[i] = p.p
		if p.node != nil {
			out[i].Path = p.node.path
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Raw != out[j].Raw {
			return out[i].Raw > out[j].Raw
		}
		return out[i].Path < out[j].Path
	})
	if len(out) > n {
		other := Prefix{Path: "other", ByKind: map[string]int64{}}
		for _, p := range out[n-1:] {
			other.merge(p)
			other.Others++
		}
		out = append(out[:n-1], other)
	}
	return out
}

// savings counts, per pilot run, the lookups that reach the shared file
// system natively and those that still would under exec.
func savings(traces []*trace.Trace, im *image.Image, rules *squash.Rules) *Savings {
	s := &Savings{}
	var native, local, exec int
	unanswered := map[string]int{}
	for _, t := range traces {
		for i := range t.Events {
			ev := &t.Events[i]
			if !isLookup(ev) {
				continue
			}
			if v, _ := rules.Match(ev.Path); v != squash.Bundle {
				local++
				continue
			}
			native++
			if im == nil || !answers(im, ev.Path) {
				exec++
				unanswered[laneOf(ev)]++
			}
		}
	}
	runs := max(len(traces), 1)
	s.SharedNative, s.NodeLocal = native/runs, local/runs
	if im != nil {
		s.SharedExec = exec / runs
		for p, n := range unanswered {
			s.Unanswered = append(s.Unanswered, PathCount{p, n})
		}
		sort.Slice(s.Unanswered, func(i, j int) bool {
			if s.Unanswered[i].Count != s.Unanswered[j].Count {
				return s.Unanswered[i].Count > s.Unanswered[j].Count
			}
			return s.Unanswered[i].Path < s.Unanswered[j].Path
		})
		if len(s.Unanswered) > 10 {
			s.Unanswered = s.Unanswered[:10]
		}
	} else {
		s.SharedExec = -1 // not known without an image
	}
	return s
}

// answers tells whether the shim would answer a lookup of p from the
// image's table without the file system (docs/loader.md, "how the shim
// answers"), in outline: components are walked from the root, following
// the image's symlinks; an entry (other than external) answers, and so does
// a name absent from a directory the image lists completely (a known
// ENOENT) or below a bundled regular file (ENOTDIR). ld.so's own stats of
// search directories, which no hook sees, are not modelled.
func answers(im *image.Image, p string) bool {
	comps := strings.Split(strings.Trim(p, "/"), "/")
	cur := "/"
	for hops := 0; len(comps) > 0; {
		c := comps[0]
		comps = comps[1:]
		if c == "" || c == "." {
			continue
		}
		next := path.Join(cur, c)
		e, ok := im.Lookup(next)
		if !ok {
			if d, ok := im.Lookup(cur); ok && d.Type == image.TypeDir {
				return true // known missing: the listing is complete
			}
			cur = next // a directory outside the image: walk through it
			continue
		}
		switch e.Type {
		case image.TypeSymlink:
			if hops++; hops > 40 {
				return true // ELOOP, answered as the file system would
			}
			target := e.Target
			if !path.IsAbs(target) {
				target = path.Join(cur, target)
			}
			comps = append(strings.Split(strings.Trim(path.Clean(target), "/"), "/"), comps...)
			cur = "/"
		case image.TypeRegular, image.TypeMissing:
			return true // the file, or ENOENT/ENOTDIR below it
		case image.TypeExternal:
			if len(comps) == 0 {
				return false
			}
			cur = next
		default: // a directory
			cur = next
		}
	}
	_, ok := im.Lookup(cur)
	return ok || cur == "/"
}

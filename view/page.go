package view

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlbundle/dlbundle/internal/units"
)

//go:embed page.tmpl
var pageTemplate string

// page is parsed on first use rather than in the package's initializer:
// every dlbundle process links this package (the report verbs), and parsing
// the template at init cost each of them, every rank's exec included,
// ~0.7 ms and ~3,300 allocations for a page few of them write.
var page = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("page").Funcs(template.FuncMap{
		"f":       func(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) },
		"bytes":   units.Bytes,
		"count":   count,
		"ms":      ms,
		"percent": percent,
		"int64":   func(n int) int64 { return int64(n) },
		"plural":  plural,
		"add":     func(a, b int) int { return a + b },
		"count64": func(n int64) string { return count(int(n)) },
		"dur":     dur,
		"rate":    rate,
	}).Parse(pageTemplate))
})

// Write computes the figures of in and writes the page to w.
func Write(w io.Writer, in Input) error {
	f, err := Compute(in)
	if err != nil {
		return err
	}
	return WriteFigures(w, f, in)
}

// WriteFigures writes the page of already computed figures.
func WriteFigures(w io.Writer, f *Figures, in Input) error {
	d := pageData{F: f, In: in}
	if len(in.Traces) > 0 {
		d.Timeline = timelineChart(f)
		d.Lanes = lanesChart(f)
	}
	if f.Objects > 0 {
		d.Prefixes = prefixChart(f)
	}
	if f.Savings != nil {
		d.Savings = savingsChart(f)
	}
	if f.Report != nil {
		d.Report = reportChart(f)
	}
	if f.Seconds != nil {
		d.Start = startChart(f.Seconds)
	}
	d.KindClass = map[string]string{}
	for _, k := range f.Kinds {
		d.KindClass[k] = kindClass(k)
	}
	return page().Execute(w, d)
}

// pageData is what the template reads.
type pageData struct {
	F         *Figures
	In        Input
	Timeline  *svgChart
	Lanes     *svgChart
	Prefixes  *svgChart
	Savings   *svgChart
	Report    *svgChart
	Start     *svgChart
	KindClass map[string]string
}

// svgChart is one chart, laid out: the template only writes its shapes.
type svgChart struct {
	ID, Title, Desc string
	W, H            float64
	Rects           []rect
	Lines           []line
	Labels          []label
	Polylines       []polyline
}

type rect struct {
	X, Y, W, H float64
	Class      string
	Opacity    string // fill-opacity, "" for the class's
	Title      string // shown on hover
}

type line struct {
	X1, Y1, X2, Y2 float64
	Class          string
}

type label struct {
	X, Y   float64
	Text   string
	Anchor string // start, middle, end
	Class  string
	Title  string
}

type polyline struct {
	Points string
	Class  string
	Title  string
}

// tickAnchor keeps the first and last labels of an axis inside it.
func tickAnchor(i, last int) string {
	switch i {
	case 0:
		return "start"
	case last:
		return "end"
	}
	return "middle"
}

// plural is "1 object", "2 objects".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return count(n) + " " + many
}

// kindColours fixes a colour (a CSS class of page.tmpl) per kind, so that
// pages of different images compare at a glance.
var kindColours = map[string]string{
	"elf-shared": "k0", "py-extension": "k1", "elf-exec": "k2", "py-bytecode": "k3",
	"py-source": "k4", "script": "k5", "data": "k6",
}

// kindClass names the colour of a kind.
func kindClass(kind string) string {
	if c, ok := kindColours[kind]; ok {
		return c
	}
	return "k7"
}

func count(n int) string { return units.Count(n) }

func ms(ns int64) string {
	m := float64(ns) / 1e6
	if m >= 100 {
		return fmt.Sprintf("%.0f ms", m)
	}
	return fmt.Sprintf("%.1f ms", m)
}

func percent(part, whole int64) string {
	if whole == 0 {
		return "0%"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
}

// shorten cuts a long name to n runes in the middle: a path's start says
// where it is and its end what it is ("_multiarray_umath.cpython…gnu.so"
// rather than "…n-311-x86_64-linux-gnu.so"); two thirds of the room go to
// the start. The full name is on hover and in the tables.
func shorten(p string, n int) string {
	r := []rune(p)
	if len(r) <= n {
		return p
	}
	head := (n - 1) * 2 / 3
	tail := n - 1 - head
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

// niceMax rounds a positive maximum up to 1, 2 or 5 times a power of ten,
// so that the axis ticks are round numbers.
func niceMax(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := 1.0
	for p*10 <= x {
		p *= 10
	}
	for p > x {
		p /= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// timelineChart: lookups per time slice, found and failed stacked, the bytes
// of files opened so far as a line, and the largest files where they load.
func timelineChart(f *Figures) *svgChart {
	const W, H, left, right, top, bottom = 1000.0, 320.0, 56.0, 76.0, 84.0, 40.0
	c := &svgChart{ID: "timeline", W: W, H: H,
		Title: "File calls of the pilot run over time",
		Desc: fmt.Sprintf("%s lookups in %s, %s of them failed; %s of files opened. Bars: lookups per %s slice; line: bytes opened so far; marks: the largest files.",
			count(f.Lookups), ms(f.Duration), count(f.Failed), units.Bytes(f.Bytes), ms(f.Duration/numBins))}
	plotW, plotH := W-left-right, H-top-bottom
	base := top + plotH
	maxCount := 0
	for _, b := range f.Bins {
		maxCount = max(maxCount, b.Found+b.Failed)
	}
	yMax := niceMax(float64(maxCount))
	y := func(n float64) float64 { return base - n/yMax*plotH }
	x := func(t int64) float64 { return left + float64(t)/float64(f.Duration)*plotW }
	for _, frac := range []float64{0, 0.5, 1} {
		v := yMax * frac
		c.Lines = append(c.Lines, line{left, y(v), left + plotW, y(v), "grid"})
		c.Labels = append(c.Labels, label{X: left - 6, Y: y(v) + 4, Text: count(int(v)), Anchor: "end", Class: "tick"})
	}
	for i := 0; i <= 4; i++ {
		t := f.Duration * int64(i) / 4
		c.Lines = append(c.Lines, line{x(t), base, x(t), base + 4, "axisline"})
		c.Labels = append(c.Labels, label{X: x(t), Y: base + 18, Text: ms(t), Anchor: tickAnchor(i, 4), Class: "tick"})
	}
	c.Labels = append(c.Labels, label{X: left + plotW/2, Y: H - 4, Text: "time since the pilot started", Anchor: "middle", Class: "axis"})
	bw := plotW / numBins
	var cum int64
	points := []string{fmt.Sprintf("%.1f,%.1f", left, base)}
	for _, b := range f.Bins {
		x0 := x(b.Start)
		span := fmt.Sprintf("%s–%s", ms(b.Start), ms(b.End))
		if b.Found > 0 {
			c.Rects = append(c.Rects, rect{X: x0 + 0.5, Y: y(float64(b.Found)), W: bw - 1, H: plotH - (y(float64(b.Found)) - top),
				Class: "found", Title: fmt.Sprintf("%s: %s lookups found", span, count(b.Found))})
		}
		if b.Failed > 0 {
			c.Rects = append(c.Rects, rect{X: x0 + 0.5, Y: y(float64(b.Found + b.Failed)), W: bw - 1, H: float64(b.Failed) / yMax * plotH,
				Class: "failed", Title: fmt.Sprintf("%s: %s lookups failed (ENOENT probes, mostly)", span, count(b.Failed))})
		}
		cum += b.Bytes
		yb := base
		if f.Bytes > 0 {
			yb = base - float64(cum)/float64(f.Bytes)*plotH
		}
		points = append(points, fmt.Sprintf("%.1f,%.1f", x(b.End), yb))
	}
	if f.Bytes > 0 {
		c.Polylines = append(c.Polylines, polyline{Points: strings.Join(points, " "), Class: "bytesline",
			Title: fmt.Sprintf("bytes of files opened so far: %s in all", units.Bytes(f.Bytes))})
		c.Labels = append(c.Labels,
			label{X: left + plotW + 6, Y: top + 4, Text: units.Bytes(f.Bytes), Anchor: "start", Class: "tick bytes"},
			label{X: left + plotW + 6, Y: base + 4, Text: "0 B", Anchor: "start", Class: "tick bytes"},
			label{X: left + plotW + 6, Y: top - 8, Text: "opened", Anchor: "start", Class: "axis bytes"})
	}
	// The longest stretch without a file call: the app computing (seccomp
	// stops the app only on file calls, so that time is not ptrace's).
	gapStart, gapLen, run := 0, 0, 0
	for i, b := range f.Bins {
		if b.Found+b.Failed > 0 {
			run = 0
			continue
		}
		if run++; run > gapLen {
			gapStart, gapLen = i-run+1, run
		}
	}
	if gapLen >= 4 {
		g0, g1 := f.Bins[gapStart].Start, f.Bins[gapStart+gapLen-1].End
		text := fmt.Sprintf("%s without a file call: the app computing", ms(g1-g0))
		if gapStart+gapLen == numBins {
			text = fmt.Sprintf("%s without a file call: the app computing, then exiting", ms(g1-g0))
		}
		c.Labels = append(c.Labels, label{X: (x(g0) + x(g1)) / 2, Y: base - 8, Text: text, Anchor: "middle", Class: "tick",
			Title: fmt.Sprintf("%s–%s: no file call; the pilot stops the app only at file calls, so this is the app's own time (CPU, or calls that are not file calls)", ms(g0), ms(g1))})
	}
	// Label the largest files where they load, each in the first of a few
	// rows where it overlaps no other label; those that find no room are
	// named in one "+N" label (all are in the table below the chart).
	const rows, charW = 4, 6.4
	rowEnd := make([]float64, rows)
	var unplaced []string
	firstUnplaced := 0.0
	for _, o := range f.BigFiles {
		xo := x(o.T)
		text := shorten(path.Base(o.Path), 26) + " " + units.Bytes(o.Size)
		w := float64(len([]rune(text)))*charW + 8
		title := fmt.Sprintf("%s: %s opened at %s", o.Path, units.Bytes(o.Size), ms(o.T))
		start, anchor := xo, "start"
		if xo+w > W {
			start, anchor = xo-w, "end"
		}
		row := -1
		for r := 0; r < rows; r++ {
			if rowEnd[r] <= start {
				row = r
				break
			}
		}
		if row < 0 {
			if len(unplaced) == 0 {
				firstUnplaced = xo
			}
			unplaced = append(unplaced, title)
			c.Lines = append(c.Lines, line{xo, top - 6, xo, base, "mark"})
			continue
		}
		rowEnd[row] = start + w
		ly := 14 + float64(row)*15
		c.Lines = append(c.Lines, line{xo, ly + 3, xo, base, "mark"})
		c.Labels = append(c.Labels, label{X: xo, Y: ly, Text: text, Anchor: anchor, Class: "marklabel", Title: title})
	}
	if len(unplaced) > 0 {
		anchor := "start"
		if firstUnplaced > W/2 {
			anchor = "end"
		}
		c.Labels = append(c.Labels, label{X: firstUnplaced, Y: 14 + rows*15, Text: fmt.Sprintf("+%d more large files (table below)", len(unplaced)),
			Anchor: anchor, Class: "marklabel", Title: strings.Join(unplaced, "; ")})
	}
	return c
}

// lanesChart: one row per directory, in the order the app first searched
// them; cells show when its lookups happened (top half found, bottom half
// failed, darker for more); a bar at the end totals them.
func lanesChart(f *Figures) *svgChart {
	lanes := append([]DirLane(nil), f.Dirs...)
	if f.OtherDirs.Dirs > 0 {
		o := f.OtherDirs
		o.Dir = fmt.Sprintf("%s other directories", count(o.Dirs))
		lanes = append(lanes, o)
	}
	const W, left, stripW, top, rowH = 1040.0, 360.0, 480.0, 30.0, 22.0
	H := top + rowH*float64(len(lanes)) + 8
	c := &svgChart{ID: "lanes", W: W, H: H, Title: "Lookups by directory over time",
		Desc: fmt.Sprintf("The %d directories with the most lookups, in the order the app first searched them: when (cells: found above, failed below) and how many (bar).", len(f.Dirs))}
	maxCell, maxTotal := 1, 1
	for _, l := range lanes {
		maxTotal = max(maxTotal, l.Lookups())
		for b := range l.BinFound {
			maxCell = max(maxCell, l.BinFound[b], l.BinFailed[b])
		}
	}
	cellW := stripW / numBins
	barX := left + stripW + 14
	const barW = 70.0
	for i := 0; i <= 4; i++ {
		t := f.Duration * int64(i) / 4
		xx := left + float64(i)/4*stripW
		c.Labels = append(c.Labels, label{X: xx, Y: top - 8, Text: ms(t), Anchor: tickAnchor(i, 4), Class: "tick"})
	}
	c.Labels = append(c.Labels, label{X: barX, Y: top - 8, Text: "lookups (failed)", Anchor: "start", Class: "tick"})
	opacity := func(n int) string { return strconv.FormatFloat(0.35+0.65*float64(n)/float64(maxCell), 'f', 2, 64) }
	for i, l := range lanes {
		y0 := top + rowH*float64(i)
		title := fmt.Sprintf("%s: %s lookups, %s failed, %s opened, first at %s", l.Dir, count(l.Lookups()), count(l.Failed), units.Bytes(l.Bytes), ms(l.First))
		if i%2 == 0 {
			c.Rects = append(c.Rects, rect{X: 0, Y: y0, W: W, H: rowH, Class: "band"})
		}
		c.Rects = append(c.Rects, rect{X: left, Y: y0 + 2, W: stripW, H: rowH - 4, Class: "strip"})
		c.Labels = append(c.Labels, label{X: left - 8, Y: y0 + 15, Text: shorten(l.Dir, 48), Anchor: "end", Class: "dir", Title: title})
		for b := range l.BinFound {
			xb := left + float64(b)*cellW
			span := fmt.Sprintf("%s–%s", ms(f.Bins[b].Start), ms(f.Bins[b].End))
			if n := l.BinFound[b]; n > 0 {
				c.Rects = append(c.Rects, rect{X: xb, Y: y0 + 2, W: cellW, H: (rowH - 4) / 2, Class: "found", Opacity: opacity(n),
					Title: fmt.Sprintf("%s, %s: %s found", l.Dir, span, count(n))})
			}
			if n := l.BinFailed[b]; n > 0 {
				c.Rects = append(c.Rects, rect{X: xb, Y: y0 + rowH/2, W: cellW, H: (rowH - 4) / 2, Class: "failed", Opacity: opacity(n),
					Title: fmt.Sprintf("%s, %s: %s failed", l.Dir, span, count(n))})
			}
		}
		wf := barW * float64(l.Found) / float64(maxTotal)
		wx := barW * float64(l.Failed) / float64(maxTotal)
		c.Rects = append(c.Rects, rect{X: barX, Y: y0 + 5, W: wf, H: rowH - 10, Class: "found", Title: title})
		c.Rects = append(c.Rects, rect{X: barX + wf, Y: y0 + 5, W: wx, H: rowH - 10, Class: "failed", Title: title})
		c.Labels = append(c.Labels, label{X: barX + barW + 6, Y: y0 + 15, Text: fmt.Sprintf("%s (%s)", count(l.Lookups()), count(l.Failed)), Anchor: "start", Class: "num", Title: title})
	}
	return c
}

// prefixChart: the image's bytes by part of the tree, stacked by kind.
func prefixChart(f *Figures) *svgChart {
	const W, left, barW, top, rowH = 1040.0, 360.0, 470.0, 8.0, 24.0
	H := top + rowH*float64(len(f.Prefixes)) + 8
	c := &svgChart{ID: "prefixes", W: W, H: H, Title: "The image's bytes by prefix",
		Desc: fmt.Sprintf("%s objects, %s raw, %s stored: the parts of the tree that hold them, largest first, coloured by kind.",
			count(f.Objects), units.Bytes(f.RawBytes), units.Bytes(f.StoredBytes))}
	maxRaw := int64(1)
	for _, p := range f.Prefixes {
		maxRaw = max(maxRaw, p.Raw)
	}
	for i, p := range f.Prefixes {
		y0 := top + rowH*float64(i)
		name := p.Path
		if p.Others > 0 {
			name = fmt.Sprintf("%d other prefixes", p.Others)
		}
		title := fmt.Sprintf("%s: %s objects, %s raw, %s stored", name, count(p.Objects), units.Bytes(p.Raw), units.Bytes(p.Stored))
		if i%2 == 0 {
			c.Rects = append(c.Rects, rect{X: 0, Y: y0, W: W, H: rowH, Class: "band"})
		}
		c.Labels = append(c.Labels, label{X: left - 8, Y: y0 + 16, Text: shorten(name, 48), Anchor: "end", Class: "dir", Title: title})
		x := left
		for _, kind := range f.Kinds {
			b := p.ByKind[kind]
			if b == 0 {
				continue
			}
			w := barW * float64(b) / float64(maxRaw)
			c.Rects = append(c.Rects, rect{X: x, Y: y0 + 4, W: w, H: rowH - 8, Class: kindClass(kind),
				Title: fmt.Sprintf("%s: %s of %s", name, units.Bytes(b), kind)})
			x += w
		}
		c.Labels = append(c.Labels, label{X: x + 6, Y: y0 + 16, Text: fmt.Sprintf("%s · %s", units.Bytes(p.Raw), plural(p.Objects, "object", "objects")),
			Anchor: "start", Class: "num", Title: title})
	}
	return c
}

// savingsChart: lookups per rank natively and under exec, in pairs on the
// same basis (the shared file system only; everything passed to a file
// system, node-local included, which is what the reports measure), each bar
// named with where its figure comes from.
func savingsChart(f *Figures) *svgChart {
	s := f.Savings
	type bar struct {
		name, source string
		v            float64
		class        string
	}
	var bars []bar
	if f.Runs > 0 {
		bars = append(bars, bar{"shared FS, natively (measured)", "trace: lookups not node-local", float64(s.SharedNative), "failed"})
		if s.SharedExec >= 0 {
			bars = append(bars, bar{"shared FS, under exec (estimate)", "trace + the image's table of contents", float64(s.SharedExec), "found"})
		}
	}
	if s.Processes > 0 {
		if f.Runs > 0 {
			bars = append(bars, bar{"any FS, natively (measured)", "trace: every lookup, node-local included", float64(s.SharedNative + s.NodeLocal), "failed"})
		}
		bars = append(bars, bar{"any FS, under exec (measured)", "reports: passed on by the shim, node-local included", s.PerProcess, "k2"})
	}
	const W, left, barW, top, rowH = 1040.0, 360.0, 470.0, 8.0, 34.0
	c := &svgChart{ID: "savings", W: W, H: top + rowH*float64(len(bars)) + 8, Title: "What exec saves per rank",
		Desc: "Lookups per rank, natively and under dlbundle exec, compared on the same basis: on the shared file system, then on any file system (what the reports count)."}
	maxV := 1.0
	for _, b := range bars {
		maxV = max(maxV, b.v)
	}
	for i, b := range bars {
		y0 := top + rowH*float64(i)
		w := barW * b.v / maxV
		title := fmt.Sprintf("%s: %.0f lookups per rank (%s)", b.name, b.v, b.source)
		c.Labels = append(c.Labels,
			label{X: left - 8, Y: y0 + 14, Text: b.name, Anchor: "end", Class: "dir", Title: title},
			label{X: left - 8, Y: y0 + 27, Text: b.source, Anchor: "end", Class: "tick", Title: title})
		c.Rects = append(c.Rects, rect{X: left, Y: y0 + 6, W: max(w, 1), H: rowH - 12, Class: b.class, Title: title})
		c.Labels = append(c.Labels, label{X: left + max(w, 1) + 6, Y: y0 + 21, Text: count(int(b.v + 0.5)), Anchor: "start", Class: "num", Title: title})
	}
	return c
}

// startChart: a rank's start-up in seconds, natively and under exec, at 1
// rank and at the model's width, stacked by where the time goes: the
// untraced start-up (CPU), waiting for the metadata server, reading the
// image, exec's fixed cost. Each width has its own scale (N ranks are
// minutes where 1 rank is milliseconds); the totals are written out.
func startChart(s *Seconds) *svgChart {
	const W, left, barW, top, rowH, groupH = 1040.0, 250.0, 600.0, 8.0, 30.0, 22.0
	groups := [][]StartupCase{}
	for _, c := range s.Cases {
		if len(groups) == 0 || groups[len(groups)-1][0].Ranks != c.Ranks {
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], c)
	}
	H := top + 8
	for _, g := range groups {
		H += groupH + rowH*float64(len(g))
	}
	c := &svgChart{ID: "startup", W: W, H: H, Title: "Start-up per rank, in seconds",
		Desc: "A rank's start-up natively and under dlbundle exec, at 1 rank and at width, by where the time goes: the untraced start-up, waiting for the metadata server (model), reading the image (model), exec's fixed cost (measured on the benchmark machine)."}
	y := top
	for _, g := range groups {
		var maxT time.Duration = 1
		for _, k := range g {
			maxT = max(maxT, k.Total())
		}
		c.Labels = append(c.Labels, label{X: 4, Y: y + 15, Text: fmt.Sprintf("%s rank%s starting together (scale: %s)", count(g[0].Ranks), map[bool]string{true: "", false: "s"}[g[0].Ranks == 1], dur(maxT)), Anchor: "start", Class: "axis"})
		y += groupH
		for _, k := range g {
			title := k.Formula(s)
			c.Labels = append(c.Labels, label{X: left - 8, Y: y + 19, Text: k.Name, Anchor: "end", Class: "dir", Title: title})
			x := left
			for _, part := range []struct {
				name  string
				d     time.Duration
				class string
			}{{"untraced start-up (CPU)", k.CPU, "k6"}, {"waiting for the metadata server (model)", k.MDS, "failed"},
				{"every node reading its copy of the image (model)", k.Read, "k3"}, {"staging its files on the node (model)", k.Stage, "k1"},
				{"exec's fixed cost (measured, benchmark machine)", k.Fixed, "k2"}} {
				if part.d <= 0 {
					continue
				}
				w := barW * float64(part.d) / float64(maxT)
				c.Rects = append(c.Rects, rect{X: x, Y: y + 6, W: max(w, 0.5), H: rowH - 12, Class: part.class,
					Title: fmt.Sprintf("%s, %s: %s", k.Name, part.name, dur(part.d))})
				x += w
			}
			c.Labels = append(c.Labels, label{X: x + 6, Y: y + 19, Text: dur(k.Total()), Anchor: "start", Class: "num", Title: title})
			y += rowH
		}
	}
	return c
}

// reportChart: the share of lookups the shim answered from the stage, as
// missing, and passed to the file system.
func reportChart(f *Figures) *svgChart {
	r := f.Report
	total := r.Answered + r.Missing + r.Passed
	const W, left, barW, top = 1040.0, 20.0, 1000.0, 8.0
	c := &svgChart{ID: "report", W: W, H: 58, Title: "How the shim answered the app's lookups",
		Desc: fmt.Sprintf("%s processes, %s lookups: answered from the stage, answered as missing, passed to the file system.", count(r.Processes), count(int(total)))}
	x := left
	for _, part := range []struct {
		name  string
		n     int64
		class string
	}{{"answered from the stage", r.Answered, "found"}, {"answered as missing", r.Missing, "k3"}, {"passed to the file system", r.Passed, "failed"}} {
		if part.n == 0 || total == 0 {
			continue
		}
		w := barW * float64(part.n) / float64(total)
		title := fmt.Sprintf("%s: %s (%s)", part.name, count(int(part.n)), percent(part.n, total))
		c.Rects = append(c.Rects, rect{X: x, Y: top, W: w, H: 24, Class: part.class, Title: title})
		if w > 150 {
			c.Labels = append(c.Labels, label{X: x + 6, Y: top + 44, Text: title, Anchor: "start", Class: "tick", Title: title})
		}
		x += w
	}
	return c
}

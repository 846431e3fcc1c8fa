package startup

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// The plot is hand-written SVG: one panel per scenario, start-up time of the
// last rank (log scale) against ranks (log2 scale), one line per mode.

var modeStyle = []struct{ mode, color, dash string }{
	{ModeNative, "#d62728", ""},
	{ModeIdeal, "#7f7f7f", "5,4"},
	{ModeCold, "#9ecae1", ""},
	{ModeWarm, "#1f77b4", ""},
	{ModeEnv, "#2ca02c", ""},
}

// WriteSVG draws start-up time vs ranks for every scenario.
func (r *Results) WriteSVG(w io.Writer) error {
	const panelW, panelH, left, top, plotW, plotH = 330, 290, 58, 40, 250, 200
	scenarios := make([]string, 0, len(r.Calibrations))
	for _, c := range r.Calibrations {
		scenarios = append(scenarios, c.Scenario)
	}
	width := max(len(scenarios), 1) * panelW
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, panelH+30)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, sc := range scenarios {
		x0 := i*panelW + left
		// Axis ranges from the data: ranks 1..max, seconds over all modes.
		maxN, lo, hi := 1, math.Inf(1), math.Inf(-1)
		for _, row := range r.Rows {
			if row.Scenario != sc || row.Err != "" || row.Wall <= 0 {
				continue
			}
			maxN = max(maxN, row.Ranks)
			lo, hi = math.Min(lo, row.Wall.Seconds()), math.Max(hi, row.Wall.Seconds())
		}
		if math.IsInf(lo, 0) {
			lo, hi = 0.001, 1
		}
		ylo, yhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if yhi <= ylo {
			yhi = ylo + 1
		}
		xhi := math.Max(math.Log2(float64(maxN)), 1)
		px := func(n int) float64 { return float64(x0) + math.Log2(float64(n))/xhi*plotW }
		py := func(s float64) float64 { return top + plotH - (math.Log10(s)-ylo)/(yhi-ylo)*plotH }

		fmt.Fprintf(&b, `<text x="%d" y="20" font-size="13" font-weight="bold">%s</text>`+"\n", x0, html.EscapeString(sc))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", x0, top, plotW, plotH)
		for e := ylo; e <= yhi; e++ {
			y := py(math.Pow(10, e))
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`, x0, y, x0+plotW, y)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-4, y+4, secondsLabel(math.Pow(10, e)))
		}
		// Ticks at the widths measured only: nothing is drawn where
		// nothing ran.
		for _, n := range r.widthsOf(sc) {
			x := px(n)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`, x, top, x, top+plotH)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x, top+plotH+14, n)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">ranks started together</text>`+"\n", x0+plotW/2, top+plotH+30)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" transform="rotate(-90 %d %d)">start-up of the last rank (s)</text>`+"\n",
			x0-44, top+plotH/2, x0-44, top+plotH/2)
		for k, st := range modeStyle {
			var rows []Row
			for _, row := range r.rowsOf(sc, st.mode) {
				if row.Err == "" && row.Wall > 0 {
					rows = append(rows, row)
				}
			}
			if len(rows) == 0 {
				continue
			}
			dash := ""
			if st.dash != "" {
				dash = fmt.Sprintf(` stroke-dasharray="%s"`, st.dash)
			}
			// A line joins two measurements only where no width between them
			// was left out (1, 2, 4...: the benchmark); the demo's 1 and 16
			// ranks are points, each with its value.
			var run []string
			flush := func() {
				if len(run) > 1 {
					fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(run, " "), st.color, dash)
				}
				run = nil
			}
			for i, row := range rows {
				if i > 0 && row.Ranks != 2*rows[i-1].Ranks {
					flush()
				}
				run = append(run, fmt.Sprintf("%.1f,%.1f", px(row.Ranks), py(row.Wall.Seconds())))
			}
			flush()
			joined := len(rows) > 1
			for i := 1; i < len(rows); i++ {
				joined = joined && rows[i].Ranks == 2*rows[i-1].Ranks
			}
			for _, row := range rows {
				cx, cy := px(row.Ranks), py(row.Wall.Seconds())
				fill := st.color
				if st.mode == ModeIdeal {
					fill = "white" // hollow: the floor, not a way to run
				}
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4.5" fill="%s" stroke="%s" stroke-width="2"><title>%s, %d rank%s: %s (measured)</title></circle>`,
					cx, cy, fill, st.color, st.mode, row.Ranks, plural(row.Ranks), secondsLabel(row.Wall.Seconds()))
				if !joined {
					anchor, dx := "start", 7.0
					if row.Ranks == maxN && maxN > 1 {
						anchor, dx = "end", -7
					}
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="%s" fill="#333">%s</text>`, cx+dx, cy+4, anchor, shortSeconds(row.Wall.Seconds()))
				}
			}
			ly := top + 12 + k*14
			legendFill := st.color
			if st.mode == ModeIdeal {
				legendFill = "white"
			}
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/><circle cx="%d" cy="%d" r="3.5" fill="%s" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>`+"\n",
				x0+6, ly-4, x0+22, ly-4, st.color, dash, x0+14, ly-4, legendFill, st.color, x0+26, ly, st.mode)
		}
		b.WriteString("\n")
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func secondsLabel(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%gs", s)
	case s >= 0.001:
		return fmt.Sprintf("%gms", s*1000)
	}
	return fmt.Sprintf("%gµs", s*1e6)
}

// shortSeconds labels a measured point: 3 significant digits.
func shortSeconds(s float64) string {
	if s >= 1 {
		return fmt.Sprintf("%.3g s", s)
	}
	return fmt.Sprintf("%.3g ms", s*1000)
}

// widthsOf are the rank counts measured for scenario, in order.
func (r *Results) widthsOf(scenario string) []int {
	seen := map[int]bool{}
	var out []int
	for _, row := range r.Rows {
		if row.Scenario == scenario && row.Err == "" && row.Wall > 0 && !seen[row.Ranks] {
			seen[row.Ranks] = true
			out = append(out, row.Ranks)
		}
	}
	slices.Sort(out)
	return out
}

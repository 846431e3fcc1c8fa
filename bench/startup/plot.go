package startup

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// The plot is hand-written SVG: one panel per scenario, start-up time of the
// last rank (log scale) against ranks (log2 scale), one line per mode.

var modeStyle = []struct{ mode, color, dash string }{
	{ModeNative, "#d62728", ""},
	{ModeIdeal, "#7f7f7f", "5,4"},
	{ModeCold, "#9ecae1", ""},
	{ModeWarm, "#1f77b4", ""},
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
		for n := 1; n <= maxN; n *= 2 {
			x := px(n)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`, x, top, x, top+plotH)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x, top+plotH+14, n)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">ranks started together</text>`+"\n", x0+plotW/2, top+plotH+30)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" transform="rotate(-90 %d %d)">start-up of the last rank (s)</text>`+"\n",
			x0-44, top+plotH/2, x0-44, top+plotH/2)
		for k, st := range modeStyle {
			var pts []string
			for _, row := range r.rowsOf(sc, st.mode) {
				if row.Err == "" && row.Wall > 0 {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(row.Ranks), py(row.Wall.Seconds())))
				}
			}
			if len(pts) == 0 {
				continue
			}
			dash := ""
			if st.dash != "" {
				dash = fmt.Sprintf(` stroke-dasharray="%s"`, st.dash)
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), st.color, dash)
			for _, pt := range pts {
				xy := strings.Split(pt, ",")
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="2.5" fill="%s"/>`, xy[0], xy[1], st.color)
			}
			ly := top + 12 + k*14
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/><text x="%d" y="%d">%s</text>`+"\n",
				x0+6, ly-4, x0+22, ly-4, st.color, dash, x0+26, ly, st.mode)
		}
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

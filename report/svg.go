package report

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// Layout of the SVG: one panel per class and dimension, a row per class.
const (
	panelW, panelH = 300, 230
	marginL        = 58
	marginR        = 16
	marginT        = 30
	marginB        = 58
	headerH        = 44
	plotW          = panelW - marginL - marginR
	plotH          = panelH - marginT - marginB
)

// WriteSVG writes rep as a standalone SVG image, written by hand with no
// library: per class a row of four panels, one per dimension, each with
// its axes (units, ticks, grid), the curve F, the knee as a labelled red
// line and the suggested ceiling with its interval as a labelled band.
func WriteSVG(w io.Writer, rep Report) error {
	cols := len(Dimensions())
	rows := max(len(rep.Classes), 1)
	width, height := cols*panelW, headerH+rows*panelH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="10" y="18" font-size="14" font-weight="bold">Share of runs accepted within budget b, per task class%s</text>`+"\n",
		esc(scopeText(rep.Scope)))
	fmt.Fprintf(&b, `<text x="10" y="35" fill="#444">knee (red): F rises by less than %s per step past it; ceiling (blue): %s of accepted runs finished within it, band = %s bootstrap interval</text>`+"\n",
		percent(rep.Options.Slope), percent(rep.Options.Quantile), percent(rep.Options.Level))
	if len(rep.Classes) == 0 {
		fmt.Fprintf(&b, `<text x="10" y="%d">no judged runs</text>`+"\n", headerH+20)
	}
	for r, cl := range rep.Classes {
		for c, cv := range cl.Curves {
			panel(&b, cl, cv, c*panelW, headerH+r*panelH)
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func panel(b *strings.Builder, cl Class, cv Curve, x0, y0 int) {
	ox, oy := float64(x0+marginL), float64(y0+marginT+plotH) // the origin
	xmax := cv.Points[len(cv.Points)-1].Budget
	if xmax <= 0 {
		xmax = 1
	}
	px := func(v float64) float64 { return ox + math.Min(v/xmax, 1)*plotW }
	py := func(f float64) float64 { return oy - f*plotH }
	fmt.Fprintf(b, `<g><text x="%d" y="%d" font-weight="bold">%s: %s</text>`+"\n", x0+marginL, y0+marginT-12,
		esc(className(cl.Class)), esc(fmt.Sprintf("%s (%d runs, %d accepted)", cv.Dimension, cl.Runs, cl.Accepted)))

	// Y: share of runs, gridlines every 25%.
	for i := 0; i <= 4; i++ {
		f := float64(i) / 4
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", ox, py(f), ox+plotW, py(f))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%d%%</text>`+"\n", ox-4, py(f)+4, i*25)
	}
	fmt.Fprintf(b, `<text transform="translate(%d %.1f) rotate(-90)" text-anchor="middle">accepted within b</text>`+"\n", x0+14, oy-plotH/2)

	// X: budget, ticks at a round step.
	ts := gridStep(xmax, 5, cv.Dimension.integral())
	for i := 0; ts.at(i) <= xmax*(1+1e-9); i++ {
		v := ts.at(i)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", px(v), oy, px(v), oy+4)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(v), oy+16, tick(v, ts.value()))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">budget b (%s)</text>`+"\n", ox+plotW/2, oy+32, esc(cv.Unit))
	fmt.Fprintf(b, `<path d="M%.1f %.1fV%.1fH%.1f" fill="none" stroke="#333"/>`+"\n", ox, oy-plotH, oy, ox+plotW)

	// The ceiling's interval as a band, the ceiling as a line.
	if c := cv.Ceiling; c != nil {
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="#1f77b4" fill-opacity="0.15"/>`+"\n",
			px(c.Low), oy-plotH, math.Max(px(c.High)-px(c.Low), 1), plotH)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#1f77b4" stroke-dasharray="2 2"/>`+"\n", px(c.Value), oy, px(c.Value), oy-plotH)
		label(b, ox+plotW-4, oy-8, "#1f77b4", fmt.Sprintf("ceiling %s [%s, %s] n=%d", short(cv, c.Value, true), short(cv, c.Low, false), short(cv, c.High, false), c.Runs))
	}

	// The curve.
	b.WriteString(`<polyline fill="none" stroke="#222" stroke-width="1.5" points="`)
	for i, p := range cv.Points {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(b, "%.1f,%.1f", px(p.Budget), py(p.Fraction))
	}
	b.WriteString(`"/>` + "\n")

	// The knee.
	k := cv.Knee
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#d62728" stroke-dasharray="5 3"/>`+"\n", px(k.Budget), oy, px(k.Budget), oy-plotH)
	fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="#d62728"/>`+"\n", px(k.Budget), py(k.Fraction))
	label(b, ox+plotW-4, oy-22, "#d62728", fmt.Sprintf("knee %s, F=%s", short(cv, k.Budget, true), percent(k.Fraction)))
	b.WriteString("</g>\n")
}

// label writes a legend line ending at x, in the plot's lower right,
// which a rising curve leaves empty.
func label(b *strings.Builder, x, y float64, color, text string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s" text-anchor="end" font-size="10" stroke="white" stroke-width="3" paint-order="stroke">%s</text>`+"\n", x, y, color, esc(text))
}

// tick writes an axis value compactly: 1.5M, 300k, 0.25.
func tick(v, step float64) string {
	switch {
	case v >= 1e6 && step >= 1e5:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e4 && step >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', decimals(step), 64)
}

// short writes a value for a label: token counts in thousands or millions
// (285k), the rest as the text form does; with its unit when unit is set.
func short(cv Curve, v float64, unit bool) string {
	if cv.Dimension != Tokens || v < 1e4 {
		if unit {
			return cv.amount(v)
		}
		return cv.number(v)
	}
	s := strconv.FormatFloat(v/1e3, 'f', 0, 64) + "k"
	if v >= 1e6 {
		s = strconv.FormatFloat(v/1e6, 'f', 2, 64) + "M"
	}
	if unit {
		s += " tokens"
	}
	return s
}

func esc(s string) string { return html.EscapeString(s) }

package harness

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// Chart geometry, in SVG user units.
const (
	chartLabelW = 300 // left column with job names
	chartPlotW  = 520 // bar area
	chartRightW = 150 // right column with the figure
	chartBarH   = 18
	chartRowH   = 26
	chartTop    = 56
	chartBottom = 40
)

// chartRow is one bar: a job's ratio, or one of its extra metrics' ratios.
type chartRow struct {
	name   string
	status string // StatusOK or why no bar
	reason string
	ratio  Summary
	sub    bool
}

// chartRows lists every ratio of the results: each job, then each of its
// extra metrics that both sides reported (indented, "└ metric").
func chartRows(r *Results) []chartRow {
	var out []chartRow
	for _, j := range r.Jobs {
		out = append(out, chartRow{name: j.Name, status: j.Status, reason: j.Reason, ratio: j.Ratio})
		if j.Status != StatusOK {
			continue
		}
		for _, e := range j.Extra {
			if e.Ratio.Median > 0 && e.Ratio.Min > 0 && !math.IsInf(e.Ratio.Max, 0) {
				out = append(out, chartRow{name: "└ " + e.Metric.Name, status: StatusOK, ratio: e.Ratio, sub: true})
			}
		}
	}
	return out
}

// WriteSVG draws one horizontal bar per ratio (each job's, then each of its
// extra metrics', indented): ferry's median advantage on a logarithmic
// axis, a whisker from the smallest to the largest pair ratio, and a line
// at 1× (parity). Jobs that did not run are listed with their status
// instead of a bar. The SVG is self-contained and hand-written: no
// scripts, no external fonts or images.
func (r *Results) WriteSVG(w io.Writer) error {
	rowsC := chartRows(r)
	lo, hi := 1.0, 1.0
	for _, j := range rowsC {
		if j.status == StatusOK {
			lo = math.Min(lo, j.ratio.Min)
			hi = math.Max(hi, j.ratio.Max)
		}
	}
	// Axis from a power of ten at or below lo to one at or above hi.
	dlo := math.Floor(math.Log10(lo))
	dhi := math.Ceil(math.Log10(hi))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	x := func(v float64) float64 {
		return chartLabelW + (math.Log10(v)-dlo)/(dhi-dlo)*chartPlotW
	}
	width := chartLabelW + chartPlotW + chartRightW
	height := chartTop + chartRowH*len(rowsC) + chartBottom

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="15" font-weight="bold">%s</text>`+"\n",
		esc(fmt.Sprintf("ferry's advantage over the anchor, > 1 = ferry better (median, min–max of pairs; log scale) — %s mode", r.Mode)))
	fmt.Fprintf(&b, `<text x="10" y="38" fill="#555">%s</text>`+"\n",
		esc(fmt.Sprintf("%s, %d × %s, %s", r.Machine.Host, r.Machine.CPUs, r.Machine.CPUModel, r.Started.UTC().Format("2006-01-02"))))
	// Decade grid lines and labels.
	plotBottom := chartTop + chartRowH*len(rowsC)
	for d := dlo; d <= dhi; d++ {
		v := math.Pow(10, d)
		xx := x(v)
		stroke := "#dddddd"
		if d == 0 {
			stroke = "#333333"
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", xx, chartTop-6, xx, plotBottom, stroke)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#333">%s×</text>`+"\n", xx, plotBottom+16, esc(trimRatio(v)))
	}
	for i, j := range rowsC {
		y := chartTop + i*chartRowH
		cy := float64(y) + chartBarH/2
		style := ""
		if j.sub {
			style = ` fill="#555" font-size="11"`
		}
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle"%s>%s</text>`+"\n",
			chartLabelW-8, cy, style, esc(clipString(j.name, 46)))
		if j.status != StatusOK {
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" dominant-baseline="middle" fill="#999" font-style="italic">%s</text>`+"\n",
				chartLabelW+6, cy, esc(clipString(j.status+": "+gist(j.reason), 90)))
			continue
		}
		x0, xm := x(1), x(j.ratio.Median)
		fill := "#2e7d32" // ferry faster
		if j.ratio.Median < 1 {
			fill = "#c62828" // ferry slower
		}
		opacity := "0.8"
		if j.sub {
			opacity = "0.45"
		}
		left, wid := math.Min(x0, xm), math.Abs(xm-x0)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="%s"/>`+"\n", left, y, math.Max(wid, 1), chartBarH, fill, opacity)
		x1, x2 := x(j.ratio.Min), x(j.ratio.Max)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>`+"\n", x1, cy, x2, cy)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>`+"\n", x1, cy-4, x1, cy+4)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>`+"\n", x2, cy-4, x2, cy+4)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" dominant-baseline="middle">%s</text>`+"\n",
			chartLabelW+chartPlotW+8, cy, esc(FormatRatio(j.ratio)))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func trimRatio(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(fmt.Sprintf("%.6f", v), "0")
}

func clipString(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

var svgEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;")

// esc makes s safe as XML character data: valid UTF-8, no control
// characters (which XML 1.0 forbids), markup characters escaped.
func esc(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == 0xfffe || r == 0xffff {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	return svgEscaper.Replace(s)
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

package main

// Charts of the rollout mode, in plain SVG: no dependency, and the same
// figures always give the same bytes (fixed formatting, fixed order), so
// that committed charts change only when the figures do.

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strconv"

	"github.com/policyrouter/policyrouter/internal/benchkit"
)

// Chart geometry, in SVG user units.
const (
	chartW, chartH               = 760.0, 400.0
	plotL, plotR, plotT, plotB   = 60.0, 200.0, 40.0, 50.0
	plotW, plotH                 = chartW - plotL - plotR, chartH - plotT - plotB
	cdfPoints                    = 200 // quantiles drawn per wait distribution
	minWaitMS                    = 0.1 // left end of the wait axis
	chartFont                    = `font-family="sans-serif" font-size="12"`
	chartAxisStyle               = `stroke="#333" stroke-width="1"`
	chartGridStyle               = `stroke="#ddd" stroke-width="1"`
	chartLineWidth               = 2
	chartLegendX, chartLegendRow = chartW - plotR + 15, 18.0
)

// strategyColour is the colour of a strategy, by its row in strategies, so
// that a strategy has the same colour in every chart.
func strategyColour(name string) string {
	palette := []string{"#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b"}
	for i, s := range strategies {
		if s.Name == name {
			return palette[i%len(palette)]
		}
	}
	return "#000"
}

// svgChart accumulates one chart.
type svgChart struct{ b bytes.Buffer }

func newSVGChart(title string) *svgChart {
	c := &svgChart{}
	fmt.Fprintf(&c.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(&c.b, `<rect width="%g" height="%g" fill="#fff"/>`+"\n", chartW, chartH)
	c.text(plotL, 22, "start", `font-weight="bold"`, title)
	return c
}

func (c *svgChart) text(x, y float64, anchor, extra, s string) {
	fmt.Fprintf(&c.b, `<text x="%.1f" y="%.1f" text-anchor="%s" %s %s>%s</text>`+"\n", x, y, anchor, chartFont, extra, html.EscapeString(s))
}

func (c *svgChart) line(x1, y1, x2, y2 float64, style string) {
	fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" %s/>`+"\n", x1, y1, x2, y2, style)
}

// polyline draws points already in SVG coordinates.
func (c *svgChart) polyline(xs, ys []float64, colour string) {
	c.b.WriteString(`<polyline fill="none" stroke="` + colour + `" stroke-width="` + fmt.Sprint(chartLineWidth) + `" points="`)
	for i := range xs {
		if i > 0 {
			c.b.WriteByte(' ')
		}
		fmt.Fprintf(&c.b, "%.1f,%.1f", xs[i], ys[i])
	}
	c.b.WriteString(`"/>` + "\n")
}

// axes draws the plot frame, the y grid at yTicks (fractions of the plot
// height from the bottom, with labels) and the x ticks likewise.
func (c *svgChart) axes(xTicks, yTicks []float64, xLabels, yLabels []string, xTitle, yTitle string) {
	for i, f := range yTicks {
		y := plotT + plotH*(1-f)
		c.line(plotL, y, plotL+plotW, y, chartGridStyle)
		c.text(plotL-6, y+4, "end", "", yLabels[i])
	}
	for i, f := range xTicks {
		x := plotL + plotW*f
		c.line(x, plotT+plotH, x, plotT+plotH+5, chartAxisStyle)
		c.text(x, plotT+plotH+18, "middle", "", xLabels[i])
	}
	c.line(plotL, plotT, plotL, plotT+plotH, chartAxisStyle)
	c.line(plotL, plotT+plotH, plotL+plotW, plotT+plotH, chartAxisStyle)
	c.text(plotL+plotW/2, chartH-10, "middle", "", xTitle)
	fmt.Fprintf(&c.b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle" %s>%s</text>`+"\n", plotT+plotH/2, chartFont, html.EscapeString(yTitle))
}

// legend lists the strategies with their colours, right of the plot.
func (c *svgChart) legend(rows []string) {
	for i, name := range rows {
		y := plotT + 10 + chartLegendRow*float64(i)
		c.line(chartLegendX, y-4, chartLegendX+20, y-4, `stroke="`+strategyColour(name)+`" stroke-width="3"`)
		c.text(chartLegendX+26, y, "start", "", name)
	}
}

func (c *svgChart) bytes() []byte {
	c.b.WriteString("</svg>\n")
	return c.b.Bytes()
}

// utilisationChart draws each strategy's utilisation over the run at one
// load, with the nominal bound min(1, load) dashed.
func utilisationChart(rep *rolloutReport, lr rolloutLoad) []byte {
	c := newSVGChart(fmt.Sprintf("Policy utilisation over time, offered load %g (seed %d)", lr.Load, rep.Workload.Seed))
	dur := rep.Workload.DurationS
	const yMax = 1.05
	var yTicks []float64
	var yLabels []string
	for v := 0.0; v <= 1.0001; v += 0.25 {
		yTicks, yLabels = append(yTicks, v/yMax), append(yLabels, fmt.Sprintf("%.2f", v))
	}
	var xTicks []float64
	var xLabels []string
	step := niceStep(dur / 5)
	for v := 0.0; v <= dur+1e-9; v += step {
		xTicks, xLabels = append(xTicks, v/dur), append(xLabels, fmt.Sprintf("%g", v))
	}
	c.axes(xTicks, yTicks, xLabels, yLabels, "seconds into the run", "busy fraction of all policies")
	by := plotT + plotH*(1-lr.UtilBound/yMax)
	c.line(plotL, by, plotL+plotW, by, `stroke="#555" stroke-width="1" stroke-dasharray="6 4"`)
	c.text(plotL+plotW-4, by-5, "end", `fill="#555"`, "bound min(1, load)")
	var names []string
	for _, r := range lr.Strategies {
		names = append(names, r.Strategy)
		n := len(r.UtilisationSeries)
		if n == 0 {
			continue
		}
		xs, ys := make([]float64, n), make([]float64, n)
		for i, u := range r.UtilisationSeries {
			t := dur * float64(i+1) / float64(n) // the samples are evenly spaced but for the last
			xs[i] = plotL + plotW*t/dur
			ys[i] = plotT + plotH*(1-math.Min(u, yMax)/yMax)
		}
		c.polyline(xs, ys, strategyColour(r.Strategy))
	}
	c.legend(names)
	return c.bytes()
}

// waitChart draws each strategy's distribution of env waits at one load as
// a cumulative curve over a logarithmic wait axis.
func waitChart(rep *rolloutReport, lr rolloutLoad) []byte {
	c := newSVGChart(fmt.Sprintf("Env wait per turn, cumulative, offered load %g (seed %d)", lr.Load, rep.Workload.Seed))
	maxMS := 1.0
	for _, r := range lr.Strategies {
		if n := len(r.waits); n > 0 {
			maxMS = math.Max(maxMS, benchkit.MS(r.waits[n-1]))
		}
	}
	lo, hi := math.Round(math.Log10(minWaitMS)), math.Ceil(math.Log10(maxMS))
	xOf := func(v float64) float64 {
		return plotL + plotW*(math.Log10(math.Max(v, minWaitMS))-lo)/(hi-lo)
	}
	var xTicks, yTicks []float64
	var xLabels, yLabels []string
	for e := lo; e <= hi+1e-9; e++ {
		xTicks, xLabels = append(xTicks, (e-lo)/(hi-lo)), append(xLabels, decade(e))
	}
	for v := 0.0; v <= 1.0001; v += 0.25 {
		yTicks, yLabels = append(yTicks, v), append(yLabels, fmt.Sprintf("%.2f", v))
	}
	c.axes(xTicks, yTicks, xLabels, yLabels, "env wait in one turn, ms (log scale)", "fraction of turns")
	var names []string
	for _, r := range lr.Strategies {
		names = append(names, r.Strategy)
		if len(r.waits) == 0 {
			continue
		}
		xs, ys := make([]float64, cdfPoints+1), make([]float64, cdfPoints+1)
		for i := range cdfPoints + 1 {
			q := float64(i) / cdfPoints
			xs[i] = xOf(benchkit.MS(benchkit.Percentile(r.waits, q)))
			ys[i] = plotT + plotH*(1-q)
		}
		c.polyline(xs, ys, strategyColour(r.Strategy))
	}
	c.legend(names)
	return c.bytes()
}

// decade labels 10^e for an integer e: "0.1", "1", "1000".
func decade(e float64) string {
	e = math.Round(e)
	return strconv.FormatFloat(math.Pow(10, e), 'f', max(0, int(-e)), 64)
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

package main

// The weight-update sweep: the seven update strategies of
// internal/updatesim at every point of the grid, in simulated time.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/policyrouter/policyrouter/internal/updatesim"
)

// sweepBase is the fleet and workload the sweep holds fixed: 16 batched
// policies of capacity 8, 4-turn episodes, generation median 300 ms cut at
// 10 s, env steps median 500 ms, a 30 ms prefix recompute per turn after a
// cache flush, the router's 50 ms update tick as the control lag, and 6
// measured updates after one period of warm-up. Env workers are set per
// point to offer 1.25x capacity.
var sweepBase = updatesim.Config{
	Policies: 16, Capacity: 8, Turns: 4, GenMedian: 300 * time.Millisecond, GenMax: 10 * time.Second,
	EnvMedian: 500 * time.Millisecond, EnvSigma: 0.5, PrefixCost: 30 * time.Millisecond,
	ControlLag: 50 * time.Millisecond, Updates: 6,
}

const sweepLoad = 1.25

// sweepGrid is the grid.
var sweepGrid = updatesim.Grid([]float64{0.5, 1, 1.5}, []time.Duration{10 * time.Second, 30 * time.Second},
	[]time.Duration{time.Second, 4 * time.Second}, []int{2, 4})

// runSweep runs the sweep with seeds 1..seeds, prints the Markdown table
// and the aims, and writes the charts into dir (if not empty).
func runSweep(seeds int, dir string, stdout, stderr io.Writer) error {
	var ss []uint64
	for i := range seeds {
		ss = append(ss, uint64(i+1))
	}
	t0 := time.Now()
	res, err := updatesim.Sweep(sweepBase, sweepLoad, sweepGrid, ss)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "sweep: %d points x %d strategies x %d seeds in %.1fs\n", len(sweepGrid), len(updatesim.Strategies), seeds, time.Since(t0).Seconds())
	fmt.Fprintf(stdout, "weight-update sweep: %+v, offered load %g, seeds 1..%d\n\n", sweepBase, sweepLoad, seeds)
	updatesim.WriteTable(stdout, res)
	fmt.Fprintln(stdout, "\naims:")
	for _, a := range updatesim.Aims(res, sweepBase.Policies) {
		fmt.Fprintf(stdout, "  [%s] %s: %s\n", metWord(a.Met), a.Aim, a.Detail)
	}
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range []time.Duration{10 * time.Second, 30 * time.Second} {
		path := filepath.Join(dir, fmt.Sprintf("update-throughput-P%ds.svg", int(p.Seconds())))
		if err := os.WriteFile(path, sweepChart(res, p, 4*time.Second, 4), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "chart: %s\n", path)
	}
	return nil
}

// updateColours colours the strategies of updatesim.Strategies, in order.
var updateColours = []string{"#000", "#d62728", "#ff7f0e", "#8c564b", "#1f77b4", "#2ca02c", "#9467bd"}

// sweepChart draws episodes/s against sigma, a line per strategy (median
// over seeds, with the min..max as a bar), at one period, load time and k.
func sweepChart(res []updatesim.PointResult, period, load time.Duration, k int) []byte {
	var pts []updatesim.PointResult
	yMax := 0.0
	for _, pr := range res {
		if pr.Point.Period == period && pr.Point.LoadTime == load && pr.Point.MaxUnavailable == k {
			pts = append(pts, pr)
			for _, s := range pr.Strategies {
				yMax = max(yMax, s.EPS.Max)
			}
		}
	}
	yMax *= 1.1
	c := newSVGChart(fmt.Sprintf("Episodes/s against generation sigma: P=%s, L=%s, k=%d (median, min..max of seeds)", period, load, k))
	var xt, yt []float64
	var xl, yl []string
	for i, pr := range pts {
		xt = append(xt, (float64(i)+0.5)/float64(len(pts)))
		xl = append(xl, strconv.FormatFloat(pr.Point.GenSigma, 'g', -1, 64))
	}
	for i := range 6 {
		yt = append(yt, float64(i)/5)
		yl = append(yl, fmt.Sprintf("%.0f", yMax*float64(i)/5))
	}
	c.axes(xt, yt, xl, yl, "generation sigma (log-normal, median 300 ms)", "episodes per second")
	y := func(v float64) float64 { return plotT + plotH*(1-v/yMax) }
	for si, st := range updatesim.Strategies {
		colour := updateColours[si%len(updateColours)]
		var xs, ys []float64
		for i, pr := range pts {
			s := pr.Find(st.Name)
			x := plotL + plotW*xt[i] + float64(si-3)*3
			xs, ys = append(xs, x), append(ys, y(s.EPS.Median))
			c.line(x, y(s.EPS.Min), x, y(s.EPS.Max), `stroke="`+colour+`" stroke-width="1"`)
		}
		c.polyline(xs, ys, colour)
		ly := plotT + 10 + chartLegendRow*float64(si)
		c.line(chartLegendX, ly-4, chartLegendX+20, ly-4, `stroke="`+colour+`" stroke-width="3"`)
		c.text(chartLegendX+26, ly, "start", "", st.Name)
	}
	return c.bytes()
}

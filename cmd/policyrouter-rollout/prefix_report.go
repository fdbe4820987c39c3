package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/policyrouter/policyrouter/internal/benchkit"
)

// medianOf is the median of f over runs.
func medianOf(runs []prefixResult, f func(prefixResult) float64) float64 {
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = f(r)
	}
	return benchkit.Median(xs)
}

// pairedMedian is the median over repetitions of f(a[i], b[i]): a figure
// taken within one repetition, as ratios against the same traffic.
func pairedMedian(a, b []prefixResult, f func(a, b prefixResult) float64) (float64, []float64) {
	n := min(len(a), len(b))
	xs := make([]float64, n)
	for i := range n {
		xs[i] = f(a[i], b[i])
	}
	return benchkit.Median(xs), xs
}

func wallRatio(a, b prefixResult) float64 { return benchkit.Ratio(a.WallS, b.WallS) }
func hitRatio(a, b prefixResult) float64  { return benchkit.Ratio(a.Hit, b.Hit) }
func hitDiff(a, b prefixResult) float64   { return a.Hit - b.Hit }

// fmtAll formats each repetition's figure.
func fmtAll(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, ", ")
}

func yesNo(ok bool) string {
	if ok {
		return "holds"
	}
	return "**fails**"
}

// writePrefixTables prints the report as Markdown tables.
func writePrefixTables(w io.Writer, rep *prefixReport) {
	m := rep.Machine
	fmt.Fprintf(w, "machine: nproc %d, GOMAXPROCS %d, %s, %s, load %s → %s\n", m.NumCPU, m.GOMAXPROCS, m.CPUModel, m.GoVersion, m.LoadStart, m.LoadEnd)
	f := rep.Fleet
	fmt.Fprintf(w, "fleet: %d SGLang stand-ins of capacity %d, KV %d tokens each, prefill %s per uncached token, decode %g tokens/s per request\n\n",
		f.Policies, f.Capacity, f.KVTokens, f.PrefillPerToken, f.TokensPerSecond)
	fmt.Fprintln(w, "| workload | strategy | prefix hit | wall s | cpu s | max/mean requests per policy | groups with ≥ 6 on one policy | peak load / capacity |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, wl := range rep.workloads {
		for _, v := range rep.variants {
			runs := rep.Runs[wl][v]
			if len(runs) == 0 {
				continue
			}
			groups := "–"
			if runs[0].Groups > 0 {
				groups = fmt.Sprintf("%.2f", medianOf(runs, prefixResult.togetherShare))
			}
			peak := int64(0)
			for _, r := range runs {
				peak = max(peak, r.PeakLoad)
			}
			fmt.Fprintf(w, "| %s | %s | %.3f | %.2f | %.2f | %.2f | %s | %d / %d |\n", wl, v,
				medianOf(runs, func(r prefixResult) float64 { return r.Hit }),
				medianOf(runs, func(r prefixResult) float64 { return r.WallS }),
				medianOf(runs, func(r prefixResult) float64 { return r.CPUS }),
				medianOf(runs, func(r prefixResult) float64 { return r.MaxOverMean }), groups, peak, runs[0].Capacity)
		}
	}
	fmt.Fprintln(w)
	if rep.Proxy {
		writeProxyFigures(w, rep)
		return
	}
	fmt.Fprintln(w, "| workload | ours hit − cache_aware hit (≥ −0.02) | ours wall / cache_aware wall (≤ 1.05) | ours wall / least_loaded wall |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, wl := range rep.workloads {
		ours, ca, ll := rep.Runs[wl]["ours"], rep.Runs[wl]["cache_aware"], rep.Runs[wl]["least_loaded"]
		if len(ours) == 0 || len(ca) == 0 {
			continue
		}
		d, ds := pairedMedian(ours, ca, hitDiff)
		r, rs := pairedMedian(ours, ca, wallRatio)
		l, ls := pairedMedian(ours, ll, wallRatio)
		fmt.Fprintf(w, "| %s | %+.3f (%s) %s | %.2f (%s) %s | %.2f (%s) |\n", wl, d, fmtAll(ds), yesNo(d >= -0.02), r, fmtAll(rs), yesNo(r <= 1.05), l, fmtAll(ls))
	}
}

// writeProxyFigures prints the must-hold figures of the proxy runs.
func writeProxyFigures(w io.Writer, rep *prefixReport) {
	fmt.Fprintln(w, "| figure | must hold | median (each repetition) | |")
	fmt.Fprintln(w, "|---|---|---|---|")
	row := func(figure, bound string, v float64, xs []float64, ok bool) {
		fmt.Fprintf(w, "| %s | %s | %.2f (%s) | %s |\n", figure, bound, v, fmtAll(xs), yesNo(ok))
	}
	runs := func(wl, v string) []prefixResult { return rep.Runs[wl][v] }
	if on := runs(wlMultiTurn, "on"); len(on) > 0 {
		v, xs := pairedMedian(on, runs(wlMultiTurn, "session"), hitRatio)
		row("multi-turn, no key: prefix hit / with a session key", "≥ 0.9", v, xs, v >= 0.9)
		v, xs = pairedMedian(on, runs(wlMultiTurn, "off"), wallRatio)
		row("multi-turn, no key: wall / affinity off", "≤ 0.8", v, xs, v <= 0.8)
	}
	if on := runs(wlGRPO, "on"); len(on) > 0 {
		v, xs := pairedMedian(on, on, func(a, _ prefixResult) float64 { return a.togetherShare() })
		row("GRPO n = 8: groups with ≥ 6 samples on one policy", "≥ 0.90", v, xs, v >= 0.9)
		v, xs = pairedMedian(on, on, func(a, _ prefixResult) float64 { return a.Hit })
		row("GRPO n = 8: prefix hit", "≥ 0.75", v, xs, v >= 0.75)
	}
	if on := runs(wlUnique, "on"); len(on) > 0 {
		v, xs := pairedMedian(on, runs(wlUnique, "off"), wallRatio)
		row("prompts sharing nothing: wall / affinity off", "≤ 1.05", v, xs, v <= 1.05)
	}
	if on := runs(wlHotSystem, "on"); len(on) > 0 {
		v, xs := pairedMedian(on, on, func(a, _ prefixResult) float64 { return a.MaxOverMean })
		row("hot system prompt: requests per policy max/mean", "≤ 1.3", v, xs, v <= 1.3)
		v, xs = pairedMedian(on, runs(wlHotSystem, "off"), wallRatio)
		row("hot system prompt: wall / affinity off", "≤ 1.1", v, xs, v <= 1.1)
	}
	peak, capacity := int64(0), 0
	for _, byVariant := range rep.Runs {
		for _, rs := range byVariant {
			for _, r := range rs {
				peak, capacity = max(peak, r.PeakLoad), r.Capacity
			}
		}
	}
	fmt.Fprintf(w, "| no capacity ever exceeded (the fakes' peak load, every run) | ≤ %d | %d | %s |\n", capacity, peak, yesNo(peak <= int64(capacity)))
}

package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/policyrouter/policyrouter/internal/benchkit"
)

// writeTable prints the report: per side the medians over rounds, and the
// per-round ratios' medians against nginx and against the base.
func writeTable(w io.Writer, rep *report) {
	m, c := rep.Machine, rep.Config
	fmt.Fprintf(w, "machine: %d CPUs (%s), %s %s; load average %s at start, %s at end\n",
		m.NumCPU, m.CPUModel, m.GoVersion, m.OSArch, m.LoadStart, m.LoadEnd)
	fmt.Fprintf(w, "run: %d rounds of %s per side after %s warm-up (sides in turn, in reverse order every other round), %d keep-alive connections, "+
		"POST %s, %d policies of capacity %d; %.0fs in all\n",
		c.Rounds, c.Duration, c.Warmup, c.Connections, workloads[c.Workload].path, c.Policies, c.Capacity, rep.Elapsed.Seconds())
	fmt.Fprintf(w, "upstream: %s\n", rep.Upstream)
	if rep.Binary != "" {
		fmt.Fprintf(w, "router: %s\n", rep.Binary)
	}
	if c.BaseBinary != "" {
		fmt.Fprintf(w, "base: %s\n", c.BaseBinary)
	}
	if c.Base2Binary != "" {
		fmt.Fprintf(w, "base2: %s\n", c.Base2Binary)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintln(w, "\nmedians over rounds; CPU is user + system time of the proxy's processes (/proc/PID/stat) over the measured window;")
	fmt.Fprintln(w, "ratios are per round, then the median")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "side\treq/s\tproxy CPU µs/req\tupstream CPU µs/req\tCPU vs nginx\treq/s vs nginx\tCPU vs base\treq/s vs base\tp99 ms\tp99 added ms\tfailed\t")
	nginx, base, direct := findSide(rep, sideNginx), findSide(rep, sideBase), findSide(rep, sideDirect)
	p99 := func(p phase) float64 { return float64(p.P99) / float64(time.Millisecond) }
	for _, s := range rep.Sides {
		cpu := func(p phase) float64 { return p.cpuPerRequest(p.ProxyCPU) }
		tput := func(p phase) float64 { return p.throughput() }
		proxyCPU := "-"
		if s.Name != sideDirect {
			proxyCPU = fmt.Sprintf("%.1f", median(s.Phases, cpu))
		}
		var failed int64
		for _, p := range s.Phases {
			failed += p.Failed
		}
		added := "-" // over the direct side's p99: what the proxy adds
		if direct != nil && s.Name != sideDirect {
			added = fmt.Sprintf("%.2f", median(s.Phases, p99)-median(direct.Phases, p99))
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%.1f\t%s\t%s\t%s\t%s\t%.2f\t%s\t%d\t\n", s.Name,
			median(s.Phases, tput), proxyCPU,
			median(s.Phases, func(p phase) float64 { return p.cpuPerRequest(p.UpstreamCPU) }),
			ratio(s, nginx, cpu, s.Name != sideDirect), ratio(s, nginx, tput, true),
			ratio(s, base, cpu, s.Name != sideDirect), ratio(s, base, tput, true),
			median(s.Phases, p99), added, failed)
	}
	tw.Flush()
	if router := findSide(rep, sideRouter); router != nil && base != nil && len(base.Phases) == len(router.Phases) {
		fmt.Fprint(w, "router CPU vs base, per round:")
		for i := range router.Phases {
			cpu := func(p phase) float64 { return p.cpuPerRequest(p.ProxyCPU) }
			fmt.Fprintf(w, " %.2f", benchkit.Ratio(cpu(router.Phases[i]), cpu(base.Phases[i])))
		}
		fmt.Fprintln(w)
	}
	for _, s := range rep.Sides {
		if s.FirstError != "" {
			fmt.Fprintf(w, "%s: first failure: %s\n", s.Name, s.FirstError)
		}
	}
}

func findSide(rep *report, name string) *sideResult {
	for i := range rep.Sides {
		if rep.Sides[i].Name == name {
			return &rep.Sides[i]
		}
	}
	return nil
}

func median(ps []phase, f func(phase) float64) float64 {
	xs := make([]float64, len(ps))
	for i, p := range ps {
		xs[i] = f(p)
	}
	return benchkit.Median(xs)
}

// ratio is the median over rounds of f(s)/f(of), as text; "-" when of
// did not run or the ratio means nothing (show false).
func ratio(s sideResult, of *sideResult, f func(phase) float64, show bool) string {
	if of == nil || !show || len(of.Phases) != len(s.Phases) {
		return "-"
	}
	xs := make([]float64, len(s.Phases))
	for i := range s.Phases {
		xs[i] = benchkit.Ratio(f(s.Phases[i]), f(of.Phases[i]))
	}
	return fmt.Sprintf("%.2f", benchkit.Median(xs))
}

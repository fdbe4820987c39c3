package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/policyrouter/policyrouter/internal/benchkit"
)

// The aims.
const (
	aimSelectThroughput = 0.80 // router /select throughput at least this share of the floor's
	aimSelectP99        = 1.5  // router /select p99 at most this many times the floor's
)

func writeJSON(w io.Writer, rep *report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// writeTable prints the report for people: the tables -merge prints, over
// this one run, then the aims and the profile.
func writeTable(w io.Writer, rep *report) {
	m := rep.Machine
	fmt.Fprintf(w, "machine: %d CPUs (%s), GOMAXPROCS %d, %s %s; load average %s at start, %s at end\n",
		m.NumCPU, m.CPUModel, m.GOMAXPROCS, m.GoVersion, m.OSArch, m.LoadStart, m.LoadEnd)
	c := rep.Config
	fmt.Fprintf(w, "run: concurrency %d, %d rounds of %gs per side (floor, router alternating), poller every %gms, router logging: %s; %.0fs in all\n\n",
		c.Concurrency, c.Rounds, c.DurationSeconds, c.PollIntervalMS, c.Logging, rep.ElapsedSeconds)
	if len(rep.Workloads) > 0 {
		fmt.Fprintln(w, "HTTP workloads: medians over rounds; ratios are router/floor per round, then the median")
		writeWorkloads(w, []*report{rep})
		for _, r := range rep.Workloads {
			if r.FirstError != "" {
				fmt.Fprintf(w, "  %s: first error: %s\n", r.Name, r.FirstError)
			}
			if r.LeaseGone > 0 {
				fmt.Fprintf(w, "  %s: %d releases found their lease already freed by the poller (op stalled past the 250ms grace)\n", r.Name, r.LeaseGone)
			}
		}
		fmt.Fprintln(w, "\nworkloads:")
		for _, r := range rep.Workloads {
			fmt.Fprintf(w, "  %-22s %s (%d policies, %d requests per op)\n", r.Name, r.Desc, r.Policies, r.Requests)
		}
		fmt.Fprintln(w)
	}
	if s := rep.Seed; s != nil {
		fmt.Fprintln(w, "the seed's algorithms (Python, bench/seed_assign.py) and the Go routing core, same inputs")
		if s.Skipped != "" {
			fmt.Fprintf(w, "  Python side skipped: %s\n", s.Skipped)
		} else {
			fmt.Fprintf(w, "  Python %s\n", s.Python)
		}
		writeSeedCases(w, []*report{rep})
		fmt.Fprintln(w)
	}
	writeAims(w, rep)
	for _, r := range rep.Workloads {
		if p := r.Profile; p != nil {
			fmt.Fprintf(w, "\nCPU profile of %s: %d floor ops, %d router ops (%.0f and %.0f op/s) in %s\n",
				p.Workload, p.Floor.Ops, p.Router.Ops, p.Floor.Throughput, p.Router.Throughput, p.File)
			fmt.Fprintf(w, "  go tool pprof -tags %s   (CPU per side; divide by the ops above for CPU per op)\n", p.File)
			fmt.Fprintf(w, "  go tool pprof -top -nodecount=25 -tagfocus side=%s %s\n", benchkit.SideRouter, p.File)
		}
	}
}

// writeAims says which of the aims the figures meet.
func writeAims(w io.Writer, rep *report) {
	fmt.Fprintln(w, "aims:")
	metOr := func(ok bool) string {
		if ok {
			return "MET"
		}
		return "NOT MET"
	}
	for _, r := range rep.Workloads {
		switch r.Name {
		case wSelectNodeAffinity, wSelectIdleAffinity, wSelectSimple:
			fmt.Fprintf(w, "  %-22s throughput %.2f of the floor's (aim >= %.2f): %s; p99 %.2fx the floor's (aim <= %.1fx): %s\n",
				r.Name, r.ThroughputRatio, aimSelectThroughput, metOr(r.ThroughputRatio >= aimSelectThroughput),
				r.P99Ratio, aimSelectP99, metOr(r.P99Ratio > 0 && r.P99Ratio <= aimSelectP99))
		case wAssignBigStateless, wAssignBigTracked:
			s := r.Server
			fmt.Fprintf(w, "  %-22s server time at concurrency %d (with queueing for CPU and the state lock): decision mean %.3f ms (%.0f%% <= 0.5 ms), handler mean %.3f ms (%.0f%% <= 0.5 ms)\n",
				r.Name, rep.Config.Concurrency, s.DecisionMeanMS, 100*s.DecisionUnderAim, s.HandlerMeanMS, 100*s.HandlerUnderAim)
			if u := r.Unloaded; u != nil {
				s := u.Server
				fmt.Fprintf(w, "  %-22s server time at concurrency 1 (aim < 0.5 ms): routing decision mean %.3f ms (%.0f%% <= 0.5 ms): %s; whole handler mean %.3f ms (%.0f%% <= 0.5 ms): %s\n",
					r.Name, s.DecisionMeanMS, 100*s.DecisionUnderAim, metOr(s.DecisionMeanMS < aimSeconds*1e3),
					s.HandlerMeanMS, 100*s.HandlerUnderAim, metOr(s.HandlerMeanMS < aimSeconds*1e3))
			}
		}
	}
	if rep.Seed != nil {
		for _, c := range rep.Seed.Cases {
			if strings.HasPrefix(c.Name, "state_assign") {
				fmt.Fprintf(w, "  %-52s in-process p50 %.3f ms, p99 %.3f ms (aim < 0.5 ms): %s\n",
					c.Name, c.GoMedianUS/1e3, c.GoP99US/1e3, metOr(c.GoMedianUS < aimSeconds*1e6))
			}
		}
	}
}

// mergeReports prints, per workload and per seed case, the median over
// the given -json reports of each report's medians, with the spread
// (min..max).
func mergeReports(files []string, w io.Writer) error {
	var reps []*report
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		var r report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		reps = append(reps, &r)
	}
	fmt.Fprintf(w, "median of medians over %d runs [min..max]\n", len(reps))
	for i, r := range reps {
		fmt.Fprintf(w, "  run %d: load average %s -> %s, %.0fs\n", i+1, r.Machine.LoadStart, r.Machine.LoadEnd, r.ElapsedSeconds)
	}
	writeWorkloads(w, reps)
	if slices.ContainsFunc(reps, func(r *report) bool { return r.Seed != nil }) {
		fmt.Fprintln(w)
		writeSeedCases(w, reps)
	}
	return nil
}

// writeWorkloads prints one row per workload of reps: each figure is the
// median over the reports, with [min..max] when there are several.
func writeWorkloads(w io.Writer, reps []*report) {
	names, by := groupByName(reps, func(r *report) []workloadResult { return r.Workloads }, func(wl workloadResult) string { return wl.Name })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tthroughput ratio\tp99 ratio\tp50 ratio\tfloor op/s\trouter op/s\tfloor p99 ms\trouter p99 ms\thandler ms/req\tdecision ms\tc=1 handler ms\tc=1 decision ms\terrors\tcut\t")
	for _, name := range names {
		all := by[name]
		col := func(format string, f func(workloadResult) float64) string { return spreadOf(all, format, f) }
		unloaded := func(f func(serverTime) float64) string {
			return col("%.4f", func(r workloadResult) float64 {
				if r.Unloaded == nil {
					return 0
				}
				return f(r.Unloaded.Server)
			})
		}
		errs, cut := 0, 0
		for _, wl := range all {
			errs, cut = errs+wl.FloorErrors+wl.RouterErrors, cut+wl.Cut
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t\n", name,
			col("%.2f", func(r workloadResult) float64 { return r.ThroughputRatio }),
			col("%.2f", func(r workloadResult) float64 { return r.P99Ratio }),
			col("%.2f", func(r workloadResult) float64 { return r.P50Ratio }),
			col("%.0f", func(r workloadResult) float64 { return r.Floor.Throughput }),
			col("%.0f", func(r workloadResult) float64 { return r.Router.Throughput }),
			col("%.2f", func(r workloadResult) float64 { return r.Floor.P99MS }),
			col("%.2f", func(r workloadResult) float64 { return r.Router.P99MS }),
			col("%.4f", func(r workloadResult) float64 { return r.Server.HandlerMeanMS }),
			col("%.4f", func(r workloadResult) float64 { return r.Server.DecisionMeanMS }),
			unloaded(func(s serverTime) float64 { return s.HandlerMeanMS }),
			unloaded(func(s serverTime) float64 { return s.DecisionMeanMS }),
			errs, cut)
	}
	tw.Flush()
}

// writeSeedCases prints one row per seed case of reps, as writeWorkloads.
func writeSeedCases(w io.Writer, reps []*report) {
	names, by := groupByName(reps, func(r *report) []seedCase {
		if r.Seed == nil {
			return nil
		}
		return r.Seed.Cases
	}, func(c seedCase) string { return c.Name })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\tpython median us\tgo median us\tgo p99 us\tpython/go\tsame answer\t")
	for _, name := range names {
		all := by[name]
		same := "-"
		for _, c := range all {
			if c.SameAnswer != nil && same != "false" {
				same = fmt.Sprint(*c.SameAnswer)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", name,
			spreadOf(all, "%.1f", func(c seedCase) float64 { return c.PythonMedianUS }),
			spreadOf(all, "%.2f", func(c seedCase) float64 { return c.GoMedianUS }),
			spreadOf(all, "%.2f", func(c seedCase) float64 { return c.GoP99US }),
			spreadOf(all, "%.0f", func(c seedCase) float64 { return c.Speedup }),
			same)
	}
	tw.Flush()
}

// groupByName collects the items of every report by name, names in order
// of first appearance.
func groupByName[T any](reps []*report, items func(*report) []T, name func(T) string) ([]string, map[string][]T) {
	var names []string
	by := make(map[string][]T)
	for _, r := range reps {
		for _, it := range items(r) {
			n := name(it)
			if _, ok := by[n]; !ok {
				names = append(names, n)
			}
			by[n] = append(by[n], it)
		}
	}
	return names, by
}

// spreadOf renders the median of f over items, with [min..max] when there
// are several; non-positive values are missing, and "-" stands for none.
func spreadOf[T any](items []T, format string, f func(T) float64) string {
	var xs []float64
	for _, it := range items {
		if v := f(it); v > 0 {
			xs = append(xs, v)
		}
	}
	switch len(xs) {
	case 0:
		return "-"
	case 1:
		return fmt.Sprintf(format, xs[0])
	}
	return fmt.Sprintf(format+" ["+format+".."+format+"]", benchkit.Median(xs), slices.Min(xs), slices.Max(xs))
}

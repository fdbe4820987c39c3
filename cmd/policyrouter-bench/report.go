package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
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

// writeTable prints the report for people.
func writeTable(w io.Writer, rep *report) {
	m := rep.Machine
	fmt.Fprintf(w, "machine: %d CPUs (%s), GOMAXPROCS %d, %s %s; load average %s at start, %s at end\n",
		m.NumCPU, m.CPUModel, m.GOMAXPROCS, m.GoVersion, m.OSArch, m.LoadStart, m.LoadEnd)
	c := rep.Config
	fmt.Fprintf(w, "run: concurrency %d, %d rounds of %gs per side (floor, router alternating), poller every %gms, router logging: %s; %.0fs in all\n\n",
		c.Concurrency, c.Rounds, c.DurationSeconds, c.PollIntervalMS, c.Logging, rep.ElapsedSeconds)

	if len(rep.Workloads) > 0 {
		fmt.Fprintln(w, "HTTP workloads: medians over rounds; ratios are router/floor per round, then the median")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "workload\tpolicies\treq/op\tfloor op/s\trouter op/s\tthroughput ratio\tfloor p50/p99 ms\trouter p50/p99 ms\tp99 ratio\thandler ms/req\tdecision ms\tprobes/s\terrors\tcut\t")
		for _, r := range rep.Workloads {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%.2f\t%.3f / %.3f\t%.3f / %.3f\t%.2f\t%.4f\t%.4f\t%.0f\t%d/%d\t%d\t\n",
				r.Name, r.Policies, r.Requests, r.Floor.Throughput, r.Router.Throughput, r.ThroughputRatio,
				r.Floor.P50MS, r.Floor.P99MS, r.Router.P50MS, r.Router.P99MS, r.P99Ratio,
				r.Server.HandlerMeanMS, r.Server.DecisionMeanMS, r.Server.ProbesPerSecond, r.FloorErrors, r.RouterErrors, r.Cut)
		}
		tw.Flush()
		for _, r := range rep.Workloads {
			if r.FirstError != "" {
				fmt.Fprintf(w, "  %s: first error: %s\n", r.Name, r.FirstError)
			}
			if r.LeaseGone > 0 {
				fmt.Fprintf(w, "  %s: %d releases found their lease already freed by the poller (op stalled past the 250ms grace)\n", r.Name, r.LeaseGone)
			}
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "workloads:")
		for _, r := range rep.Workloads {
			fmt.Fprintf(w, "  %-22s %s\n", r.Name, r.Desc)
		}
		fmt.Fprintln(w)
	}

	if rep.Seed != nil {
		writeSeed(w, rep.Seed)
		fmt.Fprintln(w)
	}
	writeAims(w, rep)
	for _, r := range rep.Workloads {
		if p := r.Profile; p != nil {
			fmt.Fprintf(w, "\nCPU profile of %s: %d floor ops, %d router ops (%.0f and %.0f op/s) in %s\n",
				p.Workload, p.Floor.Ops, p.Router.Ops, p.Floor.Throughput, p.Router.Throughput, p.File)
			fmt.Fprintf(w, "  go tool pprof -tags %s   (CPU per side; divide by the ops above for CPU per op)\n", p.File)
			fmt.Fprintf(w, "  go tool pprof -top -nodecount=25 -tagfocus side=%s %s\n", sideRouter, p.File)
		}
	}
}

func writeSeed(w io.Writer, s *seedResult) {
	fmt.Fprintln(w, "the seed's algorithms (Python, bench/seed_assign.py) and the Go routing core, same inputs")
	if s.Skipped != "" {
		fmt.Fprintf(w, "  Python side skipped: %s\n", s.Skipped)
	} else {
		fmt.Fprintf(w, "  Python %s\n", s.Python)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\tpython median us\tgo median us\tgo p99 us\tpython/go\tsame answer\t")
	for _, c := range s.Cases {
		py, sp, same := "-", "-", "-"
		if c.PythonReps > 0 {
			py = fmt.Sprintf("%.1f", c.PythonMedianUS)
			sp = fmt.Sprintf("%.0fx", c.Speedup)
		}
		if c.SameAnswer != nil {
			same = fmt.Sprint(*c.SameAnswer)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%s\t%s\t\n", c.Name, py, c.GoMedianUS, c.GoP99US, sp, same)
	}
	tw.Flush()
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
	var names []string
	for _, r := range reps {
		for _, wl := range r.Workloads {
			if !slices.Contains(names, wl.Name) {
				names = append(names, wl.Name)
			}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tthroughput ratio\tp99 ratio\tp50 ratio\tfloor op/s\trouter op/s\tfloor p99 ms\trouter p99 ms\thandler ms/req\tdecision ms\tc=1 handler ms\tc=1 decision ms\terrors\t")
	for _, name := range names {
		var all []workloadResult
		for _, r := range reps {
			for _, wl := range r.Workloads {
				if wl.Name == name {
					all = append(all, wl)
				}
			}
		}
		col := func(format string, f func(workloadResult) float64) string {
			var xs []float64
			for _, wl := range all {
				xs = append(xs, f(wl))
			}
			return spread(format, xs)
		}
		unloaded := func(f func(serverTime) float64) string {
			var xs []float64
			for _, wl := range all {
				if wl.Unloaded != nil {
					xs = append(xs, f(wl.Unloaded.Server))
				}
			}
			if len(xs) == 0 {
				return "-"
			}
			return spread("%.4f", xs)
		}
		errs := 0
		for _, wl := range all {
			errs += wl.FloorErrors + wl.RouterErrors
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", name,
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
			errs)
	}
	tw.Flush()

	var cases []string
	for _, r := range reps {
		if r.Seed == nil {
			continue
		}
		for _, c := range r.Seed.Cases {
			if !slices.Contains(cases, c.Name) {
				cases = append(cases, c.Name)
			}
		}
	}
	if len(cases) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\tpython median us\tgo median us\tgo p99 us\tpython/go\tsame answer\t")
	for _, name := range cases {
		var all []seedCase
		for _, r := range reps {
			if r.Seed == nil {
				continue
			}
			for _, c := range r.Seed.Cases {
				if c.Name == name {
					all = append(all, c)
				}
			}
		}
		col := func(format string, f func(seedCase) float64) string {
			var xs []float64
			for _, c := range all {
				if v := f(c); v > 0 {
					xs = append(xs, v)
				}
			}
			if len(xs) == 0 {
				return "-"
			}
			return spread(format, xs)
		}
		same := "-"
		for _, c := range all {
			if c.SameAnswer != nil {
				if same == "-" || same == "true" {
					same = fmt.Sprint(*c.SameAnswer)
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", name,
			col("%.1f", func(c seedCase) float64 { return c.PythonMedianUS }),
			col("%.2f", func(c seedCase) float64 { return c.GoMedianUS }),
			col("%.2f", func(c seedCase) float64 { return c.GoP99US }),
			col("%.0f", func(c seedCase) float64 { return c.Speedup }),
			same)
	}
	tw.Flush()
	return nil
}

// spread renders the median of xs and its range.
func spread(format string, xs []float64) string {
	lo, hi := slices.Min(xs), slices.Max(xs)
	return fmt.Sprintf(format+" ["+format+".."+format+"]", median(xs), lo, hi)
}

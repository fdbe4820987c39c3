package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/policyrouter/policyrouter/client"
	"github.com/policyrouter/policyrouter/internal/benchkit"
)

// report is everything one run measured.
type report struct {
	Machine        benchkit.Machine `json:"machine"`
	Config         reportConfig     `json:"config"`
	Workloads      []workloadResult `json:"workloads"`
	Seed           *seedResult      `json:"seed,omitempty"`
	ElapsedSeconds float64          `json:"elapsed_seconds"`
}

// reportConfig is the part of the configuration the figures depend on.
type reportConfig struct {
	DurationSeconds float64 `json:"duration_seconds"`
	Rounds          int     `json:"rounds"`
	Concurrency     int     `json:"concurrency"`
	PollIntervalMS  float64 `json:"poll_interval_ms"`
	LogLevel        string  `json:"log_level"`
	Logging         string  `json:"logging"`
}

// round is one floor phase and the router phase after it.
type round struct {
	Floor  phase      `json:"floor"`
	Router phase      `json:"router"`
	Server serverTime `json:"server"`
}

// sideSummary holds medians over rounds of one side's figures.
type sideSummary struct {
	Throughput float64 `json:"throughput"`
	P50MS      float64 `json:"p50_ms"`
	P99MS      float64 `json:"p99_ms"`
}

// workloadResult is one workload's rounds and their medians.
type workloadResult struct {
	Name     string  `json:"name"`
	Desc     string  `json:"description"`
	Policies int     `json:"policies"`
	Nodes    int     `json:"nodes"`
	Requests int     `json:"requests_per_op"`
	Rounds   []round `json:"rounds"`

	Floor  sideSummary `json:"floor"`
	Router sideSummary `json:"router"`
	// The ratios are router/floor, per round, then the median over rounds.
	ThroughputRatio float64 `json:"throughput_ratio"`
	P50Ratio        float64 `json:"p50_ratio"`
	P99Ratio        float64 `json:"p99_ratio"`
	// Server holds medians over rounds of the router's own timings.
	Server serverTime `json:"server"`

	// Profile is the run -profile-select recorded, when it was this
	// workload.
	Profile *profileRun `json:"profile,omitempty"`
	// Unloaded is the router alone at concurrency 1, where the server
	// time is service time without queueing (big /assign workloads only).
	Unloaded *unloadedRun `json:"unloaded,omitempty"`

	FloorErrors  int `json:"floor_errors"`
	RouterErrors int `json:"router_errors"`
	// Cut counts operations of both sides cancelled at the end of a phase.
	Cut int `json:"cut"`
	// LeaseGone counts router select+release operations whose lease the
	// poller freed before the release.
	LeaseGone  int    `json:"lease_gone"`
	FirstError string `json:"first_error,omitempty"`
}

// unloadedRun is one router phase at concurrency 1.
type unloadedRun struct {
	Router phase      `json:"router"`
	Server serverTime `json:"server"`
}

// runHarness runs every workload of cfg and returns the report; progress
// goes to progress.
func runHarness(ctx context.Context, cfg config, progress io.Writer) (*report, error) {
	start := time.Now()
	rep := &report{
		Machine: benchkit.ReadMachine(),
		Config: reportConfig{
			DurationSeconds: cfg.Duration.Seconds(),
			Rounds:          cfg.Rounds,
			Concurrency:     cfg.Concurrency,
			PollIntervalMS:  benchkit.MS(cfg.PollInterval),
			LogLevel:        cfg.LogLevel,
			Logging:         "slog JSON handler to io.Discard at level " + cfg.LogLevel,
		},
	}
	httpWorkloads := slices.DeleteFunc(slices.Clone(cfg.Workloads), func(w string) bool { return w == wSeed })
	fmt.Fprintf(progress, "policyrouter-bench: %d workloads x %d rounds x 2 sides x %s (about %s), concurrency %d\n",
		len(httpWorkloads), cfg.Rounds, cfg.Duration,
		(time.Duration(len(httpWorkloads)*cfg.Rounds*2) * cfg.Duration).Round(time.Second), cfg.Concurrency)

	hc := benchkit.NewClient(cfg.Concurrency)
	defer hc.CloseIdleConnections()
	for _, name := range httpWorkloads {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		w := newWorkload(name, cfg)
		res, err := runWorkload(ctx, cfg, w, hc, progress)
		hc.CloseIdleConnections()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		rep.Workloads = append(rep.Workloads, res)
	}
	if slices.Contains(cfg.Workloads, wSeed) {
		fmt.Fprintln(progress, "seed: timing the seed's algorithms in Python and the Go routing core")
		seed, err := runSeed(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("seed: %w", err)
		}
		rep.Seed = seed
	}
	rep.Machine.LoadEnd = benchkit.LoadAvg()
	rep.ElapsedSeconds = time.Since(start).Seconds()
	return rep, nil
}

// runWorkload starts a floor and a router for w and runs the rounds.
func runWorkload(ctx context.Context, cfg config, w workload, hc *http.Client, progress io.Writer) (res workloadResult, err error) {
	res = workloadResult{Name: w.Name, Desc: w.Desc, Policies: w.Policies, Nodes: w.Nodes, Requests: w.Requests}
	floor, err := startFloor(w.Policies, w.Nodes)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, floor.Close()) }()
	fl := client.New(floor.URL, hc)
	rt, err := benchkit.Start(ctx, benchkit.Config{Policies: w.Policies, Nodes: w.Nodes, PollInterval: cfg.PollInterval, LogLevel: cfg.LogLevel}, hc)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, rt.Close()) }()
	polling := cfg.PollInterval > 0

	// Warm both up (connections, pools, caches); not measured.
	sides(ctx, fl, rt, w.op, polling, cfg.Concurrency, min(max(cfg.Duration/60, 20*time.Millisecond), 50*time.Millisecond))
	for r := range cfg.Rounds {
		var rd round
		// The floor side leaves the router's histograms as they are.
		before, err := sampleServer(rt, w.Endpoint)
		if err != nil {
			return res, err
		}
		rd.Floor, rd.Router = sides(ctx, fl, rt, w.op, polling, cfg.Concurrency, cfg.Duration)
		after, err := sampleServer(rt, w.Endpoint)
		if err != nil {
			return res, err
		}
		rd.Server = newServerTime(before, after, rd.Router.Seconds)
		if err := ctx.Err(); err != nil {
			return res, err
		}
		res.Rounds = append(res.Rounds, rd)
		fmt.Fprintf(progress, "  %-22s round %d/%d: floor %8.0f op/s p99 %6.2f ms | router %8.0f op/s p99 %6.2f ms | errors %d/%d\n",
			w.Name, r+1, cfg.Rounds, rd.Floor.Throughput, rd.Floor.P99MS, rd.Router.Throughput, rd.Router.P99MS,
			rd.Floor.Errors, rd.Router.Errors)
	}
	summarize(&res)

	if w.Unloaded {
		d := min(cfg.Duration/6, 500*time.Millisecond)
		before, err := sampleServer(rt, w.Endpoint)
		if err != nil {
			return res, err
		}
		p := drive(ctx, rt.API, w.op, 1, d)
		after, err := sampleServer(rt, w.Endpoint)
		if err != nil {
			return res, err
		}
		res.Unloaded = &unloadedRun{Router: p, Server: newServerTime(before, after, p.Seconds)}
		res.RouterErrors += p.Errors
		if res.FirstError == "" {
			res.FirstError = p.FirstError
		}
		fmt.Fprintf(progress, "  %-22s router alone at concurrency 1: %.0f op/s, handler mean %.3f ms, decision mean %.3f ms\n",
			w.Name, p.Throughput, res.Unloaded.Server.HandlerMeanMS, res.Unloaded.Server.DecisionMeanMS)
	}

	if cfg.ProfileSelect != "" && w.Name == cfg.ProfileWorkload {
		fmt.Fprintf(progress, "  %-22s profiling a floor and a router phase of %s each into %s\n", w.Name, cfg.Duration, cfg.ProfileSelect)
		pr, err := profile(ctx, cfg, w, fl, rt)
		if err != nil {
			return res, fmt.Errorf("profile: %w", err)
		}
		res.Profile = pr
	}
	return res, nil
}

// profileRun is what -profile-select measured under the profile.
type profileRun struct {
	File     string `json:"file"`
	Workload string `json:"workload"`
	Floor    phase  `json:"floor"`
	Router   phase  `json:"router"`
}

// profile runs one more floor phase and router phase of w, each for
// cfg.Duration, under one CPU profile of the whole process. The "side"
// labels tell the router's serving from the floor's, the client's, the
// poller's and the fleet's, so that CPU per operation can be compared:
// samples of side=router over Router.Ops against side=floor over Floor.Ops.
func profile(ctx context.Context, cfg config, w workload, floor *client.Client, rt *benchkit.Router) (*profileRun, error) {
	f, err := os.Create(cfg.ProfileSelect)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	pr := &profileRun{File: cfg.ProfileSelect, Workload: w.Name}
	pr.Floor, pr.Router = sides(ctx, floor, rt, w.op, cfg.PollInterval > 0, cfg.Concurrency, cfg.Duration)
	pprof.StopCPUProfile()
	if err := f.Close(); err != nil {
		return nil, err
	}
	if n := pr.Floor.Errors + pr.Router.Errors; n > 0 {
		return nil, fmt.Errorf("%d errors while profiling, first: %s%s", n, pr.Floor.FirstError, pr.Router.FirstError)
	}
	return pr, nil
}

// sides drives the floor, then the router, for d each. The poller is part
// of the router: it runs (when polling) only while the router side does.
func sides(ctx context.Context, floor *client.Client, rt *benchkit.Router, op opFunc, polling bool, concurrency int, d time.Duration) (phase, phase) {
	rt.StopPolling()
	f := drive(ctx, floor, op, concurrency, d)
	if polling {
		rt.StartPolling()
	}
	return f, drive(ctx, rt.API, op, concurrency, d)
}

// summarize fills the medians of res from its rounds.
func summarize(res *workloadResult) {
	pick := func(f func(round) float64) float64 {
		var xs []float64
		for _, r := range res.Rounds {
			xs = append(xs, f(r))
		}
		return benchkit.Median(xs)
	}
	res.Floor = sideSummary{
		Throughput: pick(func(r round) float64 { return r.Floor.Throughput }),
		P50MS:      pick(func(r round) float64 { return r.Floor.P50MS }),
		P99MS:      pick(func(r round) float64 { return r.Floor.P99MS }),
	}
	res.Router = sideSummary{
		Throughput: pick(func(r round) float64 { return r.Router.Throughput }),
		P50MS:      pick(func(r round) float64 { return r.Router.P50MS }),
		P99MS:      pick(func(r round) float64 { return r.Router.P99MS }),
	}
	res.ThroughputRatio = pick(func(r round) float64 { return benchkit.Ratio(r.Router.Throughput, r.Floor.Throughput) })
	res.P50Ratio = pick(func(r round) float64 { return benchkit.Ratio(r.Router.P50MS, r.Floor.P50MS) })
	res.P99Ratio = pick(func(r round) float64 { return benchkit.Ratio(r.Router.P99MS, r.Floor.P99MS) })
	res.Server = serverTime{
		HandlerMeanMS:    pick(func(r round) float64 { return r.Server.HandlerMeanMS }),
		HandlerUnderAim:  pick(func(r round) float64 { return r.Server.HandlerUnderAim }),
		DecisionMeanMS:   pick(func(r round) float64 { return r.Server.DecisionMeanMS }),
		DecisionUnderAim: pick(func(r round) float64 { return r.Server.DecisionUnderAim }),
		ProbesPerSecond:  pick(func(r round) float64 { return r.Server.ProbesPerSecond }),
	}
	for _, r := range res.Rounds {
		res.FloorErrors += r.Floor.Errors
		res.RouterErrors += r.Router.Errors
		res.Cut += r.Floor.Cut + r.Router.Cut
		res.LeaseGone += r.Router.LeaseGone
		for _, e := range []string{r.Floor.FirstError, r.Router.FirstError} {
			if res.FirstError == "" && e != "" {
				res.FirstError = e
			}
		}
	}
}

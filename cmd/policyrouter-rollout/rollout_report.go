package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/internal/benchkit"
)

// rolloutReport is the outcome of a rollout run, as printed with -json.
type rolloutReport struct {
	Workload rolloutWorkload `json:"workload"`
	Loads    []rolloutLoad   `json:"loads"`
	Aims     []rolloutAim    `json:"aims"`
}

// rolloutWorkload echoes the flags that define the workload.
type rolloutWorkload struct {
	Envs          int     `json:"envs"`
	Turns         int     `json:"turns"`
	Policies      int     `json:"policies"`
	Nodes         int     `json:"nodes"`
	GenMedianMS   float64 `json:"gen_median_ms"`
	GenSigma      float64 `json:"gen_sigma"`
	GenMeanMS     float64 `json:"gen_mean_ms"`
	EnvSigma      float64 `json:"env_sigma"`
	CrossNodeMS   float64 `json:"cross_node_ms"`
	Cache         int     `json:"cache"`
	Speedup       float64 `json:"speedup"`
	StickyWaitMS  float64 `json:"sticky_wait_ms"`
	LoadFactor    float64 `json:"load_factor"`
	DurationS     float64 `json:"duration_s"`
	Episodes      int     `json:"episodes,omitempty"`
	Seed          uint64  `json:"seed"`
	BestHitRate   float64 `json:"best_hit_rate"`
	UpdateEveryMS float64 `json:"update_every_ms"`
	UpdateTimeMS  float64 `json:"update_time_ms"`
	UpdateRolling int     `json:"update_rolling"`
	Updates       int     `json:"updates,omitempty"`
}

// rolloutLoad is every strategy at one offered load.
type rolloutLoad struct {
	// Load is the offered load as a fraction of capacity.
	Load float64 `json:"load"`
	// EnvStepMS is the mean env step that offers it.
	EnvStepMS float64 `json:"env_step_ms"`
	// OracleEPS is the oracle scheduler's episodes per second.
	OracleEPS float64 `json:"oracle_episodes_per_second"`
	// UtilBound is min(1, load), the bound at the nominal (uncached)
	// generation time; each strategy's own bound uses its measured one.
	UtilBound  float64           `json:"utilisation_bound"`
	Strategies []*strategyResult `json:"strategies"`
}

// strategyResult is one strategy's figures at one load.
type strategyResult struct {
	Strategy string `json:"strategy"`
	Router   string `json:"router"`
	Sessions bool   `json:"sessions"`
	// Update is the update strategy (updatesim.Strategies), or "".
	Update string `json:"update,omitempty"`
	// Updates is what the updates did, live and in the model.
	Updates *updateReport `json:"updates,omitempty"`
	// Seconds is the run's length: -duration, or with -episodes the time
	// until the last episode ended; under updates, the measured window.
	Seconds float64 `json:"seconds"`
	// Episodes ended within Seconds; Turns counts every turn run, those
	// in flight at the end included.
	Episodes int `json:"episodes"`
	Turns    int `json:"turns"`
	// EpisodesPerSecond is the turns ended within Seconds over T, per
	// second: episode-equivalents, so that the episodes cut by the end of
	// the run count for the turns they ran and the edge does not bias the
	// rate (whole episodes end at once at the start of a run).
	EpisodesPerSecond float64 `json:"episodes_per_second"`
	// EpisodesRatio is EpisodesPerSecond over the oracle's.
	EpisodesRatio float64 `json:"episodes_ratio"`
	// Utilisation is the policies' busy time over policies x Seconds, from
	// their own accounting.
	Utilisation float64 `json:"utilisation"`
	// UtilBound is min(1, offered / capacity) with the offered load at this
	// strategy's mean generation time (cache hits make turns shorter).
	UtilBound float64 `json:"utilisation_bound"`
	UtilRatio float64 `json:"utilisation_ratio"`
	// WaitP50MS and WaitP99MS: an env worker's wait in a turn, its wall
	// time from /select to the end of /release less the generation's own
	// time on the policy (queueing, waiting for an idle policy, cross-node
	// latency, HTTP).
	WaitP50MS float64 `json:"wait_p50_ms"`
	WaitP99MS float64 `json:"wait_p99_ms"`
	// HitRate is the fraction of turns that found their episode's prefix
	// cached; HitRatio is it over the best possible, (T-1)/T.
	HitRate  float64 `json:"hit_rate"`
	HitRatio float64 `json:"hit_ratio"`
	// CrossNode is the fraction of turns sent to another node.
	CrossNode        float64         `json:"cross_node_fraction"`
	MeanGenerationMS float64         `json:"mean_generation_ms"`
	Sticky           api.StickyStats `json:"sticky"`
	// UtilisationSeries is the utilisation of each -sample interval.
	UtilisationSeries []float64 `json:"utilisation_series"`

	waits           []time.Duration // sorted
	hits, cross     int
	turnsByDeadline int
}

// score derives the rates and the ratios to the best possible at the given
// offered load.
func (r *strategyResult) score(cfg rolloutConfig, load, oracleEPS float64) {
	r.EpisodesPerSecond = float64(r.turnsByDeadline) / float64(cfg.Turns) / r.Seconds
	r.EpisodesRatio = benchkit.Ratio(r.EpisodesPerSecond, oracleEPS)
	if r.Turns > 0 {
		r.HitRate = float64(r.hits) / float64(r.Turns)
		r.CrossNode = float64(r.cross) / float64(r.Turns)
	}
	r.HitRatio = benchkit.Ratio(r.HitRate, cfg.bestHitRate())
	r.WaitP50MS = benchkit.MS(benchkit.Percentile(r.waits, 0.50))
	r.WaitP99MS = benchkit.MS(benchkit.Percentile(r.waits, 0.99))
	r.UtilBound = 1
	if g := r.MeanGenerationMS / 1000; g > 0 {
		s := cfg.envStepMean(load).Seconds()
		r.UtilBound = min(1, float64(cfg.Envs)*g/((s+g)*float64(cfg.Policies)))
	}
	r.UtilRatio = benchkit.Ratio(r.Utilisation, r.UtilBound)
}

func newRolloutReport(cfg rolloutConfig) *rolloutReport {
	return &rolloutReport{Workload: rolloutWorkload{
		Envs: cfg.Envs, Turns: cfg.Turns, Policies: cfg.Policies, Nodes: cfg.Nodes,
		GenMedianMS: benchkit.MS(cfg.GenMedian), GenSigma: cfg.GenSigma, GenMeanMS: benchkit.MS(cfg.meanGeneration()),
		EnvSigma: cfg.EnvSigma, CrossNodeMS: benchkit.MS(cfg.CrossNode), Cache: cfg.Cache, Speedup: cfg.Speedup,
		StickyWaitMS: benchkit.MS(cfg.StickyWait), LoadFactor: cfg.LoadFactor, DurationS: cfg.Duration.Seconds(), Episodes: cfg.Episodes, Seed: cfg.Seed,
		BestHitRate: cfg.bestHitRate(), UpdateEveryMS: benchkit.MS(cfg.UpdateEvery), UpdateTimeMS: benchkit.MS(cfg.UpdateTime), UpdateRolling: cfg.UpdateRolling,
		Updates: cfg.Updates,
	}}
}

// rolloutAim is one of the aims the simulator reports against.
type rolloutAim struct {
	Aim string `json:"aim"`
	// Met is null when the run cannot tell (the aim's load or strategies
	// were not run, or the feature does not exist yet).
	Met    *bool  `json:"met"`
	Detail string `json:"detail"`
}

// Thresholds of the aims.
const (
	aimUtilRatio   = 0.95 // of the bound, at offered load >= capacity
	aimWaitFactor  = 1.2  // idle_affinity's p99 wait over FIFO's
	aimStickyRatio = 0.9  // sticky hit rate at 80% load
	aimStickyLoad  = 0.8
)

// judgeAims checks the run against the aims.
func judgeAims(cfg rolloutConfig, loads []rolloutLoad) []rolloutAim {
	find := func(lr rolloutLoad, name string) *strategyResult {
		for _, r := range lr.Strategies {
			if r.Strategy == name {
				return r
			}
		}
		return nil
	}
	yes, no := true, false
	verdict := func(ok bool) *bool {
		if ok {
			return &yes
		}
		return &no
	}

	util := rolloutAim{Aim: fmt.Sprintf("utilisation >= %g of the bound at offered load >= capacity", aimUtilRatio)}
	var parts []string
	allOK, judged := true, false
	for _, lr := range loads {
		if lr.Load < 1 {
			continue
		}
		for _, r := range lr.Strategies {
			judged = true
			ok := r.UtilRatio >= aimUtilRatio
			allOK = allOK && ok
			parts = append(parts, fmt.Sprintf("%s %.3f at load %g (%s)", r.Strategy, r.UtilRatio, lr.Load, metWord(ok)))
		}
	}
	if judged {
		util.Met = verdict(allOK)
		util.Detail = strings.Join(parts, "; ")
	} else {
		util.Detail = "no load >= 1 in -loads"
	}

	wait := rolloutAim{Aim: fmt.Sprintf("idle_affinity env wait p99 <= %gx the FIFO deque's", aimWaitFactor)}
	parts, allOK, judged = nil, true, false
	for _, lr := range loads {
		ia, fifo := find(lr, "idle_affinity"), find(lr, "fifo")
		if ia == nil || fifo == nil {
			continue
		}
		judged = true
		ok := ia.WaitP99MS <= aimWaitFactor*fifo.WaitP99MS
		allOK = allOK && ok
		parts = append(parts, fmt.Sprintf("load %g: %.1f ms vs %.1f ms, %.2fx (%s)", lr.Load, ia.WaitP99MS, fifo.WaitP99MS, benchkit.Ratio(ia.WaitP99MS, fifo.WaitP99MS), metWord(ok)))
	}
	if judged {
		wait.Met = verdict(allOK)
		wait.Detail = strings.Join(parts, "; ")
	} else {
		wait.Detail = "needs the idle_affinity and fifo strategies"
	}

	sticky := rolloutAim{Aim: fmt.Sprintf("sticky hit rate >= %g at %g%% load (prefix hits over the turns that can hit, (T-1)/T of all)", aimStickyRatio, 100*aimStickyLoad)}
	sticky.Detail = fmt.Sprintf("needs load %g and the idle_affinity+session strategy, with -cache > 0", aimStickyLoad)
	for _, lr := range loads {
		if r := find(lr, "idle_affinity+session"); r != nil && math.Abs(lr.Load-aimStickyLoad) < 1e-9 && cfg.Cache > 0 {
			ok := r.HitRatio >= aimStickyRatio
			sticky.Met = verdict(ok)
			sticky.Detail = fmt.Sprintf("%.3f (hit rate %.3f of all turns; router sticky hits %d, misses %d, spills %d) (%s)",
				r.HitRatio, r.HitRate, r.Sticky.Hits, r.Sticky.Misses, r.Sticky.Spills, metWord(ok))
		}
	}

	return []rolloutAim{util, wait, sticky}
}

func metWord(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// writeRolloutTable prints the report as tables, one per load, then the
// aims.
func writeRolloutTable(w io.Writer, rep *rolloutReport) {
	wl := rep.Workload
	length := fmt.Sprintf("%gs per strategy", wl.DurationS)
	if wl.Episodes > 0 {
		length = fmt.Sprintf("%d episodes per env worker (at most %gs)", wl.Episodes, wl.DurationS)
	}
	fmt.Fprintf(w, "rollout: %d env workers x %d-turn episodes, %d serial policies on %d nodes; generation log-normal median %g ms sigma %g (mean %.1f ms); prefix cache %d episodes, %gx; cross-node +%g ms; %s; seed %d\n",
		wl.Envs, wl.Turns, wl.Policies, wl.Nodes, wl.GenMedianMS, wl.GenSigma, wl.GenMeanMS, wl.Cache, wl.Speedup, wl.CrossNodeMS, length, wl.Seed)
	for _, lr := range rep.Loads {
		fmt.Fprintf(w, "\noffered load %g of capacity (mean env step %.1f ms); oracle %.2f episodes/s\n", lr.Load, lr.EnvStepMS, lr.OracleEPS)
		fmt.Fprintf(w, "  %-32s %9s %7s %7s %7s %7s %10s %10s %8s %8s %8s %7s %7s", "strategy", "episodes", "eps/s", "÷oracle",
			"util", "÷bound", "wait p50", "wait p99", "hits", "÷best", "cross", "gen ms", "run s")
		fmt.Fprintln(w)
		for _, r := range lr.Strategies {
			fmt.Fprintf(w, "  %-32s %9d %7.2f %7.3f %7.3f %7.3f %8.1fms %8.1fms %7.1f%% %8.3f %7.1f%% %7.1f %7.2f",
				r.Strategy, r.Episodes, r.EpisodesPerSecond, r.EpisodesRatio, r.Utilisation, r.UtilRatio,
				r.WaitP50MS, r.WaitP99MS, 100*r.HitRate, r.HitRatio, 100*r.CrossNode, r.MeanGenerationMS, r.Seconds)
			fmt.Fprintln(w)
		}
		if wl.UpdateEveryMS > 0 {
			writeUpdateTable(w, lr.Strategies)
		}
	}
	fmt.Fprintln(w, "\naims:")
	for _, a := range rep.Aims {
		state := "n/a"
		if a.Met != nil {
			state = metWord(*a.Met)
		}
		fmt.Fprintf(w, "  [%s] %s: %s\n", state, a.Aim, a.Detail)
	}
}

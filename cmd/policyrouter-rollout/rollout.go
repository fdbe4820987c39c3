package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/policyrouter/policyrouter/internal/benchkit"
	"github.com/policyrouter/policyrouter/internal/updatesim"
)

// rolloutConfig is everything the rollout flags set.
type rolloutConfig struct {
	Envs       int
	Turns      int
	Policies   int
	Nodes      int
	GenMedian  time.Duration
	GenSigma   float64
	EnvSigma   float64
	Loads      []float64
	CrossNode  time.Duration
	Cache      int
	Speedup    float64
	StickyWait time.Duration
	LoadFactor float64
	Duration   time.Duration
	// Episodes, when positive, is how many episodes each env worker runs
	// before it stops; the run then ends when the last has (Duration
	// bounds it still). Zero runs episodes back to back for Duration.
	Episodes int
	Sample   time.Duration
	Seed     uint64
	// UpdateEvery, when positive, is the update period: after one period
	// of warm-up, Updates updates start one period apart, and each
	// strategy runs once per update strategy of UpdateStrategies (names of
	// updatesim.Strategies). UpdateTime is how long a policy takes to load
	// weights; UpdateRolling is k, the max_unavailable of rolling updates.
	UpdateEvery      time.Duration
	Updates          int
	UpdateStrategies []string
	UpdateTime       time.Duration
	UpdateRolling    int
	Strategies       []string
	JSON             bool
	Charts           string
	PollInterval     time.Duration
	LogLevel         string
	// Sweep runs the weight-update sweep of internal/updatesim with this
	// many seeds instead of the live run; 0 runs the live run.
	Sweep int
}

// strategy is one routing strategy of the comparison.
type strategy struct {
	Name     string // the name in reports
	Router   string // the /select router
	Sessions bool   // session_id = the episode
	// Update is the update strategy (updatesim.Strategies) when
	// -update-every is set; "" otherwise.
	Update string
}

// strategies are the routing strategies a run compares, in report order.
var strategies = []strategy{
	{Name: "round_robin", Router: "node_affinity"},
	{Name: "fifo", Router: "simple"},
	{Name: "idle_affinity", Router: "idle_affinity"},
	{Name: "idle_affinity+session", Router: "idle_affinity", Sessions: true},
}

// strategyNames lists the strategies' report names.
func strategyNames() []string {
	out := make([]string, len(strategies))
	for i, s := range strategies {
		out[i] = s.Name
	}
	return out
}

// parseRolloutConfig parses the flags.
func parseRolloutConfig(args []string, stderr io.Writer) (rolloutConfig, error) {
	var c rolloutConfig
	fs := flag.NewFlagSet("policyrouter-rollout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var loads, names, modes string
	var updateNames []string
	for _, s := range updatesim.Strategies {
		updateNames = append(updateNames, s.Name)
	}
	fs.IntVar(&c.Envs, "envs", 32, "E, env workers, each running one episode at a time")
	fs.IntVar(&c.Turns, "turns", 10, "T, turns of an episode")
	fs.IntVar(&c.Policies, "policies", 16, "P, simulated policies, one generation at a time each")
	fs.IntVar(&c.Nodes, "nodes", 4, "N, nodes: policy i and env worker i on node i % N")
	fs.DurationVar(&c.GenMedian, "gen-median", 100*time.Millisecond, "median of the log-normal generation time of an uncached turn")
	fs.Float64Var(&c.GenSigma, "gen-sigma", 0.5, "sigma of the generation time (standard deviation of its logarithm)")
	fs.Float64Var(&c.EnvSigma, "env-sigma", 0.3, "sigma of the log-normal env step time (its mean follows from the load)")
	fs.StringVar(&loads, "loads", "0.8,1.25", "comma list of offered loads, as fractions of capacity; each sets the mean env step")
	fs.DurationVar(&c.CrossNode, "cross-node", 5*time.Millisecond, "extra latency of a turn whose policy is on another node than its env worker")
	fs.IntVar(&c.Cache, "cache", 8, "episodes each policy's prefix cache holds (0: no cache)")
	fs.Float64Var(&c.Speedup, "speedup", 4, "how many times faster a turn whose episode's prefix is cached runs")
	fs.DurationVar(&c.StickyWait, "sticky-wait", 150*time.Millisecond, "sticky_wait_ms of the idle_affinity+session strategy")
	fs.Float64Var(&c.LoadFactor, "load-factor", 0, "load_factor of the idle_affinity+session strategy (the sticky homes' load bound); 0 sends none, for the router's default")
	fs.DurationVar(&c.Duration, "duration", 15*time.Second, "length of one strategy's run at one load")
	fs.IntVar(&c.Episodes, "episodes", 0, "episodes each env worker runs before it stops, the run ending with the last (bounded by -duration); 0 runs episodes back to back for -duration")
	fs.DurationVar(&c.Sample, "sample", 500*time.Millisecond, "interval of the utilisation samples")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the generation times and env steps, the same for every strategy")
	fs.DurationVar(&c.UpdateEvery, "update-every", 0, "P, the update period: run each strategy with each -update-strategies, warming up one period and then updating every P (the run lasts (updates+1) P, not -duration); 0 runs none")
	fs.IntVar(&c.Updates, "updates", 2, "whole updates measured per run, under -update-every")
	fs.StringVar(&modes, "update-strategies", strings.Join(updateNames, ","), "comma list of the update strategies each strategy runs with, under -update-every: "+strings.Join(updateNames, ", "))
	fs.DurationVar(&c.UpdateTime, "update-time", time.Second, "how long a policy takes to load weights")
	fs.IntVar(&c.UpdateRolling, "update-rolling", 2, "max_unavailable of the rolling updates")
	fs.StringVar(&names, "strategies", strings.Join(strategyNames(), ","), "comma list of strategies: "+strings.Join(strategyNames(), ", "))
	fs.BoolVar(&c.JSON, "json", false, "print the report as JSON instead of a table")
	fs.StringVar(&c.Charts, "charts", "", "directory to write the SVG charts to (utilisation over time, env wait distribution, per load); empty writes none")
	fs.DurationVar(&c.PollInterval, "poll-interval", 100*time.Millisecond, "the router's /idle poll interval")
	fs.StringVar(&c.LogLevel, "log-level", "warn", "level of the router's JSON log, written to io.Discard")
	fs.IntVar(&c.Sweep, "sweep", 0, "run the weight-update sweep (the model of internal/updatesim, in simulated time) with seeds 1..n instead, and exit")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for f := range strings.SplitSeq(loads, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		l, err := strconv.ParseFloat(f, 64)
		if err != nil || !(l > 0 && l <= 100) {
			return c, fmt.Errorf("-loads: %q is not a load in (0, 100]", f)
		}
		c.Loads = append(c.Loads, l)
	}
	var err error
	if c.UpdateStrategies, err = benchkit.ParseList("update-strategies", "strategy", modes, updateNames); err != nil {
		return c, err
	}
	if c.UpdateEvery > 0 {
		c.Duration = time.Duration(c.Updates+1) * c.UpdateEvery
	}
	if c.Strategies, err = benchkit.ParseList("strategies", "strategy", names, strategyNames()); err != nil {
		return c, err
	}
	return c, c.validate()
}

// validate checks the workload is one the simulator can run, bounded.
func (c rolloutConfig) validate() error {
	switch {
	case c.Envs < 1 || c.Envs > maxEnvs:
		return fmt.Errorf("-envs must be in [1, %d]", maxEnvs)
	case c.Turns < 1 || c.Turns > 10_000:
		return errors.New("-turns must be in [1, 10000]")
	case c.Policies < 1 || c.Policies > 4096:
		return errors.New("-policies must be in [1, 4096]")
	case c.Nodes < 1 || c.Nodes > c.Policies || c.Nodes > c.Envs:
		return errors.New("-nodes must be in [1, min(policies, envs)]: every node holds policies and env workers")
	case c.GenMedian <= 0 || c.GenMedian > 10*time.Second:
		return errors.New("-gen-median must be in (0, 10s]")
	case !(c.GenSigma >= 0 && c.GenSigma <= 3) || !(c.EnvSigma >= 0 && c.EnvSigma <= 3):
		return errors.New("-gen-sigma and -env-sigma must be in [0, 3]")
	case len(c.Loads) == 0:
		return errors.New("-loads must name at least one load")
	case c.CrossNode < 0 || c.CrossNode > 10*time.Second:
		return errors.New("-cross-node must be in [0, 10s]")
	case c.Cache < 0 || !(c.Speedup >= 1 && c.Speedup <= 1000):
		return errors.New("-cache must be >= 0 and -speedup in [1, 1000]")
	case c.StickyWait < 0 || c.StickyWait > time.Minute:
		return errors.New("-sticky-wait must be in [0, 1m]")
	case c.LoadFactor != 0 && !(c.LoadFactor >= 1 && c.LoadFactor <= 1000):
		return errors.New("-load-factor must be 0 or in [1, 1000]")
	case c.Duration <= 0 || c.Duration > maxDuration:
		return fmt.Errorf("-duration must be in (0, %s]", maxDuration)
	case c.Episodes < 0 || c.Episodes > 10_000:
		return errors.New("-episodes must be in [0, 10000]")
	case c.Sample < 10*time.Millisecond || c.Sample > c.Duration:
		return errors.New("-sample must be in [10ms, duration]")
	case c.UpdateEvery < 0:
		return errors.New("-update-every must be 0 or positive")
	case c.UpdateTime <= 0 || c.UpdateRolling < 1 || c.Updates < 1:
		return errors.New("-update-time must be positive, -update-rolling and -updates at least 1")
	case c.UpdateEvery > 0 && len(c.UpdateStrategies) == 0:
		return errors.New("-update-strategies must name at least one strategy")
	case len(c.Strategies) == 0:
		return errors.New("-strategies must name at least one strategy")
	case c.PollInterval <= 0:
		return errors.New("-poll-interval must be positive: the idle routers learn of idle policies through it")
	}
	for _, l := range c.Loads {
		if float64(c.Envs) < l*float64(c.Policies) {
			return fmt.Errorf("-loads: load %g needs at least %g env workers (load x policies), have %d: at load E/P every env worker generates all the time (env steps of 0)", l, l*float64(c.Policies), c.Envs)
		}
	}
	_, err := benchkit.NewLogger(c.LogLevel)
	return err
}

func lookupStrategy(name string) (strategy, bool) {
	for _, s := range strategies {
		if s.Name == name {
			return s, true
		}
	}
	return strategy{}, false
}

// meanGeneration is the mean of the uncached generation time:
// median * e^(sigma^2 / 2) for a log-normal.
func (c rolloutConfig) meanGeneration() time.Duration {
	return time.Duration(float64(c.GenMedian) * math.Exp(c.GenSigma*c.GenSigma/2))
}

// stepMedian is the median of the log-normal env step at the load.
func (c rolloutConfig) stepMedian(load float64) time.Duration {
	return time.Duration(float64(c.envStepMean(load)) * math.Exp(-c.EnvSigma*c.EnvSigma/2))
}

// envStepMean is the mean env step that makes the offered load the given
// fraction of capacity. With mean uncached generation g and env step s, an
// env worker that never waits asks for g policy-seconds every s + g
// seconds, so E workers offer E g / (s + g) policies' worth of work;
// setting that to load * P gives s = g (E / (load P) - 1).
func (c rolloutConfig) envStepMean(load float64) time.Duration {
	g := float64(c.meanGeneration())
	return time.Duration(g * (float64(c.Envs)/(load*float64(c.Policies)) - 1))
}

// oracleGeneration is the mean generation time of a turn under the oracle:
// every turn after an episode's first finds its prefix cached (when the
// policies have a cache).
func (c rolloutConfig) oracleGeneration() float64 {
	g := c.meanGeneration().Seconds()
	if c.Cache == 0 || c.Turns == 1 {
		return g
	}
	t := float64(c.Turns)
	return g * (1 + (t-1)/c.Speedup) / t
}

// oracleEpisodesPerSecond is the episodes per second of the oracle
// scheduler: it packs every turn onto a policy the moment its env step ends
// (no waiting unless all P policies are busy), with every continuation turn
// a cache hit, no cross-node latency and no routing or HTTP cost. Its
// throughput is the lesser of what the env workers can ask for, when no
// worker ever waits (E / (T (s + g_o))), and what the policies can serve,
// when none is ever idle (P / (T g_o)).
func (c rolloutConfig) oracleEpisodesPerSecond(load float64) float64 {
	g := c.oracleGeneration()
	s := c.envStepMean(load).Seconds()
	t := float64(c.Turns)
	return min(float64(c.Envs)/(t*(s+g)), float64(c.Policies)/(t*g))
}

// bestHitRate is the highest prefix-cache hit rate any routing can reach:
// an episode's first turn cannot hit.
func (c rolloutConfig) bestHitRate() float64 {
	if c.Cache == 0 {
		return 0
	}
	return float64(c.Turns-1) / float64(c.Turns)
}

// run parses the flags, runs every strategy at every load (or the sweep,
// or the prefix subcommand of prefix.go),
// writes the charts and prints the report to stdout; progress goes to
// stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "prefix" {
		return runPrefix(ctx, args[1:], stdout, stderr)
	}
	cfg, err := parseRolloutConfig(args, stderr)
	if err != nil || cfg.Sweep > 0 {
		if err == nil {
			err = runSweep(cfg.Sweep, cfg.Charts, stdout, stderr)
		}
		return err
	}
	rep, err := simulate(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	if cfg.Charts != "" {
		files, err := writeCharts(cfg.Charts, rep)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "charts: %s\n", strings.Join(files, ", "))
	}
	if cfg.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	writeRolloutTable(stdout, rep)
	return nil
}

// simulate runs every strategy at every load and returns the report.
func simulate(ctx context.Context, cfg rolloutConfig, progress io.Writer) (*rolloutReport, error) {
	rep := newRolloutReport(cfg)
	for _, load := range cfg.Loads {
		lr := rolloutLoad{
			Load:      load,
			EnvStepMS: benchkit.MS(cfg.envStepMean(load)),
			OracleEPS: cfg.oracleEpisodesPerSecond(load),
			UtilBound: min(1, load),
		}
		var runs []strategy
		for _, name := range cfg.Strategies {
			s, _ := lookupStrategy(name)
			if cfg.UpdateEvery <= 0 {
				runs = append(runs, s)
				continue
			}
			for _, mode := range cfg.UpdateStrategies {
				u := s
				u.Update, u.Name = mode, s.Name+" "+mode
				runs = append(runs, u)
			}
		}
		for _, s := range runs {
			fmt.Fprintf(progress, "rollout: load %g, %s ...\n", load, s.Name)
			res, err := runStrategy(ctx, cfg, load, s)
			if err != nil {
				return nil, fmt.Errorf("load %g, %s: %w", load, s.Name, err)
			}
			res.score(cfg, load, lr.OracleEPS)
			lr.Strategies = append(lr.Strategies, res)
		}
		if cfg.UpdateEvery > 0 {
			if err := scoreUpdates(cfg, load, lr.Strategies); err != nil {
				return nil, err
			}
		}
		rep.Loads = append(rep.Loads, lr)
	}
	rep.Aims = judgeAims(cfg, rep.Loads)
	return rep, nil
}

// writeCharts writes the charts of every load into dir and returns their
// paths.
func writeCharts(dir string, rep *rolloutReport) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, lr := range rep.Loads {
		tag := "load" + strconv.Itoa(int(math.Round(100*lr.Load)))
		for _, ch := range []struct {
			name string
			svg  []byte
		}{
			{"rollout-utilisation-" + tag + ".svg", utilisationChart(rep, lr)},
			{"rollout-wait-" + tag + ".svg", waitChart(rep, lr)},
		} {
			path := filepath.Join(dir, ch.name)
			if err := os.WriteFile(path, ch.svg, 0o644); err != nil {
				return nil, err
			}
			files = append(files, path)
		}
	}
	return files, nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/policyrouter/policyrouter/internal/benchkit"
)

// The prefix subcommand (issue 55): the workloads of prefix_workload.go
// on stand-ins with a real block prefix cache, side by side.
//
//	policyrouter-rollout prefix [flags]          strategies over /select, and SGLang Model Gateway's cache_aware
//	policyrouter-rollout prefix -proxy [flags]   the same traffic through the router's proxy, affinity on and off
//
// Every run starts a fresh router and fleet; the strategies of one
// repetition run one after the other, their order rotated from one
// repetition to the next, and the report gives medians over the
// repetitions, ratios taken within one repetition.

// prefixVariant is one way of routing a workload.
type prefixVariant struct {
	Name string
	// For, when set, lists the workloads the variant runs on; nil: all.
	For []string
	// mk makes the variant's sender for one run on r; anything it
	// starts is stopped with r (prefixRouter.onClose).
	mk func(r *prefixRouter, hc *http.Client) (sender, error)
}

// simVariants are the simulator's strategies (item 8).
var simVariants = []prefixVariant{
	{Name: "least_loaded", mk: func(r *prefixRouter, hc *http.Client) (sender, error) { return leaseSender(r, hc, false, false), nil }},
	{Name: "sessions", mk: func(r *prefixRouter, hc *http.Client) (sender, error) { return leaseSender(r, hc, true, false), nil }},
	{Name: "ours", mk: func(r *prefixRouter, hc *http.Client) (sender, error) { return leaseSender(r, hc, false, true), nil }},
	{Name: "cache_aware", mk: cacheAwareSender},
}

// proxyVariants are the proxy's: affinity on without a key, a session key
// with affinity off (what a user had before), and affinity off.
var proxyVariants = []prefixVariant{
	{Name: "on", mk: func(r *prefixRouter, hc *http.Client) (sender, error) { return proxySender(r, hc, false, false), nil }},
	{Name: "session", For: []string{wlMultiTurn}, mk: func(r *prefixRouter, hc *http.Client) (sender, error) { return proxySender(r, hc, true, true), nil }},
	{Name: "off", mk: func(r *prefixRouter, hc *http.Client) (sender, error) { return proxySender(r, hc, false, true), nil }},
}

// prefixConfig is what the prefix flags set.
type prefixConfig struct {
	Proxy     bool
	Workloads []string
	Reps      int
	Seed      uint64
	JSON      bool
	Fleet     fleetShape
	Shape     workloadShape
}

func parsePrefixConfig(args []string, stderr io.Writer) (prefixConfig, error) {
	c := prefixConfig{Fleet: defaultFleet, Shape: defaultShape}
	fs := flag.NewFlagSet("policyrouter-rollout prefix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var names string
	fs.BoolVar(&c.Proxy, "proxy", false, "send through the router's proxy (affinity on, a session key, affinity off) instead of the simulator's strategies")
	fs.StringVar(&names, "workloads", strings.Join(prefixWorkloadNames, ","), "comma list of workloads: "+strings.Join(prefixWorkloadNames, ", "))
	fs.IntVar(&c.Reps, "reps", 3, "repetitions, the strategies' order rotated each time; the report gives medians")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the workloads' tokens")
	fs.BoolVar(&c.JSON, "json", false, "print every run as JSON instead of the tables")
	fs.IntVar(&c.Fleet.KVTokens, "kv-tokens", c.Fleet.KVTokens, "each engine's KV cache in tokens")
	fs.DurationVar(&c.Fleet.PrefillPerToken, "prefill-per-token", c.Fleet.PrefillPerToken, "prefill time per uncached prompt token, one prefill at a time per engine")
	fs.Float64Var(&c.Fleet.TokensPerSecond, "tokens-per-second", c.Fleet.TokensPerSecond, "decode rate of each request")
	fs.IntVar(&c.Shape.Episodes, "episodes", c.Shape.Episodes, "multi-turn episodes, side by side")
	fs.IntVar(&c.Shape.Groups, "groups", c.Shape.Groups, "GRPO groups")
	fs.IntVar(&c.Shape.GroupsInFlight, "groups-in-flight", c.Shape.GroupsInFlight, "GRPO groups sent side by side")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if c.Workloads, err = benchkit.ParseList("workloads", "workload", names, prefixWorkloadNames); err != nil {
		return c, err
	}
	switch {
	case len(c.Workloads) == 0:
		return c, errors.New("-workloads must name at least one workload")
	case c.Reps < 1 || c.Reps > 20:
		return c, errors.New("-reps must be in [1, 20]")
	case c.Fleet.KVTokens < 16 || c.Fleet.PrefillPerToken < 0 || !(c.Fleet.TokensPerSecond > 0):
		return c, errors.New("-kv-tokens must be at least 16, -prefill-per-token not negative, -tokens-per-second positive")
	case c.Shape.Episodes < 1 || c.Shape.Episodes > 1000 || c.Shape.Groups < 1 || c.Shape.Groups > 1000:
		return c, errors.New("-episodes and -groups must be in [1, 1000]")
	case c.Shape.GroupsInFlight < 1 || c.Shape.GroupsInFlight > c.Shape.Groups:
		return c, errors.New("-groups-in-flight must be in [1, groups]")
	}
	return c, nil
}

// prefixReport is every run of a prefix invocation.
type prefixReport struct {
	Machine benchkit.Machine `json:"machine"`
	Proxy   bool             `json:"proxy"`
	Fleet   fleetShape       `json:"fleet"`
	Shape   workloadShape    `json:"shape"`
	// Runs[workload][variant] holds one result per repetition.
	Runs map[string]map[string][]prefixResult `json:"runs"`
	// order of the workloads and variants in the tables
	workloads []string
	variants  []string
}

// runPrefix runs the prefix subcommand.
func runPrefix(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parsePrefixConfig(args, stderr)
	if err != nil {
		return err
	}
	variants := simVariants
	if cfg.Proxy {
		variants = proxyVariants
	}
	rep := &prefixReport{Machine: benchkit.ReadMachine(), Proxy: cfg.Proxy, Fleet: cfg.Fleet, Shape: cfg.Shape,
		Runs: map[string]map[string][]prefixResult{}, workloads: cfg.Workloads}
	for _, v := range variants {
		rep.variants = append(rep.variants, v.Name)
	}
	hc := benchkit.NewClient(256)
	hc.Timeout = 0
	defer hc.CloseIdleConnections()
	for _, name := range cfg.Workloads {
		w, err := makeWorkload(name, cfg.Shape, cfg.Seed)
		if err != nil {
			return err
		}
		rep.Runs[name] = map[string][]prefixResult{}
		var vs []prefixVariant
		for _, v := range variants {
			if v.For == nil || slices.Contains(v.For, name) {
				vs = append(vs, v)
			}
		}
		for r := range cfg.Reps {
			for k := range vs {
				v := vs[(k+r)%len(vs)]
				fmt.Fprintf(stderr, "prefix: %s, %s, repetition %d ...\n", name, v.Name, r+1)
				res, err := runOne(ctx, cfg, hc, w, v)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", name, v.Name, err)
				}
				rep.Runs[name][v.Name] = append(rep.Runs[name][v.Name], res)
			}
		}
	}
	rep.Machine.LoadEnd = benchkit.LoadAvg()
	if cfg.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	writePrefixTables(stdout, rep)
	return nil
}

// runOne runs workload w with variant v on a fresh router and fleet.
func runOne(ctx context.Context, cfg prefixConfig, hc *http.Client, w prefixWorkload, v prefixVariant) (prefixResult, error) {
	r, err := startPrefixRouter(ctx, cfg.Fleet, cfg.Seed, hc)
	if err != nil {
		return prefixResult{}, err
	}
	defer r.close()
	send, err := v.mk(r, hc)
	if err != nil {
		return prefixResult{}, err
	}
	return runWorkload(ctx, r, w, v.Name, cfg.Fleet.Capacity, send)
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/routing"
)

// fakePolicyConfig is the configuration of `fake-policy`.
type fakePolicyConfig struct {
	Addr    string
	N       int
	MinWork time.Duration
	MaxWork time.Duration
	Prefix  int
	Speedup float64
	// UpdateTime is how long a weight update takes; FailUpdates makes every
	// policy's weight updates fail; Version is the weight version they
	// start at.
	UpdateTime  time.Duration
	FailUpdates bool
	Version     int64
	// TokensPerSecond paces the simulated generations' tokens.
	TokensPerSecond float64
	// Engine is the engine whose wire formats the policies serve; APIKey
	// its --api-key; MaxRunning how many requests run at once (the rest
	// wait); WeightVersion the engine's version string at start.
	Engine        string
	APIKey        string
	MaxRunning    int
	WeightVersion string
}

func (c *fakePolicyConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:0", "address to listen on; policy i is served at http://ADDR/p/i")
	fs.IntVar(&c.N, "n", 1, "number of simulated policies")
	fs.DurationVar(&c.MinWork, "min-work", 200*time.Millisecond, "shortest simulated work item")
	fs.DurationVar(&c.MaxWork, "max-work", 1500*time.Millisecond, "longest simulated work item")
	fs.IntVar(&c.Prefix, "prefix-cache", 0, "session keys each policy's simulated prefix cache holds (LRU); 0 simulates none")
	fs.Float64Var(&c.Speedup, "prefix-speedup", 4, "how many times faster a /generate is when its session's prefix is cached")
	fs.DurationVar(&c.UpdateTime, "update-time", 2*time.Second, "how long POST /update_weights_from_disk keeps a policy busy before it reports the new version")
	fs.BoolVar(&c.FailUpdates, "fail-updates", false, "make POST /update_weights_from_disk answer 500")
	fs.Int64Var(&c.Version, "version", 0, "weight version the policies report in /idle at start (0: none)")
	fs.Float64Var(&c.TokensPerSecond, "tokens-per-second", 0, "pace of the tokens of /v1/completions, /v1/chat/completions and /generate (n tokens take n / this); 0: a generation takes one work item's duration")
	fs.StringVar(&c.Engine, "engine", "policyrouter", "wire formats the policies serve: "+routing.NameList(engine.Names())+" (policyrouter: GET /idle)")
	fs.StringVar(&c.APIKey, "api-key", "", "with an --engine other than policyrouter: answer 401 to requests without Authorization: Bearer KEY")
	fs.IntVar(&c.MaxRunning, "max-running", 0, "with an --engine other than policyrouter: requests run at once, the rest wait (0: all run)")
	fs.StringVar(&c.WeightVersion, "weight-version", "default", "with --engine sglang: the weight version string reported at start")
}

// fakePolicyCommand serves simulated policies' /idle, /work, /generate and
// /update_weights_from_disk endpoints and prints their URLs, one a line,
// until interrupted.
func fakePolicyCommand(ctx context.Context, args []string) error {
	var cfg fakePolicyConfig
	fs := flag.NewFlagSet("fake-policy", flag.ContinueOnError)
	cfg.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if cfg.N < 1 {
		return errors.New("--n must be at least 1")
	}
	if cfg.TokensPerSecond < 0 {
		return errors.New("--tokens-per-second must be >= 0")
	}
	if cfg.Prefix < 0 || cfg.Speedup < 1 {
		return errors.New("--prefix-cache must be >= 0 and --prefix-speedup >= 1")
	}
	fleet, err := fakepolicy.New(cfg.N, rand.NewPCG(uint64(time.Now().UnixNano()), 11), fakepolicy.Options{
		Addr: cfg.Addr, MinWork: cfg.MinWork, MaxWork: cfg.MaxWork,
		PrefixCache: cfg.Prefix, PrefixSpeedup: cfg.Speedup, UpdateTime: cfg.UpdateTime,
		TokensPerSecond: cfg.TokensPerSecond,
		Engine:          cfg.Engine, APIKey: cfg.APIKey, MaxRunning: cfg.MaxRunning,
	})
	if err != nil {
		return err
	}
	for i := range fleet.Len() {
		fleet.Policy(i).SetVersion(cfg.Version)
		fleet.Policy(i).SetFailUpdates(cfg.FailUpdates)
		fleet.Policy(i).SetWeightVersion(cfg.WeightVersion)
	}
	for _, u := range fleet.URLs() {
		fmt.Fprintln(os.Stdout, u)
	}
	<-ctx.Done()
	return fleet.Close()
}

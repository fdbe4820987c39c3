// Command policyrouter-bench measures policyrouter against the least any Go
// HTTP service can do, on this machine, in one run.
//
// It starts two servers on loopback: a bare net/http "floor" that decodes
// the same JSON requests as the router and encodes answers of the same
// shape and size, without routing, middleware or validation; and the real
// router, in-process, wired the way `policyrouter serve` wires it (memory
// store, registry, routing state, metrics, chi handlers, and the /idle
// poller over a fleet of simulated policies). One keep-alive client drives
// both with the same concurrency and duration, alternating floor, router,
// floor, router ... for a number of rounds, and the command reports per
// workload the throughput and p50/p99 latency of each side and the
// router/floor ratios, as medians over rounds.
//
// It also times the seed's own algorithms (bench/seed_assign.py, run with
// python3) and the Go routing core on the same inputs.
//
// Usage:
//
//	go run ./cmd/policyrouter-bench [flags]
//	go run ./cmd/policyrouter-bench -json > run1.json
//	go run ./cmd/policyrouter-bench -merge run1.json,run2.json,run3.json
//
// What routing does for an RL job, rather than the router's requests per
// second, is measured by policyrouter-rollout.
//
// Run with -h for the flags. The defaults finish in under two minutes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/policyrouter/policyrouter/internal/benchkit"
)

func main() { benchkit.Main("policyrouter-bench", run) }

// config is everything the flags set.
type config struct {
	Duration        time.Duration
	Rounds          int
	Concurrency     int
	Policies        int
	Nodes           int
	AssignPolicies  int
	AssignTasks     int
	AssignNodes     int
	Workloads       []string
	JSON            bool
	CPUProfile      string
	ProfileSelect   string
	ProfileWorkload string
	LogLevel        string
	PollInterval    time.Duration
	SeedScript      string
	SeedBudget      time.Duration
	CoreBudget      time.Duration
	Merge           []string
}

// Limits that keep every loop of the harness bounded.
const (
	maxDuration    = 10 * time.Minute
	maxRounds      = 100
	maxConcurrency = 4096
	maxPolicies    = 100_000
	maxTasks       = 1 << 20
)

func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("policyrouter-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var workloads, merge string
	fs.DurationVar(&c.Duration, "duration", 3*time.Second, "length of one side's run in each round")
	fs.IntVar(&c.Rounds, "rounds", 3, "rounds of floor then router, per workload")
	fs.IntVar(&c.Concurrency, "concurrency", 32, "client goroutines, each with one request in flight; also MaxIdleConnsPerHost")
	fs.IntVar(&c.Policies, "policies", 64, "simulated policies of the /select and /assign-1 workloads")
	fs.IntVar(&c.Nodes, "nodes", 4, "nodes of those workloads' topology (policy i and env worker i on node i % nodes)")
	fs.IntVar(&c.AssignPolicies, "assign-policies", 1024, "simulated policies of the big /assign workloads")
	fs.IntVar(&c.AssignTasks, "assign-tasks", 4096, "tasks of one big /assign")
	fs.IntVar(&c.AssignNodes, "assign-nodes", 16, "nodes of the big /assign workloads' topology")
	fs.StringVar(&workloads, "workloads", strings.Join(allWorkloadNames(), ","), "comma list of workloads: "+strings.Join(allWorkloadNames(), ", "))
	fs.BoolVar(&c.JSON, "json", false, "print the report as JSON instead of a table")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&c.ProfileSelect, "profile-select", "", "after the rounds of -profile-workload, run its router side once more with a CPU profile written to this file")
	fs.StringVar(&c.ProfileWorkload, "profile-workload", wSelectNodeAffinity, "the workload -profile-select profiles")
	fs.StringVar(&c.LogLevel, "log-level", "warn", "level of the router's JSON log, written to io.Discard (serve logs every request at info)")
	fs.DurationVar(&c.PollInterval, "poll-interval", 100*time.Millisecond, "the router's /idle poll interval, as serve's --poll-interval; 0 runs without the poller")
	fs.StringVar(&c.SeedScript, "seed-script", "bench/seed_assign.py", "the seed timing script, relative to the module root or the working directory")
	fs.DurationVar(&c.SeedBudget, "seed-budget", 150*time.Millisecond, "time budget of each seed case in Python")
	fs.DurationVar(&c.CoreBudget, "core-budget", 100*time.Millisecond, "time budget of each Go routing core case")
	fs.StringVar(&merge, "merge", "", "comma list of -json reports: print the median of their medians, with the spread, and exit")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if merge != "" {
		c.Merge = strings.Split(merge, ",")
		return c, nil
	}
	var err error
	if c.Workloads, err = benchkit.ParseList("workloads", "workload", workloads, allWorkloadNames()); err != nil {
		return c, err
	}
	switch {
	case c.Duration <= 0 || c.Duration > maxDuration:
		return c, fmt.Errorf("-duration must be in (0, %s]", maxDuration)
	case c.Rounds < 1 || c.Rounds > maxRounds:
		return c, fmt.Errorf("-rounds must be in [1, %d]", maxRounds)
	case c.Concurrency < 1 || c.Concurrency > maxConcurrency:
		return c, fmt.Errorf("-concurrency must be in [1, %d]", maxConcurrency)
	case c.Policies < 1 || c.Policies > maxPolicies || c.AssignPolicies < 1 || c.AssignPolicies > maxPolicies:
		return c, fmt.Errorf("-policies and -assign-policies must be in [1, %d]", maxPolicies)
	case c.Nodes < 1 || c.Nodes > c.Policies || c.AssignNodes < 1 || c.AssignNodes > c.AssignPolicies:
		return c, errors.New("-nodes and -assign-nodes must be in [1, policies]")
	case c.AssignTasks < 1 || c.AssignTasks > maxTasks:
		return c, fmt.Errorf("-assign-tasks must be in [1, %d]", maxTasks)
	case c.PollInterval < 0:
		return c, errors.New("-poll-interval must be >= 0")
	case c.CPUProfile != "" && c.ProfileSelect != "":
		return c, errors.New("-cpuprofile and -profile-select cannot be used together (one CPU profile at a time)")
	case c.ProfileSelect != "" && !slices.Contains(c.Workloads, c.ProfileWorkload):
		return c, fmt.Errorf("-profile-workload %q is not among -workloads", c.ProfileWorkload)
	}
	if _, err := benchkit.NewLogger(c.LogLevel); err != nil {
		return c, err
	}
	return c, nil
}

// run parses args, runs the harness and prints the report to stdout;
// progress goes to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "rollout" {
		return errors.New("the rollout simulator is its own command: " + strings.Join(append([]string{"go run ./cmd/policyrouter-rollout"}, args[1:]...), " "))
	}
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	if len(cfg.Merge) > 0 {
		return mergeReports(cfg.Merge, stdout)
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	rep, err := runHarness(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	if cfg.JSON {
		return writeJSON(stdout, rep)
	}
	writeTable(stdout, rep)
	return nil
}

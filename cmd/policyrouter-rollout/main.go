// Command policyrouter-rollout is a simulated RL job that measures what
// routing does for the job (episodes per second, how busy the policies
// stay, how long env workers wait, prefix-cache hits, cross-node traffic)
// rather than the router's requests per second, which policyrouter-bench
// measures.
//
// E env workers run episodes of T turns. Each turn is an env step (a
// log-normal sleep), then POST /select (with env_id, and with session_id =
// the episode for the sticky strategy), then, when the policy sits on
// another node than the env worker, the cross-node latency (a sleep in the
// env worker while it holds the lease: the fake policies do not know their
// caller's node), then POST {policy}/generate naming the episode (the fake
// policy's prefix cache makes a repeat faster), then POST /release. The
// policies are serial fake policies (one generation at a time, queued
// otherwise) whose generation times are log-normal; their own busy-time
// accounting gives the utilisation.
//
// Every strategy of a run gets the same workload: the same flags, a fresh
// router and fleet seeded with the same seed, and env workers whose env
// steps come from the same per-worker seeded streams.
//
// Two configurations stand for what were workloads of their own: with
// -episodes 1 and a load of E/P (no env step), a fixed batch of multi-turn
// rollouts, without and with sessions; with -update-every, the weight
// update strategies (rollout_update.go), live beside the model. With
// -sweep, the command runs the weight-update model of internal/updatesim
// over its grid instead, in simulated time (rollout_sweep.go). The prefix
// subcommand runs keyless workloads on stand-ins with a block prefix cache
// and compares prefix-cache affinity with other strategies (prefix.go).
//
// Usage:
//
//	go run ./cmd/policyrouter-rollout [flags]
//	go run ./cmd/policyrouter-rollout -sweep 3 -charts docs/rollout
//	go run ./cmd/policyrouter-rollout prefix [-proxy] [flags]
//
// Run with -h for the flags.
package main

import (
	"time"

	"github.com/policyrouter/policyrouter/internal/benchkit"
)

// Limits that keep a run bounded.
const (
	maxEnvs     = 4096
	maxDuration = 10 * time.Minute
)

func main() { benchkit.Main("policyrouter-rollout", run) }

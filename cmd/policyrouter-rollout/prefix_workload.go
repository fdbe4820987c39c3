package main

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/policyrouter/policyrouter/fakepolicy"
)

// The prefix workloads (issue 55, item 8): RL rollout traffic without
// routing keys, as token-id prompts, whose prompts share what real rollouts
// share. Each is made in full before a run from its seed, so that every
// strategy sends the very same requests: the tokens an engine generates
// are fakepolicy.Continuation of the prompt, so a multi-turn episode's next
// prompt (the previous prompt, its output and the new observation) is
// known in advance.

// prefixRequest is one generation: its prompt as token ids, the tokens to
// generate, and the session key of its episode (a multi-turn episode, a
// GRPO group, or the request alone).
type prefixRequest struct {
	Prompt  []int64
	MaxNew  int
	Session string
}

// prefixUnit is requests sent together (a GRPO group; one request
// otherwise), after an env step of Step.
type prefixUnit struct {
	Step     time.Duration
	Requests []prefixRequest
}

// prefixClient is one client's units, sent one after the other.
type prefixClient struct{ Units []prefixUnit }

// prefixWorkload is the clients of one workload, run side by side.
type prefixWorkload struct {
	Name    string
	Clients []prefixClient
}

// Workload names, in report order.
const (
	wlMultiTurn = "multiturn"
	wlGRPO      = "grpo"
	wlUnique    = "unique"
	wlHotSystem = "hotsystem"
)

var prefixWorkloadNames = []string{wlMultiTurn, wlGRPO, wlUnique, wlHotSystem}

// workloadShape sizes the workloads.
type workloadShape struct {
	// Multi-turn agentic: Episodes episodes side by side, each of Turns
	// turns; the first prompt FirstTokens, each later turn adds the
	// previous output (OutTokens) and ObsTokens of observation, after
	// an env step of EnvStep.
	Episodes, Turns, FirstTokens, ObsTokens, OutTokens int
	EnvStep                                            time.Duration
	// GRPO: Groups groups of GroupSize samples of one prompt of
	// GroupPrompt tokens, sent together, GroupsInFlight at a time.
	Groups, GroupSize, GroupPrompt, GroupsInFlight int
	// Prompts sharing nothing, and one hot system prompt: Clients clients
	// each sending PerClient requests one after the other; unique prompts
	// of UniqueTokens, or SystemTokens shared + SuffixTokens unique.
	Clients, PerClient, UniqueTokens, SystemTokens, SuffixTokens int
	// ShortOut is the output of the single-turn workloads' requests.
	ShortOut int
}

// defaultShape is the shape of the reported runs.
var defaultShape = workloadShape{
	Episodes: 40, Turns: 6, FirstTokens: 512, ObsTokens: 256, OutTokens: 96, EnvStep: 10 * time.Millisecond,
	Groups: 32, GroupSize: 8, GroupPrompt: 1024, GroupsInFlight: 8,
	Clients: 64, PerClient: 4, UniqueTokens: 1024, SystemTokens: 2048, SuffixTokens: 128,
	ShortOut: 64,
}

// randomTokens returns n token ids from rng.
func randomTokens(rng *rand.Rand, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = rng.Int64N(32000)
	}
	return out
}

// workloadRand is the workload's own stream: seed and its name.
func workloadRand(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// makeWorkload makes the named workload of shape s from seed.
func makeWorkload(name string, s workloadShape, seed uint64) (prefixWorkload, error) {
	rng := workloadRand(seed, name)
	w := prefixWorkload{Name: name}
	switch name {
	case wlMultiTurn:
		for e := range s.Episodes {
			session := fmt.Sprintf("ep-%d", e)
			prompt := randomTokens(rng, s.FirstTokens)
			var c prefixClient
			for t := range s.Turns {
				step := s.EnvStep
				if t == 0 {
					step = 0
				}
				c.Units = append(c.Units, prefixUnit{Step: step, Requests: []prefixRequest{{Prompt: prompt, MaxNew: s.OutTokens, Session: session}}})
				out, _ := fakepolicy.Continuation(prompt, s.OutTokens)
				prompt = slices.Concat(prompt, out, randomTokens(rng, s.ObsTokens))
			}
			w.Clients = append(w.Clients, c)
		}
	case wlGRPO:
		w.Clients = make([]prefixClient, s.GroupsInFlight)
		for g := range s.Groups {
			prompt := randomTokens(rng, s.GroupPrompt)
			u := prefixUnit{}
			for range s.GroupSize {
				u.Requests = append(u.Requests, prefixRequest{Prompt: prompt, MaxNew: s.OutTokens, Session: fmt.Sprintf("group-%d", g)})
			}
			c := &w.Clients[g%s.GroupsInFlight]
			c.Units = append(c.Units, u)
		}
	case wlUnique, wlHotSystem:
		system := randomTokens(rng, s.SystemTokens)
		for k := range s.Clients {
			var c prefixClient
			for r := range s.PerClient {
				prompt := randomTokens(rng, s.UniqueTokens)
				if name == wlHotSystem {
					prompt = slices.Concat(system, randomTokens(rng, s.SuffixTokens))
				}
				c.Units = append(c.Units, prefixUnit{Requests: []prefixRequest{{Prompt: prompt, MaxNew: s.ShortOut, Session: fmt.Sprintf("req-%d-%d", k, r)}}})
			}
			w.Clients = append(w.Clients, c)
		}
	default:
		return w, fmt.Errorf("unknown workload %q", name)
	}
	return w, nil
}

// requests counts the workload's requests.
func (w prefixWorkload) requests() int {
	n := 0
	for _, c := range w.Clients {
		for _, u := range c.Units {
			n += len(u.Requests)
		}
	}
	return n
}

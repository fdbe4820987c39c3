package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/fakepolicy"
)

// wMultiTurn is not a floor-versus-router workload: it runs multi-turn
// rollouts against fake-policy servers that simulate a prefix cache, once
// without and once with session_id, and reports the cache hit rate and the
// mean generation time of each.
const wMultiTurn = "multi_turn"

// multiTurnConfig sizes the multi-turn run.
type multiTurnConfig struct {
	Trajectories int
	Turns        int
	Policies     int
	Cache        int           // session keys each policy's prefix cache holds
	Speedup      float64       // how much faster a cached turn runs
	MinWork      time.Duration // uncached turn duration bounds
	MaxWork      time.Duration
	StickyWait   time.Duration // sticky_wait_ms of the sticky run
}

// multiTurnRun is the outcome of one mode of the multi-turn run.
type multiTurnRun struct {
	Sessions bool `json:"sessions"`
	// Generations counts /generate calls; PrefixHits those that found the
	// trajectory's prefix cached on the policy they were sent to.
	Generations int     `json:"generations"`
	PrefixHits  int     `json:"prefix_hits"`
	HitRate     float64 `json:"hit_rate"`
	// MeanGenerationMS is the mean wall time of one /generate.
	MeanGenerationMS float64 `json:"mean_generation_ms"`
	// MeanSelectMS is the mean wall time of one /select, its wait included.
	MeanSelectMS float64 `json:"mean_select_ms"`
	// WallSeconds is how long all the trajectories took.
	WallSeconds float64 `json:"wall_seconds"`
	// Sticky is the router's sticky counters after the run.
	Sticky api.StickyStats `json:"sticky"`
}

// multiTurnResult is both modes, in the report.
type multiTurnResult struct {
	Trajectories int            `json:"trajectories"`
	Turns        int            `json:"turns"`
	Policies     int            `json:"policies"`
	Cache        int            `json:"cache"`
	Speedup      float64        `json:"speedup"`
	StickyWaitMS float64        `json:"sticky_wait_ms"`
	Runs         []multiTurnRun `json:"runs"`
}

// runMultiTurn runs the multi-turn workload without and with sessions.
func runMultiTurn(ctx context.Context, cfg config) (*multiTurnResult, error) {
	mt := cfg.MultiTurn
	res := &multiTurnResult{
		Trajectories: mt.Trajectories, Turns: mt.Turns, Policies: mt.Policies, Cache: mt.Cache,
		Speedup: mt.Speedup, StickyWaitMS: ms(mt.StickyWait),
	}
	client := newClient(mt.Trajectories)
	defer client.CloseIdleConnections()
	for _, sessions := range []bool{false, true} {
		run, err := multiTurnOnce(ctx, cfg, client, sessions)
		if err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, run)
	}
	return res, nil
}

// multiTurnOnce starts a fresh fleet and router and runs every trajectory
// to its end: each turn selects a policy (with the trajectory as
// session_id when sessions is set), generates on it, naming the
// trajectory so the policy's prefix cache sees it, and releases it.
func multiTurnOnce(ctx context.Context, cfg config, client *http.Client, sessions bool) (multiTurnRun, error) {
	mt := cfg.MultiTurn
	rt, err := startRouter(ctx, routerConfig{
		Policies: mt.Policies, Nodes: 1, PollInterval: cfg.PollInterval, LogLevel: cfg.LogLevel,
		Fleet: fakepolicy.Options{MinWork: mt.MinWork, MaxWork: mt.MaxWork, PrefixCache: mt.Cache, PrefixSpeedup: mt.Speedup},
	}, client)
	if err != nil {
		return multiTurnRun{}, err
	}
	defer rt.Close()
	if err := waitReady(ctx, client, rt.URL); err != nil {
		return multiTurnRun{}, err
	}

	var (
		mu               sync.Mutex
		gens, hits       int
		genTime, selTime time.Duration
		firstErr         error
		wg               sync.WaitGroup
	)
	start := time.Now()
	for t := range mt.Trajectories {
		wg.Go(func() {
			traj := "traj-" + strconv.Itoa(t)
			sel := map[string]any{"env_id": "env-" + strconv.Itoa(t), "timeout_ms": 60000}
			if sessions {
				sel["session_id"] = traj
				sel["sticky_wait_ms"] = mt.StickyWait.Milliseconds()
			}
			gen := []byte(`{"session_id":"` + traj + `"}`)
			for range mt.Turns {
				t0 := time.Now()
				var s api.SelectResponse
				err := postJSON(ctx, client, rt.URL+"/select", sel, &s)
				t1 := time.Now()
				var g struct {
					PrefixHit bool `json:"prefix_hit"`
				}
				if err == nil {
					err = post(ctx, client, s.URL+"/generate", gen, &g)
				}
				t2 := time.Now()
				if err == nil {
					err = post(ctx, client, rt.URL+"/release", []byte(`{"lease_id":"`+s.LeaseID+`"}`), nil)
				}
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				gens++
				if g.PrefixHit {
					hits++
				}
				selTime += t1.Sub(t0)
				genTime += t2.Sub(t1)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return multiTurnRun{}, firstErr
	}
	run := multiTurnRun{Sessions: sessions, Generations: gens, PrefixHits: hits, WallSeconds: time.Since(start).Seconds()}
	if gens > 0 {
		run.HitRate = float64(hits) / float64(gens)
		run.MeanGenerationMS = ms(genTime) / float64(gens)
		run.MeanSelectMS = ms(selTime) / float64(gens)
	}
	var stats api.Stats
	if err := send(ctx, client, http.MethodGet, rt.URL+"/stats", nil, &stats); err != nil {
		return multiTurnRun{}, err
	}
	run.Sticky = stats.Sticky
	return run, nil
}

// postJSON posts v encoded as JSON and decodes the answer into out.
func postJSON(ctx context.Context, c *http.Client, url string, v, out any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return post(ctx, c, url, body, out)
}

// waitReady waits, up to 20 s, for the router's /readyz: the poller has
// heard from the policies, so none is unknown.
func waitReady(ctx context.Context, c *http.Client, base string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := send(ctx, c, http.MethodGet, base+"/readyz", nil, nil)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// writeMultiTurn prints the multi-turn figures.
func writeMultiTurn(w io.Writer, r *multiTurnResult) {
	fmt.Fprintf(w, "multi-turn rollouts: %d trajectories x %d turns on %d fake policies (prefix cache of %d sessions each, cached turns %gx faster), /select router simple, sticky_wait_ms %g\n",
		r.Trajectories, r.Turns, r.Policies, r.Cache, r.Speedup, r.StickyWaitMS)
	fmt.Fprintf(w, "  %-16s %10s %10s %14s %12s %9s %28s\n", "mode", "turns", "hit rate", "mean gen ms", "mean sel ms", "wall s", "sticky hits/spills/misses")
	for _, run := range r.Runs {
		mode := "no session_id"
		if run.Sessions {
			mode = "session_id"
		}
		fmt.Fprintf(w, "  %-16s %10d %9.1f%% %14.2f %12.2f %9.2f %28s\n", mode, run.Generations, 100*run.HitRate,
			run.MeanGenerationMS, run.MeanSelectMS, run.WallSeconds,
			fmt.Sprintf("%d/%d/%d", run.Sticky.Hits, run.Sticky.Spills, run.Sticky.Misses))
	}
}

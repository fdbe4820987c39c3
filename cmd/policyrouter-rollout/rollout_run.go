package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/client"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/benchkit"
	"github.com/policyrouter/policyrouter/internal/updatesim"
)

// stragglerGrace bounds how long the turns in flight at the end of a run
// may take to finish before they are cancelled.
const stragglerGrace = 30 * time.Second

// turnOutcome is what an env worker records of one turn.
type turnOutcome struct {
	start, end time.Time
	wait       time.Duration // the turn's wall time less the generation's own
	busy       time.Duration // the generation's time on the policy
	hit        bool          // the policy had the episode's prefix cached
	crossNode  bool          // the policy sat on another node than the worker
}

// workerOutcome is what one env worker did in a run.
type workerOutcome struct {
	episodes int // episodes ended by the deadline
	done     int // turns ended by the deadline
	turns    []turnOutcome
	err      error
}

// runStrategy runs one strategy at one load on a fresh router and fleet,
// for cfg.Duration (or, with cfg.Episodes, until every env worker has run
// its episodes), and returns the raw figures (scored by the caller).
func runStrategy(ctx context.Context, cfg rolloutConfig, load float64, s strategy) (*strategyResult, error) {
	hc := benchkit.NewClient(cfg.Envs + 8)
	// A turn may wait longer than the harness's per-request bound (long
	// generations queued at a busy policy); runCtx bounds the run instead.
	hc.Timeout = 0
	defer hc.CloseIdleConnections()
	// Under updates the policies are fake SGLang engines, registered with
	// that engine, so that the router polls and updates them through
	// SGLang's own endpoints.
	rc := benchkit.Config{
		Policies: cfg.Policies, Nodes: cfg.Nodes, Envs: cfg.Envs, Seed: cfg.Seed,
		PollInterval: cfg.PollInterval, LogLevel: cfg.LogLevel,
		Fleet: fakepolicy.Options{
			TokensPerSecond: tokensPerSecond, Serial: true,
			PrefixCache: cfg.Cache, PrefixSpeedup: cfg.Speedup, UpdateTime: cfg.UpdateTime,
		},
	}
	if s.Update != "" {
		rc.Fleet.Engine = fakepolicy.EngineSGLang // updates are driven through the engine's own endpoints
	}
	rt, err := benchkit.Start(ctx, rc, hc)
	if err != nil {
		return nil, err
	}
	defer rt.Close()

	start := time.Now()
	deadline := start.Add(cfg.Duration)
	runCtx, cancel := context.WithDeadline(ctx, deadline.Add(stragglerGrace))
	defer cancel()
	// sampleCtx ends when the env workers are done (or at runCtx's end).
	sampleCtx, workersDone := context.WithCancel(runCtx)
	defer workersDone()

	var wg, workers sync.WaitGroup
	var series []float64
	var busy time.Duration // summed over policies, start to end
	end := deadline
	wg.Go(func() { series, busy, end = sampleUtilisation(sampleCtx, rt.Fleet, start, deadline, cfg.Sample) })
	var upd updateLive
	if s.Update != "" {
		wg.Go(func() { upd = runUpdates(runCtx, cfg, s.Update, rt, start) })
	}
	outcomes := make([]workerOutcome, cfg.Envs)
	for k := range cfg.Envs {
		w := envWorker{
			k: k, cfg: cfg, s: s, hc: hc, router: rt.API,
			node: benchkit.NodeName(k, cfg.Nodes), stepMedian: cfg.stepMedian(load), deadline: deadline,
			rng: rand.New(rand.NewPCG(cfg.Seed, uint64(k)+1)),
		}
		workers.Go(func() { outcomes[k] = w.run(runCtx) })
	}
	workers.Wait()
	workersDone()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	if upd.err != nil {
		return nil, fmt.Errorf("weight updates: %w", upd.err)
	}
	if end.After(deadline) {
		end = deadline
	}
	res := &strategyResult{
		Strategy: s.Name, Router: s.Router, Sessions: s.Sessions, Update: s.Update,
		Seconds: end.Sub(start).Seconds(), UtilisationSeries: series,
	}
	res.Utilisation = busy.Seconds() / (float64(cfg.Policies) * res.Seconds)
	var busySum time.Duration
	var all []turnOutcome
	for _, o := range outcomes {
		if o.err != nil {
			return nil, o.err
		}
		res.Episodes += o.episodes
		res.turnsByDeadline += o.done
		all = append(all, o.turns...)
		for _, t := range o.turns {
			res.waits = append(res.waits, t.wait)
			busySum += t.busy
			if t.hit {
				res.hits++
			}
			if t.crossNode {
				res.cross++
			}
		}
	}
	slices.Sort(res.waits)
	res.Turns = len(res.waits)
	if res.Turns > 0 {
		res.MeanGenerationMS = benchkit.MS(busySum) / float64(res.Turns)
	}
	if s.Update != "" {
		// The measured window: from the first update's start, on the
		// fleet's own busy ledgers.
		res.Seconds = upd.win.Sub(upd.winFrom).Seconds()
		res.Utilisation = 1 - upd.Idle/(float64(cfg.Policies)*res.Seconds)
		res.turnsByDeadline = 0
		for _, t := range all {
			if !t.end.Before(upd.winFrom) && !t.end.After(upd.win) {
				res.turnsByDeadline++
			}
		}
		waits := duringUpdates(all, upd.intervals)
		upd.WaitP50, upd.WaitP99 = updatesim.Percentile(waits, 0.5), updatesim.Percentile(waits, 0.99)
		res.Updates = &updateReport{Live: upd}
	}
	stats, err := rt.API.Stats(ctx)
	res.Sticky = stats.Sticky
	return res, err
}

// sampleUtilisation reads the fleet's busy times every interval from start
// until deadline, or until ctx ends, and returns the utilisation of each
// interval (busy time over policies times the interval), the busy time
// over the whole and when its last sample was taken.
func sampleUtilisation(ctx context.Context, f *fakepolicy.Fleet, start, deadline time.Time, every time.Duration) ([]float64, time.Duration, time.Time) {
	first := fleetBusy(f)
	prev, prevAt := first, start
	var series []float64
	for at := start.Add(every); ; at = at.Add(every) {
		if at.After(deadline) {
			at = deadline
		}
		stopped := !benchkit.SleepUntil(ctx, at)
		b, now := fleetBusy(f), time.Now()
		if now.After(prevAt) {
			series = append(series, (b-prev).Seconds()/(float64(f.Len())*now.Sub(prevAt).Seconds()))
		}
		prev, prevAt = b, now
		if stopped || !at.Before(deadline) {
			return series, prev - first, now
		}
	}
}

// envWorker is one simulated env worker.
type envWorker struct {
	k          int // its index: env id "env-k", on node k % N
	cfg        rolloutConfig
	s          strategy
	hc         *http.Client
	router     *client.Client
	node       string
	stepMedian time.Duration
	deadline   time.Time // no turn starts after it
	rng        *rand.Rand
}

// run runs episodes back to back until the deadline, or cfg.Episodes of
// them; the turn in flight at the deadline then finishes. Only episodes
// ended by the deadline count.
func (w envWorker) run(ctx context.Context) workerOutcome {
	var out workerOutcome
	env := "env-" + strconv.Itoa(w.k)
	timeout, stickyWait := 60000, int(w.cfg.StickyWait.Milliseconds())
	for ep := 0; w.cfg.Episodes == 0 || ep < w.cfg.Episodes; ep++ {
		episode := env + "-ep-" + strconv.Itoa(ep)
		sel := api.SelectRequest{EnvID: env, Router: w.s.Router, TimeoutMS: &timeout}
		if w.s.Sessions {
			sel.SessionID, sel.StickyWaitMS = episode, &stickyWait
			if w.cfg.LoadFactor > 0 {
				sel.LoadFactor = &w.cfg.LoadFactor
			}
		}
		for range w.cfg.Turns {
			step := time.Duration(float64(w.stepMedian) * math.Exp(w.cfg.EnvSigma*w.rng.NormFloat64()))
			gen := min(time.Duration(float64(w.cfg.GenMedian)*math.Exp(w.cfg.GenSigma*w.rng.NormFloat64())), w.cfg.genCap())
			if !time.Now().Add(step).Before(w.deadline) || !benchkit.SleepUntil(ctx, time.Now().Add(step)) {
				return out
			}
			t, err := w.turn(ctx, sel, episode, max(int(gen.Seconds()*tokensPerSecond), 1))
			if err != nil {
				if ctx.Err() != nil { // the run's hard bound, not a failure
					return out
				}
				out.err = err
				return out
			}
			out.turns = append(out.turns, t)
			if !time.Now().After(w.deadline) {
				out.done++
			}
		}
		if !time.Now().After(w.deadline) {
			out.episodes++
		}
	}
	return out
}

// turn runs one turn of n tokens: select, the cross-node latency if any,
// generate (the rest again on the same policy after an abort, which that
// policy holds until it resumes), release.
func (w envWorker) turn(ctx context.Context, sel api.SelectRequest, episode string, n int) (turnOutcome, error) {
	t := turnOutcome{start: time.Now()}
	s, err := selectRetrying(ctx, w.router, sel)
	if err != nil {
		return t, err
	}
	t.crossNode = s.NodeID != w.node
	if t.crossNode && w.cfg.CrossNode > 0 && !benchkit.SleepUntil(ctx, time.Now().Add(w.cfg.CrossNode)) {
		return t, ctx.Err()
	}
	for left, first := n, true; left > 0; first = false {
		var g struct {
			BusyMS    float64 `json:"busy_ms"`
			PrefixHit bool    `json:"prefix_hit"`
			Meta      struct {
				Tokens int `json:"completion_tokens"`
				Finish struct {
					Type string `json:"type"`
				} `json:"finish_reason"`
			} `json:"meta_info"`
		}
		body := []byte(`{"session_id":"` + episode + `","sampling_params":{"max_new_tokens":` + strconv.Itoa(left) + `}}`)
		if err := client.New(s.URL, w.hc).Do(ctx, http.MethodPost, "/generate", body, &g); err != nil {
			return t, fmt.Errorf("generate on policy %d: %w", s.Index, err)
		}
		if first {
			t.busy, t.hit = time.Duration(g.BusyMS*float64(time.Millisecond)), g.PrefixHit
		}
		left -= g.Meta.Tokens
		if g.Meta.Finish.Type != "abort" {
			break
		}
	}
	if s.LeaseID != "" { // round robin hands out no lease; an aborted lease is released already
		if _, err := w.router.Release(ctx, s.LeaseID); err != nil {
			return t, err
		}
	}
	t.end = time.Now()
	t.wait = max(t.end.Sub(t.start)-t.busy, 0)
	return t, nil
}

// selectRetrying is POST /select, asked again 10 ms after a 503 (nothing
// routable: every policy drained for an update), as a trainer does.
func selectRetrying(ctx context.Context, c *client.Client, sel api.SelectRequest) (api.SelectResponse, error) {
	for {
		s, err := c.Select(ctx, sel)
		var ce *client.Error
		if err == nil || !errors.As(err, &ce) || ce.StatusCode != http.StatusServiceUnavailable || !benchkit.SleepUntil(ctx, time.Now().Add(10*time.Millisecond)) {
			return s, err
		}
	}
}

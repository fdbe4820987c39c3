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
	"sync/atomic"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/fakepolicy"
)

// stragglerGrace bounds how long the turns in flight at the end of a run
// may take to finish before they are cancelled.
const stragglerGrace = 30 * time.Second

// turnOutcome is what an env worker records of one turn.
type turnOutcome struct {
	wait      time.Duration // the turn's wall time less the generation's own
	busy      time.Duration // the generation's time on the policy
	hit       bool          // the policy had the episode's prefix cached
	crossNode bool          // the policy sat on another node than the worker
}

// workerOutcome is what one env worker did in a run.
type workerOutcome struct {
	episodes int // episodes ended by the deadline
	done     int // turns ended by the deadline
	turns    []turnOutcome
	err      error
}

// runStrategy runs one strategy at one load on a fresh router and fleet,
// for cfg.Duration, and returns the raw figures (scored by the caller).
func runStrategy(ctx context.Context, cfg rolloutConfig, load float64, s strategy) (*strategyResult, error) {
	client := newClient(cfg.Envs + 8)
	// A turn may wait longer than the harness's per-request bound (long
	// generations queued at a busy policy); runCtx bounds the run instead.
	client.Timeout = 0
	defer client.CloseIdleConnections()
	rt, err := startRouter(ctx, routerConfig{
		Policies: cfg.Policies, Nodes: cfg.Nodes, Envs: cfg.Envs, Seed: cfg.Seed,
		PollInterval: cfg.PollInterval, LogLevel: cfg.LogLevel,
		Fleet: fakepolicy.Options{
			GenMedian: cfg.GenMedian, GenSigma: cfg.GenSigma, Serial: true,
			PrefixCache: cfg.Cache, PrefixSpeedup: cfg.Speedup, UpdateTime: cfg.UpdateTime,
		},
	}, client)
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	if err := waitReady(ctx, client, rt.URL); err != nil {
		return nil, err
	}

	start := time.Now()
	deadline := start.Add(cfg.Duration)
	runCtx, cancel := context.WithDeadline(ctx, deadline.Add(stragglerGrace))
	defer cancel()

	var wg sync.WaitGroup
	var series []float64
	var busy time.Duration // summed over policies, start to deadline
	wg.Go(func() { series, busy = sampleUtilisation(runCtx, rt.fleet, start, deadline, cfg.Sample) })
	var upd updateOutcome
	if s.Update != "" {
		wg.Go(func() { upd = runUpdates(runCtx, cfg, s.Update, client, rt.URL, start, deadline) })
	}
	outcomes := make([]workerOutcome, cfg.Envs)
	stepMedian := time.Duration(float64(cfg.envStepMean(load)) * math.Exp(-cfg.EnvSigma*cfg.EnvSigma/2))
	for k := range cfg.Envs {
		w := envWorker{
			k: k, cfg: cfg, s: s, client: client, router: rt.URL,
			node: nodeName(k, cfg.Nodes), stepMedian: stepMedian, deadline: deadline,
			rng: rand.New(rand.NewPCG(cfg.Seed, uint64(k)+1)),
		}
		wg.Go(func() { outcomes[k] = w.run(runCtx) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	if upd.err != nil {
		return nil, fmt.Errorf("weight updates: %w", upd.err)
	}
	res := &strategyResult{
		Strategy: s.Name, Router: s.Router, Sessions: s.Sessions, Update: s.Update,
		Seconds: deadline.Sub(start).Seconds(), UtilisationSeries: series,
		Updates: upd.updates, UpdateLostGPUSeconds: upd.lost,
	}
	res.Utilisation = busy.Seconds() / (float64(cfg.Policies) * res.Seconds)
	var busySum time.Duration
	for _, o := range outcomes {
		if o.err != nil {
			return nil, o.err
		}
		res.Episodes += o.episodes
		res.turnsByDeadline += o.done
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
		res.MeanGenerationMS = ms(busySum) / float64(res.Turns)
	}
	var stats api.Stats
	if err := send(ctx, client, http.MethodGet, rt.URL+"/stats", nil, &stats); err != nil {
		return nil, err
	}
	res.Sticky = stats.Sticky
	return res, nil
}

// sampleUtilisation reads the fleet's busy times every interval from start
// to deadline and returns the utilisation of each interval (busy time over
// policies times the interval) and the busy time from start to deadline.
func sampleUtilisation(ctx context.Context, f *fakepolicy.Fleet, start, deadline time.Time, every time.Duration) ([]float64, time.Duration) {
	sum := func() time.Duration {
		var s time.Duration
		for _, b := range f.BusyTimes() {
			s += b
		}
		return s
	}
	first := sum()
	prev, prevAt := first, start
	var series []float64
	for at := start.Add(every); ; at = at.Add(every) {
		if at.After(deadline) {
			at = deadline
		}
		if !sleepUntil(ctx, at) {
			return series, prev - first
		}
		b, now := sum(), time.Now()
		if now.After(prevAt) {
			series = append(series, (b-prev).Seconds()/(float64(f.Len())*now.Sub(prevAt).Seconds()))
		}
		prev, prevAt = b, now
		if !at.Before(deadline) {
			return series, prev - first
		}
	}
}

// sleepUntil sleeps until t or ctx's end, and reports whether t came.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// envWorker is one simulated env worker.
type envWorker struct {
	k          int // its index: env id "env-k", on node k % N
	cfg        rolloutConfig
	s          strategy
	client     *http.Client
	router     string
	node       string
	stepMedian time.Duration
	deadline   time.Time // no turn starts after it
	rng        *rand.Rand
}

// run runs episodes back to back until the deadline; the turn in flight
// then finishes. Only episodes ended by the deadline count.
func (w envWorker) run(ctx context.Context) workerOutcome {
	var out workerOutcome
	env := "env-" + strconv.Itoa(w.k)
	for ep := 0; ; ep++ {
		episode := env + "-ep-" + strconv.Itoa(ep)
		sel := map[string]any{"env_id": env, "router": w.s.Router, "timeout_ms": 60000}
		if w.s.Sessions {
			sel["session_id"] = episode
			sel["sticky_wait_ms"] = w.cfg.StickyWait.Milliseconds()
			if w.cfg.LoadFactor > 0 {
				sel["load_factor"] = w.cfg.LoadFactor
			}
		}
		gen := []byte(`{"session_id":"` + episode + `"}`)
		for range w.cfg.Turns {
			step := time.Duration(float64(w.stepMedian) * math.Exp(w.cfg.EnvSigma*w.rng.NormFloat64()))
			if !time.Now().Add(step).Before(w.deadline) || !sleepUntil(ctx, time.Now().Add(step)) {
				return out
			}
			t, err := w.turn(ctx, sel, gen)
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
}

// turn runs one turn: select, the cross-node latency if any, generate,
// release.
func (w envWorker) turn(ctx context.Context, sel map[string]any, gen []byte) (turnOutcome, error) {
	var t turnOutcome
	t0 := time.Now()
	var s api.SelectResponse
	for {
		err := postJSON(ctx, w.client, w.router+"/select", sel, &s)
		if err == nil {
			break
		}
		// Nothing routable (every policy drained for an update): ask again
		// shortly, as a trainer does.
		var se *statusError
		if !errors.As(err, &se) || se.Code != http.StatusServiceUnavailable || !sleepUntil(ctx, time.Now().Add(10*time.Millisecond)) {
			return t, err
		}
	}
	t.crossNode = s.NodeID != w.node
	if t.crossNode && w.cfg.CrossNode > 0 && !sleepUntil(ctx, time.Now().Add(w.cfg.CrossNode)) {
		return t, ctx.Err()
	}
	var g struct {
		BusyMS    float64 `json:"busy_ms"`
		PrefixHit bool    `json:"prefix_hit"`
	}
	if err := post(ctx, w.client, s.URL+"/generate", gen, &g); err != nil {
		return t, fmt.Errorf("generate on policy %d: %w", s.Index, err)
	}
	if s.LeaseID != "" { // round robin hands out no lease
		if err := post(ctx, w.client, w.router+"/release", []byte(`{"lease_id":"`+s.LeaseID+`"}`), nil); err != nil {
			return t, err
		}
	}
	t.busy = time.Duration(g.BusyMS * float64(time.Millisecond))
	t.hit = g.PrefixHit
	t.wait = max(time.Since(t0)-t.busy, 0)
	return t, nil
}

// updateOutcome is what the weight updates of one run did.
type updateOutcome struct {
	updates int     // update cycles finished
	lost    float64 // policy-seconds out of routing (drained) for updates
	err     error
}

// runUpdates starts a weight update every cfg.UpdateEvery until the
// deadline, each to the next version, rolling (POST /updates) or pausing
// everything as frameworks do (pauseAll), one at a time, and samples how
// many policies are drained meanwhile.
func runUpdates(ctx context.Context, cfg rolloutConfig, mode string, c *http.Client, base string, start, deadline time.Time) (out updateOutcome) {
	var drainedSamples atomic.Int64
	const sample = 20 * time.Millisecond
	sampleCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for sleepUntil(sampleCtx, time.Now().Add(sample)) && time.Now().Before(deadline) {
			var stats api.Stats
			if send(sampleCtx, c, http.MethodGet, base+"/stats", nil, &stats) == nil {
				drainedSamples.Add(int64(stats.Totals.Draining))
			}
		}
	})
	defer func() {
		stop()
		wg.Wait()
		out.lost = float64(drainedSamples.Load()) * sample.Seconds()
	}()
	version := int64(1)
	for next := start.Add(cfg.UpdateEvery); next.Before(deadline); next = next.Add(cfg.UpdateEvery) {
		if !sleepUntil(ctx, next) {
			return out
		}
		version++
		var err error
		if mode == updatePauseAll {
			var idle atomic.Int64
			err = pauseAll(ctx, c, base, version, &idle)
		} else {
			err = rollingUpdate(ctx, c, base, version, cfg.UpdateRolling)
		}
		if err != nil {
			if ctx.Err() == nil {
				out.err = err
			}
			return out
		}
		out.updates++
	}
	return out
}

// rollingUpdate runs POST /updates to version, max_unavailable n, and
// waits for it to end.
func rollingUpdate(ctx context.Context, c *http.Client, base string, version int64, n int) error {
	v := strconv.FormatInt(version, 10)
	body := []byte(`{"version": ` + v + `, "max_unavailable": ` + strconv.Itoa(n) + `, "drain_timeout_ms": 60000,
		"action": {"path": "/update_weights_from_disk", "body": {"version": ` + v + `}, "timeout_ms": 60000}}`)
	var u api.Update
	if err := post(ctx, c, base+"/updates", body, &u); err != nil {
		return err
	}
	for u.State == "running" {
		if !sleepUntil(ctx, time.Now().Add(20*time.Millisecond)) {
			return ctx.Err()
		}
		if err := send(ctx, c, http.MethodGet, base+"/updates/"+u.ID, nil, &u); err != nil {
			return err
		}
	}
	if u.State != "succeeded" {
		return fmt.Errorf("update to version %d ended %s: %s", version, u.State, u.Error)
	}
	return nil
}

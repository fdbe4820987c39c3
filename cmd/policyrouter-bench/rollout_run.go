package main

import (
	"context"
	"encoding/json"
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
	"github.com/policyrouter/policyrouter/routing"
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
// for cfg.Duration (or, with cfg.Episodes, until every env worker has run
// its episodes), and returns the raw figures (scored by the caller).
func runStrategy(ctx context.Context, cfg rolloutConfig, load float64, s strategy) (*strategyResult, error) {
	hc := newClient(cfg.Envs + 8)
	// A turn may wait longer than the harness's per-request bound (long
	// generations queued at a busy policy); runCtx bounds the run instead.
	hc.Timeout = 0
	defer hc.CloseIdleConnections()
	rt, err := startRouter(ctx, routerConfig{
		Policies: cfg.Policies, Nodes: cfg.Nodes, Envs: cfg.Envs, Seed: cfg.Seed,
		PollInterval: cfg.PollInterval, LogLevel: cfg.LogLevel,
		Fleet: fakepolicy.Options{
			GenMedian: cfg.GenMedian, GenSigma: cfg.GenSigma, Serial: true,
			PrefixCache: cfg.Cache, PrefixSpeedup: cfg.Speedup, UpdateTime: cfg.UpdateTime,
		},
	}, hc)
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
	wg.Go(func() { series, busy, end = sampleUtilisation(sampleCtx, rt.fleet, start, deadline, cfg.Sample) })
	var upd updateOutcome
	if s.Update != "" {
		wg.Go(func() { upd = runUpdates(sampleCtx, cfg, s.Update, rt, start, deadline) })
	}
	outcomes := make([]workerOutcome, cfg.Envs)
	stepMedian := time.Duration(float64(cfg.envStepMean(load)) * math.Exp(-cfg.EnvSigma*cfg.EnvSigma/2))
	for k := range cfg.Envs {
		w := envWorker{
			k: k, cfg: cfg, s: s, hc: hc, router: rt.API,
			node: nodeName(k, cfg.Nodes), stepMedian: stepMedian, deadline: deadline,
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
		Updates: upd.updates, UpdatesLate: upd.late, UpdateLostGPUSeconds: upd.lost, UpdateIdleGPUSeconds: upd.idle,
		UpdateCycleSeconds: upd.cycle, MinRoutable: upd.minRoutable,
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
	stats, err := rt.API.Stats(ctx)
	res.Sticky = stats.Sticky
	return res, err
}

// sampleUtilisation reads the fleet's busy times every interval from start
// until deadline, or until ctx ends, and returns the utilisation of each
// interval (busy time over policies times the interval), the busy time
// over the whole and when its last sample was taken.
func sampleUtilisation(ctx context.Context, f *fakepolicy.Fleet, start, deadline time.Time, every time.Duration) ([]float64, time.Duration, time.Time) {
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
		stopped := !sleepUntil(ctx, at)
		b, now := sum(), time.Now()
		if now.After(prevAt) {
			series = append(series, (b-prev).Seconds()/(float64(f.Len())*now.Sub(prevAt).Seconds()))
		}
		prev, prevAt = b, now
		if stopped || !at.Before(deadline) {
			return series, prev - first, now
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
	return out
}

// turn runs one turn: select, the cross-node latency if any, generate,
// release.
func (w envWorker) turn(ctx context.Context, sel api.SelectRequest, gen []byte) (turnOutcome, error) {
	var t turnOutcome
	t0 := time.Now()
	s, err := selectRetrying(ctx, w.router, sel)
	if err != nil {
		return t, err
	}
	t.crossNode = s.NodeID != w.node
	if t.crossNode && w.cfg.CrossNode > 0 && !sleepUntil(ctx, time.Now().Add(w.cfg.CrossNode)) {
		return t, ctx.Err()
	}
	var g struct {
		BusyMS    float64 `json:"busy_ms"`
		PrefixHit bool    `json:"prefix_hit"`
	}
	if err := client.New(s.URL, w.hc).Do(ctx, http.MethodPost, "/generate", gen, &g); err != nil {
		return t, fmt.Errorf("generate on policy %d: %w", s.Index, err)
	}
	if s.LeaseID != "" { // round robin hands out no lease
		if _, err := w.router.Release(ctx, s.LeaseID); err != nil {
			return t, err
		}
	}
	t.busy = time.Duration(g.BusyMS * float64(time.Millisecond))
	t.hit = g.PrefixHit
	t.wait = max(time.Since(t0)-t.busy, 0)
	return t, nil
}

// selectRetrying is POST /select, asked again 10 ms after a 503 (nothing
// routable: every policy drained for an update), as a trainer does.
func selectRetrying(ctx context.Context, c *client.Client, sel api.SelectRequest) (api.SelectResponse, error) {
	for {
		s, err := c.Select(ctx, sel)
		var ce *client.Error
		if err == nil || !errors.As(err, &ce) || ce.StatusCode != http.StatusServiceUnavailable || !sleepUntil(ctx, time.Now().Add(10*time.Millisecond)) {
			return s, err
		}
	}
}

// updateOutcome is what the weight updates of one run did.
type updateOutcome struct {
	updates     int     // update cycles finished by the deadline
	late        int     // of those, started late: the previous cycle outlasted -update-every
	cycle       float64 // their mean length, seconds
	lost        float64 // policy-seconds out of routing (drained) for updates
	idle        float64 // of those, drained with no work and not loading weights
	minRoutable int     // fewest policies routable (idle or busy) at a sample
	err         error
}

// runUpdates starts a weight update every cfg.UpdateEvery until the
// deadline (at most cfg.Updates of them, when set), each to the next
// version and one at a time, by mode: rolling (POST /updates,
// max_unavailable cfg.UpdateRolling), all (POST /updates, "100%"), or
// pausing everything as frameworks do (pauseAll); none starts no update,
// for the baseline. Meanwhile it samples how many policies are drained,
// drained and idle, and routable.
func runUpdates(ctx context.Context, cfg rolloutConfig, mode string, rt *routerUnderTest, start, deadline time.Time) (out updateOutcome) {
	const sample = 20 * time.Millisecond
	var drained, idle int
	out.minRoutable = cfg.Policies
	sampleCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for sleepUntil(sampleCtx, time.Now().Add(sample)) && time.Now().Before(deadline) {
			stats, err := rt.API.Stats(sampleCtx)
			if err != nil {
				continue
			}
			t := stats.Totals
			drained += t.Draining
			out.minRoutable = min(out.minRoutable, t.Policies-t.Draining-t.Unhealthy-t.Unknown)
			for _, p := range stats.Policies {
				if p.State == routing.StateDraining && p.Index < rt.fleet.Len() && rt.fleet.Policy(p.Index).Idle() {
					idle++
				}
			}
		}
	})
	defer func() {
		stop()
		wg.Wait()
		out.lost, out.idle = float64(drained)*sample.Seconds(), float64(idle)*sample.Seconds()
		if out.updates > 0 {
			out.cycle /= float64(out.updates)
		}
	}()
	version := int64(1)
	for next := start.Add(cfg.UpdateEvery); next.Before(deadline) && mode != updateNone && (cfg.Updates == 0 || out.updates < cfg.Updates); next = next.Add(cfg.UpdateEvery) {
		if !sleepUntil(ctx, next) {
			return out
		}
		// sleepUntil returns at once for a time past: the previous cycle
		// did not fit the period, and this one starts late.
		late := time.Since(next) > 50*time.Millisecond
		version++
		t0 := time.Now()
		var err error
		switch mode {
		case updatePauseAll:
			err = pauseAll(ctx, rt, version)
		case updateAll:
			err = rollingUpdate(ctx, rt.API, version, json.RawMessage(`"100%"`))
		default:
			err = rollingUpdate(ctx, rt.API, version, json.RawMessage(strconv.Itoa(cfg.UpdateRolling)))
		}
		if err != nil {
			if ctx.Err() == nil {
				out.err = err
			}
			return out
		}
		if time.Now().After(deadline) {
			return out // a cycle cut by the end of the run is not a whole update
		}
		out.updates++
		if late {
			out.late++
		}
		out.cycle += time.Since(t0).Seconds()
	}
	return out
}

// rollingUpdate runs POST /updates to version with the given
// max_unavailable, and waits for it to end.
func rollingUpdate(ctx context.Context, c *client.Client, version int64, maxUnavailable json.RawMessage) error {
	timeout := 60000
	u, err := c.StartUpdate(ctx, api.UpdateRequest{
		Version: &version, MaxUnavailable: maxUnavailable, DrainTimeoutMS: &timeout,
		Action: &api.UpdateAction{Path: "/update_weights_from_disk", Body: json.RawMessage(`{"version": ` + strconv.FormatInt(version, 10) + `}`), TimeoutMS: &timeout},
	})
	for err == nil && u.State == "running" {
		if !sleepUntil(ctx, time.Now().Add(20*time.Millisecond)) {
			return ctx.Err()
		}
		u, err = c.Update(ctx, u.ID)
	}
	if err == nil && u.State != "succeeded" {
		err = fmt.Errorf("update to version %d ended %s: %s", version, u.State, u.Error)
	}
	return err
}

// pauseAll updates every policy as training frameworks do: drain them
// all, wait until the last request on any of them has ended, send every
// policy the update at once, and resume them all when every update has
// answered.
func pauseAll(ctx context.Context, rt *routerUnderTest, version int64) error {
	list, err := rt.API.Policies(ctx)
	if err != nil {
		return err
	}
	for _, p := range list.Policies {
		if _, err := rt.API.Drain(ctx, p.ID); err != nil {
			return err
		}
	}
	for busy := true; busy; {
		stats, err := rt.API.Stats(ctx)
		if err != nil {
			return err
		}
		busy = stats.Totals.Inflight > 0
		if busy && !sleepUntil(ctx, time.Now().Add(10*time.Millisecond)) {
			return ctx.Err()
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(list.Policies))
	body := []byte(`{"version": ` + strconv.FormatInt(version, 10) + `}`)
	for i, p := range list.Policies {
		wg.Go(func() {
			errs[i] = client.New(p.URL, rt.hc).Do(ctx, http.MethodPost, "/update_weights_from_disk", body, nil)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, p := range list.Policies {
		if _, err := rt.API.Resume(ctx, p.ID); err != nil {
			return err
		}
	}
	return nil
}

package main

// Weight updates in the live rollout: the seven strategies of
// internal/updatesim against the real router and fake SGLang engines, each
// on the same workload (flags, fresh router and fleet, per-worker seeded
// env steps and generation lengths), warmed up one period, then -updates
// updates one period apart; the model's figures for the same
// configuration are printed beside them. Rolling is the router's POST
// /updates (pause_mode, max_unavailable k); pause-all drains every policy
// in the router, then pauses, loads and continues every engine itself.
// An aborted turn sends its remaining tokens to the same policy again,
// which holds them until it resumes.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/client"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/benchkit"
	"github.com/policyrouter/policyrouter/internal/updatesim"
)

// tokensPerSecond is the fake engines' speed: a turn of generation time g
// asks for g x tokensPerSecond tokens.
const tokensPerSecond = 1000

// genCap cuts generations at 30 medians (the model's GenMax).
func (c rolloutConfig) genCap() time.Duration { return 30 * c.GenMedian }

// sglangMode is the pause mode of the fake SGLang engines for a model
// strategy's: keep is SGLang's in_place; wait and abort are the router's
// own (wait drains first, then retracts what is left).
func sglangMode(pause string) string {
	if pause == updatesim.PauseKeep {
		return engine.PauseInPlace
	}
	return pause
}

// sglang is the engine's update calls, as the router sends them.
var sglang, _ = engine.Lookup(fakepolicy.EngineSGLang)

// modelConfig is the updatesim configuration of the live run: serial
// policies (capacity 1), no prefix cost (-cache 0), the router's poll
// interval as the controller's lag.
func (c rolloutConfig) modelConfig(load float64) updatesim.Config {
	return updatesim.Config{
		Policies: c.Policies, Capacity: 1, Envs: c.Envs, Turns: c.Turns,
		GenMedian: c.GenMedian, GenSigma: c.GenSigma, GenMax: c.genCap(),
		EnvMedian: c.stepMedian(load), EnvSigma: c.EnvSigma,
		Period: c.UpdateEvery, LoadTime: c.UpdateTime, ControlLag: c.PollInterval,
		MaxUnavailable: min(c.UpdateRolling, c.Policies), Updates: c.Updates, Seed: c.Seed,
	}
}

// updateLive is what the updates of one run did, measured.
type updateLive struct {
	Updates  int     `json:"updates"`   // whole updates in the window
	Late     int     `json:"late"`      // started late: a cycle did not fit the period
	MaxCycle float64 `json:"max_cycle"` // seconds
	// Idle is policy-seconds not generating in the window, from the fake
	// engines' own busy ledgers (loading weights is not busy).
	Idle    float64 `json:"idle_policy_seconds"`
	WaitP50 float64 `json:"wait_p50_s"` // over the turns that overlapped an update
	WaitP99 float64 `json:"wait_p99_s"`
	// MinRoutable is the fewest policies in routing during the updates:
	// pause-all drains them all; a rolling update's document says when
	// each policy was drained and when it was done.
	MinRoutable  int `json:"min_routable"`
	intervals    [][2]time.Time
	winFrom, win time.Time
	busy0        time.Duration
	err          error
}

// updateReport is one update strategy's live figures and the model's.
type updateReport struct {
	Live updateLive `json:"live"`
	// LostPerUpdate is the live idle policy-seconds beyond the no-update
	// baseline's, per update; 0 without a baseline run.
	LostPerUpdate float64          `json:"lost_per_update"`
	Model         updatesim.Result `json:"model"`
}

// runUpdates runs the updates of strategy name on rt: one every period
// from start + period, cfg.Updates of them, one at a time (a cycle that
// outlasts the period delays the next, which is reported late). It reads
// the fleet's busy ledgers at the window's start and end.
func runUpdates(ctx context.Context, cfg rolloutConfig, name string, rt *benchkit.Router, start time.Time) (out updateLive) {
	s, _ := updatesim.Lookup(name)
	out.winFrom, out.win = start.Add(cfg.UpdateEvery), start.Add(time.Duration(cfg.Updates+1)*cfg.UpdateEvery)
	if !benchkit.SleepUntil(ctx, out.winFrom) {
		return out
	}
	out.busy0 = fleetBusy(rt.Fleet)
	out.MinRoutable = cfg.Policies
	for i := range cfg.Updates {
		if s.Pause == "" {
			break
		}
		next := out.winFrom.Add(time.Duration(i) * cfg.UpdateEvery)
		if !benchkit.SleepUntil(ctx, next) {
			return out
		}
		late := time.Since(next) > 50*time.Millisecond
		version := int64(i + 2)
		t0 := time.Now()
		var err error
		drained := cfg.Policies // pause-all drains every policy
		if s.Rolling {
			drained, err = rollingUpdate(ctx, rt.API, version, cfg.UpdateRolling, s.Pause)
		} else {
			err = pauseAll(ctx, rt, version, s.Pause)
		}
		out.MinRoutable = min(out.MinRoutable, cfg.Policies-drained)
		if err != nil {
			if ctx.Err() == nil {
				out.err = err
			}
			return out
		}
		if time.Now().After(out.win) {
			break // cut by the end of the window: not a whole update
		}
		out.intervals = append(out.intervals, [2]time.Time{t0, time.Now()})
		out.Updates++
		out.MaxCycle = max(out.MaxCycle, time.Since(t0).Seconds())
		if late {
			out.Late++
		}
	}
	if benchkit.SleepUntil(ctx, out.win) {
		out.Idle = float64(cfg.Policies)*cfg.UpdateEvery.Seconds()*float64(cfg.Updates) - (fleetBusy(rt.Fleet) - out.busy0).Seconds()
	}
	return out
}

// fleetBusy is the fleet's busy time so far, summed over its policies.
func fleetBusy(f *fakepolicy.Fleet) (s time.Duration) {
	for _, b := range f.BusyTimes() {
		s += b
	}
	return s
}

func modelPath(version int64) string { return "/ckpt/v" + strconv.FormatInt(version, 10) }

// rollingUpdate runs POST /updates to version with max_unavailable k and
// the pause mode, waits for it to end, and returns the most policies it
// held out of routing at once.
func rollingUpdate(ctx context.Context, c *client.Client, version int64, k int, pause string) (int, error) {
	timeout, mode := 60000, sglangMode(pause)
	u, err := c.StartUpdate(ctx, api.UpdateRequest{Version: &version, MaxUnavailable: json.RawMessage(strconv.Itoa(k)),
		DrainTimeoutMS: &timeout, ModelPath: modelPath(version), PauseMode: mode})
	for err == nil && u.State == "running" {
		if !benchkit.SleepUntil(ctx, time.Now().Add(10*time.Millisecond)) {
			return 0, ctx.Err()
		}
		u, err = c.Update(ctx, u.ID)
	}
	if err == nil && u.State != "succeeded" {
		err = fmt.Errorf("update to version %d ended %s: %s", version, u.State, u.Error)
	}
	return maxOut(u.Policies), err
}

// maxOut is the most policies out of routing at once: each is out from
// the drain to its end.
func maxOut(ps []api.UpdatePolicy) int {
	type edge struct {
		at time.Time
		d  int
	}
	var es []edge
	for _, p := range ps {
		if p.Drained != nil && p.Ended != nil {
			es = append(es, edge{*p.Drained, 1}, edge{*p.Ended, -1})
		}
	}
	// At equal times the ends come first: a wave that starts as the last
	// ends does not overlap it.
	slices.SortFunc(es, func(a, b edge) int { return cmp.Or(a.at.Compare(b.at), a.d-b.d) })
	out, n := 0, 0
	for _, e := range es {
		n += e.d
		out = max(out, n)
	}
	return out
}

// pauseAll updates every policy as training frameworks do: take them all
// out of routing, wait for the last request in flight (pause mode wait
// only: the barrier), then pause every engine in the mode, load the new
// weights, continue, and return them to routing.
func pauseAll(ctx context.Context, rt *benchkit.Router, version int64, pause string) error {
	list, err := rt.API.Policies(ctx)
	if err != nil {
		return err
	}
	for _, p := range list.Policies {
		if _, err := rt.API.Drain(ctx, p.ID); err != nil {
			return err
		}
	}
	for busy := pause == updatesim.PauseWait; busy; {
		stats, err := rt.API.Stats(ctx)
		if err != nil {
			return err
		}
		busy = stats.Totals.Inflight > 0
		if busy && !benchkit.SleepUntil(ctx, time.Now().Add(10*time.Millisecond)) {
			return ctx.Err()
		}
	}
	stop, _ := sglang.Pause(sglangMode(pause))
	load, _ := sglang.LoadFromDisk(modelPath(version), strconv.FormatInt(version, 10))
	resume, _ := sglang.Resume()
	var wg sync.WaitGroup
	errs := make([]error, len(list.Policies))
	for i, p := range list.Policies {
		c := client.New(p.URL, rt.HTTP)
		wg.Go(func() {
			for _, call := range []engine.Call{stop, load, resume} {
				if errs[i] = c.Do(ctx, call.Method, call.Path, call.Body, nil); errs[i] != nil {
					return
				}
			}
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

// scoreUpdates fills in the update figures of every run at one load: the
// turns' waits during updates, the loss beyond the baseline's, and the
// model's figures for the same strategy.
func scoreUpdates(cfg rolloutConfig, load float64, rs []*strategyResult) error {
	idle := map[string]float64{}
	for _, r := range rs {
		if r.Update == "none" {
			idle[r.Router+strconv.FormatBool(r.Sessions)] = r.Updates.Live.Idle
		}
	}
	for _, r := range rs {
		s, _ := updatesim.Lookup(r.Update)
		m, err := updatesim.Run(cfg.modelConfig(load), s)
		if err != nil {
			return err
		}
		r.Updates.Model = m
		if base, ok := idle[r.Router+strconv.FormatBool(r.Sessions)]; ok && r.Updates.Live.Updates > 0 {
			r.Updates.LostPerUpdate = (r.Updates.Live.Idle - base) / float64(r.Updates.Live.Updates)
		}
	}
	return nil
}

// duringUpdates is the sorted waits of the turns that overlapped an update.
func duringUpdates(turns []turnOutcome, intervals [][2]time.Time) []float64 {
	var out []float64
	for _, t := range turns {
		if slices.ContainsFunc(intervals, func(iv [2]time.Time) bool { return !t.start.After(iv[1]) && !t.end.Before(iv[0]) }) {
			out = append(out, t.wait.Seconds())
		}
	}
	slices.Sort(out)
	return out
}

// writeUpdateTable prints the update strategies at one load, live beside
// the model.
func writeUpdateTable(w io.Writer, rs []*strategyResult) {
	fmt.Fprintf(w, "\n  weight updates, live | model (updatesim.Run, same configuration):\n")
	fmt.Fprintf(w, "  %-36s %9s %15s %19s %15s %15s %15s %9s\n", "strategy", "updates", "eps/s", "lost pol-s/upd", "wait p50 s", "wait p99 s", "max cycle s", "routable")
	for _, r := range rs {
		l, m := r.Updates.Live, r.Updates.Model
		late := ""
		if l.Late > 0 || !m.Fits {
			late = fmt.Sprintf(" (%d late; model fits: %t)", l.Late, m.Fits)
		}
		fmt.Fprintf(w, "  %-36s %4d|%-4d %7.2f|%-7.2f %9.2f|%-9.2f %7.3f|%-7.3f %7.3f|%-7.3f %7.2f|%-7.2f %4d|%-4d%s\n",
			r.Strategy, l.Updates, m.Updates, r.EpisodesPerSecond, m.EpisodesPerSecond, r.Updates.LostPerUpdate, m.LostPerUpdate.Total(),
			l.WaitP50, m.WaitP50, l.WaitP99, m.WaitP99, l.MaxCycle, m.MaxCycle, l.MinRoutable, m.MinRoutable, late)
	}
}

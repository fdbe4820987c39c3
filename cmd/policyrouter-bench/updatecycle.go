package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/fakepolicy"
)

// wUpdateCycle is not a floor-versus-router workload: it runs one weight
// update cycle under saturating sync load, rolling (POST /updates with a
// small max_unavailable), through POST /updates with "100%", and the way
// training frameworks pause everything (drain all, wait for the last
// request, update all, resume all), beside a run without an update, and
// reports what each cost the job.
const wUpdateCycle = "update_cycle"

// Update cycle modes besides a max_unavailable for POST /updates.
const (
	modeNone    = "none"    // no update: the baseline
	modeBarrier = "barrier" // the frameworks' pause-all, driven by the client
)

// updateCycleConfig sizes the update cycle run.
type updateCycleConfig struct {
	Policies, Nodes int
	Workers         int           // env workers, each one request at a time
	Median          time.Duration // median generation time (log-normal)
	Sigma           float64       // of the log-normal; 1 puts p99 at about 10x the median
	UpdateTime      time.Duration // how long a policy takes to load weights
	Window          time.Duration // requests are counted from the update's start for this long
	Rolling         int           // max_unavailable of the rolling update
}

// updateCycleRun is one mode's outcome.
type updateCycleRun struct {
	MaxUnavailable string `json:"max_unavailable"`
	// Served counts requests that ended within the window after the
	// update started.
	Served int `json:"served"`
	// CycleSeconds is how long the update took.
	CycleSeconds float64 `json:"cycle_seconds"`
	// MinRoutable is the fewest policies routable (not draining,
	// unhealthy or unknown) at any sample.
	MinRoutable int `json:"min_routable"`
	// IdleWaitingGPUSeconds adds, over the samples, the policies that were
	// drained and had no work left while the update waited for others:
	// capacity lost to stragglers.
	IdleWaitingGPUSeconds float64 `json:"idle_waiting_gpu_seconds"`
	State                 string  `json:"state"`
	Error                 string  `json:"error,omitempty"`
}

// updateCycleResult is both modes, in the report.
type updateCycleResult struct {
	Policies    int              `json:"policies"`
	Nodes       int              `json:"nodes"`
	Workers     int              `json:"workers"`
	MedianMS    float64          `json:"median_ms"`
	P99MS       float64          `json:"p99_ms"`
	UpdateMS    float64          `json:"update_ms"`
	WindowS     float64          `json:"window_s"`
	Runs        []updateCycleRun `json:"runs"`
	ServedRatio float64          `json:"served_ratio"` // rolling / pause-all
	// LostRatio is requests lost against the baseline, pause-all's over
	// rolling's.
	LostRatio    float64 `json:"lost_ratio"`
	RoutableRoll int     `json:"min_routable_rolling"`
}

// runUpdateCycle runs the cycle rolling, then pausing everything.
func runUpdateCycle(ctx context.Context, cfg config) (*updateCycleResult, error) {
	uc := cfg.UpdateCycle
	res := &updateCycleResult{
		Policies: uc.Policies, Nodes: uc.Nodes, Workers: uc.Workers, MedianMS: ms(uc.Median),
		P99MS: ms(uc.Median) * math.Exp(2.326*uc.Sigma), UpdateMS: ms(uc.UpdateTime), WindowS: uc.Window.Seconds(),
	}
	client := newClient(uc.Workers + 4)
	defer client.CloseIdleConnections()
	for _, mode := range []string{modeNone, strconv.Itoa(uc.Rolling), "100%", modeBarrier} {
		run, err := updateCycleOnce(ctx, cfg, client, mode)
		if err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, run)
	}
	if barrier := res.Runs[3].Served; barrier > 0 {
		res.ServedRatio = float64(res.Runs[1].Served) / float64(barrier)
	}
	res.RoutableRoll = res.Runs[1].MinRoutable
	base := res.Runs[0].Served
	if lost := base - res.Runs[1].Served; lost > 0 {
		res.LostRatio = float64(base-res.Runs[3].Served) / float64(lost)
	}
	return res, nil
}

// updateCycleOnce starts a fresh fleet and router, saturates it with env
// workers, waits a second, starts the update and counts the requests
// served in the window after its start.
func updateCycleOnce(ctx context.Context, cfg config, client *http.Client, maxUnavailable string) (updateCycleRun, error) {
	uc := cfg.UpdateCycle
	rt, err := startRouter(ctx, routerConfig{
		Policies: uc.Policies, Nodes: uc.Nodes, PollInterval: 20 * time.Millisecond, LogLevel: cfg.LogLevel,
		Fleet: fakepolicy.Options{UpdateTime: uc.UpdateTime},
		// The env workers generate by holding their lease; the fake
		// policies answer idle meanwhile, and must not free the lease.
		Grace: time.Hour,
	}, client)
	if err != nil {
		return updateCycleRun{}, err
	}
	defer rt.Close()
	if err := waitReady(ctx, client, rt.URL); err != nil {
		return updateCycleRun{}, err
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var (
		started   atomic.Int64 // unix nanoseconds the update started; 0 before
		served    atomic.Int64
		firstErr  atomic.Pointer[error]
		wg        sync.WaitGroup
		windowEnd atomic.Int64
	)
	for w := range uc.Workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			sel := []byte(`{"env_id":"env-` + strconv.Itoa(w%uc.Policies) + `","router":"idle_affinity","timeout_ms":5000}`)
			for loadCtx.Err() == nil {
				var s api.SelectResponse
				if err := post(loadCtx, client, rt.URL+"/select", sel, &s); err != nil {
					var se *statusError
					if errors.As(err, &se) && se.Code == http.StatusServiceUnavailable {
						// Nothing routable (every policy drained): ask
						// again shortly, as a trainer does.
						select {
						case <-time.After(10 * time.Millisecond):
						case <-loadCtx.Done():
						}
						continue
					}
					if loadCtx.Err() == nil {
						e := fmt.Errorf("select: %w", err)
						firstErr.CompareAndSwap(nil, &e)
					}
					return
				}
				// Generation: the lease is held for a log-normal time, the
				// long tail of rollout lengths.
				d := time.Duration(float64(uc.Median) * math.Exp(uc.Sigma*r.NormFloat64()))
				select {
				case <-time.After(d):
				case <-loadCtx.Done():
				}
				_ = post(context.WithoutCancel(loadCtx), client, rt.URL+"/release", []byte(`{"lease_id":"`+s.LeaseID+`"}`), nil)
				now := time.Now().UnixNano()
				if st := started.Load(); st != 0 && now <= windowEnd.Load() {
					served.Add(1)
				}
			}
		})
	}
	time.Sleep(time.Second) // the load settles

	start := time.Now()
	windowEnd.Store(start.Add(uc.Window).UnixNano())
	started.Store(start.UnixNano())
	var upd api.Update
	barrierDone := make(chan error, 1)
	var waitingIdle atomic.Int64 // barrier: sampled policy-samples drained, idle, waiting
	switch maxUnavailable {
	case modeNone:
		upd.State = "succeeded"
	case modeBarrier:
		go func() { barrierDone <- pauseAll(ctx, client, rt.URL, 2, &waitingIdle) }()
	default:
		body := []byte(`{"version": 2, "max_unavailable": ` + jsonMaxUnavailable(maxUnavailable) + `, "min_available_per_node": 0, "drain_timeout_ms": 60000,
			"action": {"path": "/update_weights_from_disk", "body": {"model_path": "/ckpt/step-2", "version": 2}, "timeout_ms": 60000}}`)
		if err := post(ctx, client, rt.URL+"/updates", body, &upd); err != nil {
			return updateCycleRun{}, fmt.Errorf("start update: %w", err)
		}
	}

	run := updateCycleRun{MaxUnavailable: maxUnavailable, MinRoutable: uc.Policies}
	const sample = 20 * time.Millisecond
	for time.Since(start) < uc.Window {
		var stats api.Stats
		if err := send(ctx, client, http.MethodGet, rt.URL+"/stats", nil, &stats); err != nil {
			return updateCycleRun{}, err
		}
		routable, idleDrained := 0, 0
		for _, p := range stats.Policies {
			switch p.State {
			case "draining", "unhealthy", "unknown":
			default:
				routable++
			}
		}
		run.MinRoutable = min(run.MinRoutable, routable)
		if run.CycleSeconds == 0 {
			switch maxUnavailable {
			case modeNone:
				run.CycleSeconds, run.State = sample.Seconds(), "succeeded"
			case modeBarrier:
				select {
				case err := <-barrierDone:
					run.CycleSeconds, run.State = time.Since(start).Seconds(), "succeeded"
					if err != nil {
						run.State, run.Error = "failed", err.Error()
					}
				default:
				}
			default:
				if err := send(ctx, client, http.MethodGet, rt.URL+"/updates/"+upd.ID, nil, &upd); err != nil {
					return updateCycleRun{}, err
				}
				// Drained with no work left, still waiting to be updated.
				for _, p := range upd.Policies {
					if p.Phase == "draining" {
						for _, ps := range stats.Policies {
							if ps.ID == p.ID && ps.Inflight == 0 {
								idleDrained++
							}
						}
					}
				}
				run.IdleWaitingGPUSeconds += float64(idleDrained) * sample.Seconds()
				if upd.State != "running" {
					run.CycleSeconds, run.State, run.Error = time.Since(start).Seconds(), upd.State, upd.Error
				}
			}
		}
		time.Sleep(sample)
	}
	stopLoad()
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return updateCycleRun{}, *e
	}
	if run.CycleSeconds == 0 {
		return updateCycleRun{}, fmt.Errorf("max_unavailable %s: the update did not end within the %v window", maxUnavailable, uc.Window)
	}
	if run.State != "succeeded" {
		return updateCycleRun{}, fmt.Errorf("max_unavailable %s: the update ended %s: %s", maxUnavailable, run.State, run.Error)
	}
	run.Served = int(served.Load())
	if maxUnavailable == modeBarrier {
		run.IdleWaitingGPUSeconds = float64(waitingIdle.Load()) * barrierSample.Seconds()
	}
	return run, nil
}

// barrierSample is how often pauseAll looks at the fleet while it waits.
const barrierSample = 10 * time.Millisecond

// pauseAll updates every policy as training frameworks do: drain them
// all, wait until the last request on any of them has ended (counting in
// idle, per sample, the drained policies that sit idle meanwhile), send
// every policy the update at once, and resume them all when every update
// has answered.
func pauseAll(ctx context.Context, c *http.Client, base string, version int64, idle *atomic.Int64) error {
	var list api.PolicyList
	if err := send(ctx, c, http.MethodGet, base+"/policies", nil, &list); err != nil {
		return err
	}
	for _, p := range list.Policies {
		if err := post(ctx, c, base+"/policies/"+p.ID+"/drain", nil, nil); err != nil {
			return err
		}
	}
	for {
		var stats api.Stats
		if err := send(ctx, c, http.MethodGet, base+"/stats", nil, &stats); err != nil {
			return err
		}
		busy, free := 0, 0
		for _, p := range stats.Policies {
			if p.Inflight > 0 {
				busy++
			} else {
				free++
			}
		}
		if busy == 0 {
			break
		}
		idle.Add(int64(free))
		time.Sleep(barrierSample)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(list.Policies))
	for i, p := range list.Policies {
		wg.Go(func() {
			v := strconv.FormatInt(version, 10)
			errs[i] = post(ctx, c, p.URL+"/update_weights_from_disk", []byte(`{"model_path": "/ckpt/step-`+v+`", "version": `+v+`}`), nil)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, p := range list.Policies {
		if err := post(ctx, c, base+"/policies/"+p.ID+"/resume", nil, nil); err != nil {
			return err
		}
	}
	return nil
}

func jsonMaxUnavailable(v string) string {
	if _, err := strconv.Atoi(v); err == nil {
		return v
	}
	return strconv.Quote(v)
}

// writeUpdateCycle prints the update cycle figures.
func writeUpdateCycle(w io.Writer, r *updateCycleResult) {
	fmt.Fprintf(w, "weight update cycle: %d fake policies on %d nodes, %d env workers, log-normal generation (median %.0f ms, p99 ~%.0f ms), %.0f ms to load weights, requests counted for %.0f s from the update's start\n",
		r.Policies, r.Nodes, r.Workers, r.MedianMS, r.P99MS, r.UpdateMS, r.WindowS)
	fmt.Fprintf(w, "  %-38s %10s %8s %6s %10s %14s %20s\n", "mode", "state", "served", "lost", "cycle s", "min routable", "idle waiting GPU-s")
	names := map[string]string{modeNone: "no update (baseline)", "100%": "POST /updates, max_unavailable 100%", modeBarrier: "pause-all with a barrier (frameworks)"}
	for _, run := range r.Runs {
		name := names[run.MaxUnavailable]
		if name == "" {
			name = "rolling, max_unavailable " + run.MaxUnavailable
		}
		fmt.Fprintf(w, "  %-38s %10s %8d %6d %10.2f %14d %20.2f\n", name, run.State, run.Served, r.Runs[0].Served-run.Served, run.CycleSeconds, run.MinRoutable, run.IdleWaitingGPUSeconds)
	}
	fmt.Fprintf(w, "  rolling / frameworks' pause-all requests served: %.2f; requests lost, pause-all / rolling: %.2f; fewest routable while rolling: %d of %d\n",
		r.ServedRatio, r.LostRatio, r.RoutableRoll, r.Policies)
}

package updatesim

import (
	"math"
	"testing"
	"time"
)

// oneWorker is a workload whose every figure can be worked out by hand:
// one env worker with no env step running one-turn episodes of exactly
// 1 s on the first of two serial policies (the least loaded, lowest
// index), so that at the first update, 10.5 s in, one request is half
// done on policy 0 and policy 1 is idle.
func oneWorker() Config {
	return Config{
		Policies: 2, Capacity: 1, Envs: 1, Turns: 1,
		GenMedian: time.Second, Period: 10 * time.Second, LoadTime: 2 * time.Second,
		ControlLag: 100 * time.Millisecond, MaxUnavailable: 1, Updates: 1,
		Warmup: 10500 * time.Millisecond, Seed: 1,
	}
}

func near(tb testing.TB, name string, got, want float64) {
	tb.Helper()
	if math.Abs(got-want) > 1e-9 {
		tb.Errorf("%s = %v, want %v", name, got, want)
	}
}

func run(tb testing.TB, cfg Config, name string) Result {
	tb.Helper()
	s, ok := Lookup(name)
	if !ok {
		tb.Fatalf("no strategy %q", name)
	}
	r, err := Run(cfg, s)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func TestPauseAllWaitByHand(t *testing.T) {
	r := run(t, oneWorker(), "pause-all wait")
	// Barrier: policy 0 runs its last 0.5 s (nothing lost), policy 1 idles
	// 0.5 s. Then both: lag 0.1, load 2, lag 0.1. The cycle is 2.7 s.
	near(t, "barrier", r.LostPerUpdate.Barrier, 0.5)
	near(t, "load", r.LostPerUpdate.Load, 4)
	near(t, "lag", r.LostPerUpdate.Lag, 0.4)
	near(t, "cycle", r.MaxCycle, 2.7)
	// Turns end at 11 (waited 0), then at 14.2 (arrived 11, waited 2.2
	// for the pause), 15.2, ... 20.2: 8 in the 10 s window.
	near(t, "episodes/s", r.EpisodesPerSecond, 0.8)
	near(t, "wait p50", r.WaitP50, 0)
	near(t, "wait p99", r.WaitP99, 2.2)
	// Tokens in the window: 0.5 s old (10.5-11), then new: the 7 turns
	// from 13.2 to 20.2 and the 0.3 s of the next before the window ends.
	near(t, "version lag", r.VersionLag, 0.5/(0.5+7+0.3))
	if r.Updates != 1 || !r.Fits || r.MinRoutable != 0 || r.Window != 10 {
		t.Errorf("updates %d, fits %v, min routable %d, window %v; want 1, true, 0, 10", r.Updates, r.Fits, r.MinRoutable, r.Window)
	}
}

func TestPauseAllAbortByHand(t *testing.T) {
	r := run(t, oneWorker(), "pause-all abort")
	// No barrier: both load at once (2 s), then the lag (0.1 s). The
	// aborted request resumes with its half at 12.6 and ends at 13.1.
	near(t, "barrier", r.LostPerUpdate.Barrier, 0)
	near(t, "load", r.LostPerUpdate.Load, 4)
	near(t, "lag", r.LostPerUpdate.Lag, 0.2)
	near(t, "cycle", r.MaxCycle, 2.1)
	near(t, "wait p99", r.WaitP99, 2.1)
	near(t, "version lag", r.VersionLag, 0)
}

func TestPauseAllKeepByHand(t *testing.T) {
	r := run(t, oneWorker(), "pause-all keep")
	// The frozen request generates nothing while frozen: the whole load
	// and lag are lost on both policies, and it ends 2.1 s late.
	near(t, "load", r.LostPerUpdate.Load, 4)
	near(t, "lag", r.LostPerUpdate.Lag, 0.2)
	near(t, "wait p99", r.WaitP99, 2.1)
	near(t, "version lag", r.VersionLag, 0)
}

func TestRollingWaitByHand(t *testing.T) {
	r := run(t, oneWorker(), "rolling wait")
	// Policy 0 drains its last 0.5 s (nothing lost: it is busy), lag,
	// load, lag: until 13.2. The turns from 11 on run on policy 1, whose
	// turn of 13 to 14 it then drains (0.8 s, busy), lag, load, lag: the
	// cycle ends at 16.2, 5.7 s after it started. The worker never waits.
	near(t, "barrier", r.LostPerUpdate.Barrier, 0)
	near(t, "load", r.LostPerUpdate.Load, 4)
	near(t, "lag", r.LostPerUpdate.Lag, 0.4)
	near(t, "cycle", r.MaxCycle, 5.7)
	near(t, "wait p99", r.WaitP99, 0)
	if r.MinRoutable != 1 {
		t.Errorf("min routable %d, want 1 (N - k)", r.MinRoutable)
	}
}

func TestRollingKeepCycle(t *testing.T) {
	cfg := Config{
		Policies: 4, Capacity: 2, Envs: 16, Turns: 3, GenMedian: 200 * time.Millisecond, GenSigma: 1,
		EnvMedian: 100 * time.Millisecond, EnvSigma: 0.5, PrefixCost: 10 * time.Millisecond,
		Period: 10 * time.Second, LoadTime: time.Second, ControlLag: 50 * time.Millisecond,
		MaxUnavailable: 2, Updates: 3, Seed: 3,
	}
	r := run(t, cfg, "rolling keep")
	// Two waves of load + lag, each losing a whole policy (its work frozen).
	near(t, "cycle", r.MaxCycle, 2*1.05)
	near(t, "load", r.LostPerUpdate.Load, 4)
	near(t, "lag", r.LostPerUpdate.Lag, 0.2)
	if r.MinRoutable != 2 || !r.Fits || r.Updates != 3 {
		t.Errorf("min routable %d, fits %v, updates %d; want 2, true, 3", r.MinRoutable, r.Fits, r.Updates)
	}
	// A period shorter than the cycle: every update still runs whole, late,
	// and the window stretches to hold them.
	cfg.Period = 2 * time.Second
	r = run(t, cfg, "rolling keep")
	if r.Fits || r.Updates != 3 || r.Window <= 3*2 {
		t.Errorf("fits %v, updates %d, window %v; want false, 3, > 6", r.Fits, r.Updates, r.Window)
	}
}

func TestDeterministic(t *testing.T) {
	cfg := oneWorker()
	cfg.Envs, cfg.Turns, cfg.GenSigma, cfg.EnvMedian, cfg.EnvSigma, cfg.Capacity = 12, 3, 1, 50*time.Millisecond, 0.5, 4
	a, b := run(t, cfg, "rolling abort"), run(t, cfg, "rolling abort")
	if a != b {
		t.Errorf("two runs with seed 1 differ:\n%+v\n%+v", a, b)
	}
	cfg.Seed = 2
	if c := run(t, cfg, "rolling abort"); c == a {
		t.Errorf("seeds 1 and 2 gave the same figures %+v", c)
	}
}

func TestPredictConstantGeneration(t *testing.T) {
	// Constant generation g: residuals are uniform on [0, g], so E[R] = g/2
	// and the largest of k is g k/(k+1).
	cfg := oneWorker()
	near3 := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-3 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near3("E[R]", residualMean(cfg), 0.5)
	near3("E[max of 3]", residualMax(cfg, 3), 0.75)
	near3("mean", truncMean(cfg), 1)
	p := Predict(cfg, Strategies[3]) // pause-all keep
	near3("keep load", p.Lost.Load, 4)
	near3("keep lag", p.Lost.Lag, 0.2)
	if p.MinRoutable != 0 || !p.Fits {
		t.Errorf("pause-all keep: min routable %d, fits %v; want 0, true", p.MinRoutable, p.Fits)
	}
}

func TestValidate(t *testing.T) {
	cfg := oneWorker()
	cfg.MaxUnavailable = 3
	if _, err := Run(cfg, Strategies[4]); err == nil {
		t.Error("max unavailable 3 of 2 policies: want an error")
	}
}

package poller

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/routing"
)

var scaleFlag = flag.Bool("poller-scale", false, "run TestPollerScale (also POLICYROUTER_SCALE=1)")

// TestPollerScale polls 1,000 simulated policies at 100ms for five seconds
// and reports the polling period each policy actually got and the CPU the
// process used. It measures rather than asserts timing; it fails only when
// a policy is probed fewer than twice in the whole window. Run it with
//
//	go test ./poller/ -run TestPollerScale -v -poller-scale
func TestPollerScale(t *testing.T) {
	if !*scaleFlag && os.Getenv("POLICYROUTER_SCALE") != "1" {
		t.Skip("scale test: pass -poller-scale or set POLICYROUTER_SCALE=1")
	}
	const n, interval, window = 1000, 100 * time.Millisecond, 5 * time.Second
	t.Run("listener=shared", func(t *testing.T) { runScale(t, n, interval, window, false) })
	t.Run("listener=per-policy", func(t *testing.T) {
		// 1,000 listeners, 1,000 server and 1,000 client connections.
		raiseNoFile(t, 3*n+256)
		runScale(t, n, interval, window, true)
	})
}

// raiseNoFile raises the soft RLIMIT_NOFILE to at least need, or skips the
// test when the hard limit is lower.
func raiseNoFile(tb testing.TB, need uint64) {
	tb.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatalf("getrlimit: %v", err)
	}
	if lim.Cur >= need {
		return
	}
	if lim.Max < need {
		tb.Skipf("RLIMIT_NOFILE hard limit %d is below the %d needed", lim.Max, need)
	}
	old := lim.Cur
	lim.Cur = need
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Skipf("setrlimit %d: %v", need, err)
	}
	tb.Cleanup(func() {
		lim.Cur = old
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	})
}

func cpuTime(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func runScale(t *testing.T, n int, interval, window time.Duration, perPolicy bool) {
	fleet, err := fakepolicy.New(n, rand.NewPCG(1, 2), fakepolicy.Options{PerPolicyListeners: perPolicy})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := fleet.Close(); err != nil {
			t.Error(err)
		}
	}()
	st := routing.New(routing.Options{})
	register(t, st, fleet.URLs()...)
	index := make(map[string]int, n)
	for i := range n {
		index[fmt.Sprintf("p%d", i)] = i
	}
	// sent[i] is written only by policy i's probes, which never overlap and
	// are reported in order; it is read after Run has returned.
	sent := make([][]time.Time, n)
	lats := make([][]time.Duration, n)
	p := New(st, Config{Interval: interval, Logger: discard(), OnProbe: func(id string, pr routing.Probe, _ routing.Transition) {
		i := index[id]
		sent[i] = append(sent[i], pr.SentAt)
		lats[i] = append(lats[i], pr.Latency)
	}})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	time.Sleep(time.Second) // warm up: connections, first periods
	t0, cpu0, stats0 := time.Now(), cpuTime(t), p.Stats()
	_, conns0 := fleet.Conns()
	time.Sleep(window)
	t1, cpu1, stats1 := time.Now(), cpuTime(t), p.Stats()
	_, conns1 := fleet.Conns()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Per policy: the gaps between consecutive probes sent in [t0, t1].
	var gaps, latency []time.Duration
	means := make([]time.Duration, 0, n)
	unprobed := 0
	for i := range n {
		var prev time.Time
		var sum time.Duration
		k := 0
		for j, s := range sent[i] {
			if s.Before(t0) || s.After(t1) {
				continue
			}
			latency = append(latency, lats[i][j])
			if !prev.IsZero() {
				gaps = append(gaps, s.Sub(prev))
				sum += s.Sub(prev)
				k++
			}
			prev = s
		}
		if k == 0 {
			unprobed++
			continue
		}
		means = append(means, sum/time.Duration(k))
	}
	slices.Sort(gaps)
	slices.Sort(means)
	slices.Sort(latency)
	wall := t1.Sub(t0)
	probes := stats1.ProbesTotal - stats0.ProbesTotal
	t.Logf("%d policies, interval %v, window %v, per-policy listeners %v", n, interval, wall.Round(time.Millisecond), perPolicy)
	if len(means) > 0 {
		t.Logf("period per policy (mean of its gaps): median %v, worst %v", means[len(means)/2].Round(10*time.Microsecond), means[len(means)-1].Round(10*time.Microsecond))
	}
	if len(gaps) > 0 {
		t.Logf("single gaps: median %v, p99 %v, max %v (%d gaps)", pct(gaps, 50), pct(gaps, 99), gaps[len(gaps)-1].Round(10*time.Microsecond), len(gaps))
	}
	if len(latency) > 0 {
		t.Logf("probe latency: median %v, p99 %v, max %v", pct(latency, 50), pct(latency, 99), latency[len(latency)-1].Round(10*time.Microsecond))
	}
	t.Logf("probes %d (%.0f/s), failures %d, skipped %d, sweeps %d, new connections %d",
		probes, float64(probes)/wall.Seconds(), stats1.FailuresTotal-stats0.FailuresTotal,
		stats1.SkippedTotal-stats0.SkippedTotal, stats1.Sweeps-stats0.Sweeps, conns1-conns0)
	t.Logf("process CPU %v over %v wall: %.1f%% of one core (poller and fake servers together)",
		(cpu1 - cpu0).Round(time.Millisecond), wall.Round(time.Millisecond), 100*float64(cpu1-cpu0)/float64(wall))

	// Timing is reported, not asserted: a shared machine decides it.
	if unprobed > 0 {
		t.Errorf("%d policies probed fewer than twice in %v", unprobed, wall)
	}
}

// pct returns the p-th percentile of sorted ds.
func pct(ds []time.Duration, p int) time.Duration {
	return ds[min(len(ds)-1, len(ds)*p/100)].Round(10 * time.Microsecond)
}

// BenchmarkSweep probes n simulated policies on one loopback listener once
// each, as fast as 64 workers allow, and reports the time per probe (ns/op
// is per sweep).
func BenchmarkSweep(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			fleet, err := fakepolicy.New(n, nil, fakepolicy.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer fleet.Close()
			st := routing.New(routing.Options{})
			register(b, st, fleet.URLs()...)
			p := New(st, Config{Concurrency: 64, Logger: discard()})
			defer p.closeIdle()
			members := p.refresh()
			ctx, cancel := context.WithCancel(context.Background())
			defer p.wg.Wait()
			defer cancel()
			b.ReportAllocs()
			for b.Loop() {
				for _, m := range members {
					p.dispatch(ctx, m) // waits while all workers are busy
				}
				for p.pending.Load() > 0 {
					time.Sleep(20 * time.Microsecond)
				}
			}
			b.ReportMetric(float64(b.Elapsed())/float64(int64(b.N)*int64(n)), "ns/probe")
			if f := p.Stats().FailuresTotal; f > 0 {
				b.Fatalf("%d failed probes", f)
			}
		})
	}
}

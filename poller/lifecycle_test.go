package poller

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/fakeclock"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/routing"
)

func TestNewDefaults(t *testing.T) {
	tests := []struct {
		name        string
		cfg         Config
		want        Stats
		wantWarning bool
	}{
		{name: "zero", want: Stats{Interval: 100 * time.Millisecond, Timeout: time.Second, Concurrency: 256}},
		{name: "set", cfg: Config{Interval: time.Second, Timeout: 3 * time.Second, Concurrency: 4},
			want: Stats{Interval: time.Second, Timeout: 3 * time.Second, Concurrency: 4}},
		{name: "default timeout capped quietly", cfg: Config{Interval: 10 * time.Millisecond},
			want: Stats{Interval: 10 * time.Millisecond, Timeout: 100 * time.Millisecond, Concurrency: 256}},
		{name: "timeout capped", cfg: Config{Interval: 10 * time.Millisecond, Timeout: time.Second},
			want: Stats{Interval: 10 * time.Millisecond, Timeout: 100 * time.Millisecond, Concurrency: 256}, wantWarning: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &logRecorder{}
			tt.cfg.Logger = slog.New(logs)
			if got := New(nil, tt.cfg).Stats(); got != tt.want {
				t.Errorf("Stats() = %+v, want %+v", got, tt.want)
			}
			if got := logs.count(slog.LevelWarn, "poll timeout lowered", ""); (got == 1) != tt.wantWarning {
				t.Errorf("%d warnings, want warning %v", got, tt.wantWarning)
			}
		})
	}
}

func TestOffset(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		n    int
		want []time.Duration
	}{
		{1, []time.Duration{0}},
		{4, []time.Duration{0, 25 * ms, 50 * ms, 75 * ms}},
		{3, []time.Duration{0, 33333333, 66666666}},
	}
	for _, tt := range tests {
		for i, want := range tt.want {
			if got := offset(i, tt.n, 100*ms); got != want {
				t.Errorf("offset(%d, %d) = %v, want %v", i, tt.n, got, want)
			}
		}
	}
	if got := offset(0, 0, 100*ms); got != 0 {
		t.Errorf("offset(0, 0) = %v", got)
	}
}

func TestRunStopsAndRestarts(t *testing.T) {
	hung := newFake(t, hang)
	ok := newFake(t, answerWith(200, "true"))
	st := routing.New(routing.Options{})
	register(t, st, hung.URL, ok.URL)
	p := New(st, Config{Interval: 10 * time.Millisecond, Timeout: 100 * time.Millisecond, Logger: discard()})

	stopped, cancelStopped := context.WithCancel(context.Background())
	cancelStopped()
	for round := range 2 {
		hungBefore, okBefore := hung.hits.Load(), ok.hits.Load()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		poll.Until(t, "probes of both policies by this Run", func() bool {
			return hung.hits.Load() > hungBefore && ok.hits.Load() > okBefore
		})
		// With a done context, a Run that wrongly started would return at once.
		if err := p.Run(stopped); !errors.Is(err, ErrRunning) {
			t.Errorf("round %d: second Run = %v, want ErrRunning", round, err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("round %d: Run = %v", round, err)
		}
		if got := p.Stats().InFlight; got != 0 {
			t.Errorf("round %d: %d probes in flight after Run returned", round, got)
		}
	}
}

// TestReportedLoad: a load in the /idle answer replaces the tracked load; a
// bare answer leaves it alone.
func TestReportedLoad(t *testing.T) {
	clk := fakeclock.At(time.Unix(1e9, 0))
	fleet, err := fakepolicy.New(2, rand.NewPCG(1, 1), fakepolicy.Options{Now: clk.Now, PerPolicyListeners: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fleet.Close(); err != nil {
			t.Error(err)
		}
	})
	fleet.Policy(0).SetMode(fakepolicy.ModeBare)
	st := routing.New(routing.Options{})
	register(t, st, fleet.URLs()...)
	var mu sync.Mutex
	probes := map[string]int{}
	start(t, st, Config{Interval: 10 * time.Millisecond, OnProbe: func(id string, p routing.Probe, _ routing.Transition) {
		mu.Lock()
		defer mu.Unlock()
		probes[id]++
	}})
	probesOf := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return probes[id]
	}

	for range 3 {
		fleet.Policy(1).StartWorkFor(time.Hour)
	}
	poll.Until(t, "reported load 3", func() bool { return policyStats(st, 1).Load == 3 })
	if ps := policyStats(st, 1); ps.LastIdle {
		t.Errorf("policy 1 with work reported idle: %+v", ps)
	}
	a, err := st.Assign(routing.AssignRequest{Kind: routing.AssignLeastLoaded, NumTasks: 2})
	if err != nil {
		t.Fatal(err)
	}
	if a.Indices[0] != 0 || a.Indices[1] != 0 {
		t.Errorf("assign = %v, want [0 0]: policy 1 reports load 3", a.Indices)
	}

	// The bare answers of policy 0 keep its tracked load of 2.
	n := probesOf("p0")
	poll.Until(t, "more probes of policy 0", func() bool { return probesOf("p0") >= n+3 })
	if got := policyStats(st, 0).Load; got != 2 {
		t.Errorf("policy 0 load = %d after bare answers, want the tracked 2", got)
	}

	clk.Advance(2 * time.Hour)
	poll.Until(t, "reported load 0", func() bool { return policyStats(st, 1).Load == 0 })
	if !policyStats(st, 1).LastIdle {
		t.Errorf("policy 1 without work not idle")
	}
}

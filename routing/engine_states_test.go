package routing

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/fakeclock"
)

// A paused or asleep engine gets no work and is not failing: no failure
// streak, no last error, healthy; the next answer without the state puts it
// back in routing.
func TestPausedAndAsleepAreStates(t *testing.T) {
	for _, tt := range []struct {
		name  string
		probe Probe
		state string
	}{
		{"paused", Probe{OK: true, Idle: true, Paused: true}, StatePaused},
		{"asleep", Probe{OK: true, Idle: true, Asleep: true}, StateAsleep},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := fakeclock.New()
			st := newState(t, Options{Polled: true, Now: clock.Now, FailThreshold: 1}, densePolicies(2), Topology{})
			answer(t, st, 0, clock.Now(), true)
			for range 10 {
				clock.Advance(100 * time.Millisecond)
				p := tt.probe
				p.SentAt = clock.Now()
				if tr := st.ObserveProbe("p1", p); tr != NoTransition {
					t.Fatalf("transition %v", tr)
				}
			}
			ps := policyStats(t, st, 1)
			if ps.State != tt.state || !ps.Healthy || ps.FailStreak != 0 || ps.LastError != "" || ps.Available {
				t.Fatalf("stats %+v; want %s, healthy, no failures, not available", ps, tt.state)
			}
			for range 4 {
				d := mustSelect(t, st, SelectIdle, "")
				if d.Policy.Index != 0 {
					t.Fatalf("Select = policy %d while 1 is %s", d.Policy.Index, tt.state)
				}
				mustRelease(t, st, d.Lease)
			}
			if a, err := st.Assign(AssignRequest{Kind: AssignLeastLoaded, NumTasks: 3}); err != nil || !slices.Equal(a.Indices, ints(0, 0, 0)) {
				t.Fatalf("Assign = %v, %v; want all on 0", a.Indices, err)
			}
			clock.Advance(100 * time.Millisecond)
			answer(t, st, 1, clock.Now(), true) // resumed, or woken
			if got := policyStats(t, st, 1).State; got != StateIdle {
				t.Fatalf("after one plain answer: %s; want idle", got)
			}
			if got := selectIndices(t, st, SelectIdle, "", ""); !slices.Contains(got, 1) {
				t.Errorf("selects %v; want policy 1 back", got)
			}
		})
	}
}

// A request naming a model goes only to policies serving it (registered,
// else reported by the engine); a model nobody serves is answered at once.
func TestModelFilter(t *testing.T) {
	ps := densePolicies(3)
	ps[0].Models = []string{"policy-7b"}
	ps[1].Models = []string{"reward-1b"}
	st := newState(t, Options{}, ps, Topology{})
	st.ObserveProbe("p2", Probe{OK: true, Idle: true, Models: []string{"reward-1b", "ref-7b"}, HasModels: true})
	for model, want := range map[string][]int{"policy-7b": {0}, "reward-1b": {1, 2}, "ref-7b": {2}} {
		for range 4 {
			d, err := st.Select(cancelled(), SelectRequest{Router: SelectIdle, Model: model})
			if err != nil {
				t.Fatalf("Select(model %s): %v", model, err)
			}
			if !slices.Contains(want, d.Policy.Index) {
				t.Fatalf("Select(model %s) = policy %d; want one of %v", model, d.Policy.Index, want)
			}
			mustRelease(t, st, d.Lease)
		}
	}
	_, err := st.Select(cancelled(), SelectRequest{Router: SelectIdle, Model: "gpt-x", Wait: time.Hour})
	var nf *ModelNotFoundError
	if !errors.As(err, &nf) || !slices.Equal(nf.Served, []string{"policy-7b", "ref-7b", "reward-1b"}) {
		t.Fatalf("Select(unknown model) = %v; want ModelNotFoundError listing the served models", err)
	}
	if got := st.ServedModels(); !slices.Equal(got, []string{"policy-7b", "ref-7b", "reward-1b"}) {
		t.Errorf("ServedModels = %v", got)
	}
}

// A request naming a route goes only to policies whose engine serves it.
func TestRouteFilter(t *testing.T) {
	ps := densePolicies(2)
	ps[0].Engine, ps[1].Engine = "vllm", "sglang"
	serves := func(p *Policy, route string) bool { return route != "/generate" || p.Engine == "sglang" }
	st := newState(t, Options{Serves: serves}, withCapacity(ps, 4), Topology{})
	for range 6 {
		d, err := st.Select(cancelled(), SelectRequest{Router: SelectIdle, Route: "/generate"})
		if err != nil || d.Policy.Index != 1 {
			t.Fatalf("Select(/generate) = %d, %v; want the SGLang policy", d.Policy.Index, err)
		}
		mustRelease(t, st, d.Lease)
	}
}

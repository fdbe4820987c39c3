package routing

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/fakeclock"
)

func TestSelectIdle(t *testing.T) {
	st := newState(t, Options{}, densePolicies(3), Topology{})
	var leases []uint64
	for i := range 3 {
		sel := mustSelect(t, st, SelectIdle, "")
		if sel.Policy.Index != i {
			t.Fatalf("select %d gave policy %d; want %d (index order)", i, sel.Policy.Index, i)
		}
		if sel.Lease == 0 || slices.Contains(leases, sel.Lease) {
			t.Fatalf("select %d gave lease %d; want a fresh non-zero lease", i, sel.Lease)
		}
		leases = append(leases, sel.Lease)
	}
	wantNoIdle(t, st, SelectIdle, "")

	// Released policies rejoin at the back, in release order.
	mustRelease(t, st, leases[2])
	mustRelease(t, st, leases[0])
	if got, want := selectIndices(t, st, SelectIdle, "", ""), ints(2, 0); !slices.Equal(got, want) {
		t.Errorf("after releasing 2 then 0, Select gave %v; want %v", got, want)
	}
	wantNoIdle(t, st, SelectIdle, "")
	if got := st.Stats(); got.Leases != 3 || got.Idle != 0 {
		t.Errorf("Stats: %d leases, %d idle; want 3, 0", got.Leases, got.Idle)
	}
}

// TestSelectIdleSeedSequence replays a SyncSimpleRouter run (answers from
// testdata/seed_oracle.py) where the seed's order is fully determined.
func TestSelectIdleSeedSequence(t *testing.T) {
	st := newState(t, Options{}, densePolicies(3), Topology{})
	lease := map[int]uint64{}
	sel := func() int {
		s := mustSelect(t, st, SelectIdle, "")
		lease[s.Policy.Index] = s.Lease
		return s.Policy.Index
	}
	release := func(idx ...int) {
		for _, i := range idx {
			mustRelease(t, st, lease[i])
		}
	}
	var got []int
	got = append(got, sel(), sel(), sel())
	release(0, 2)
	got = append(got, sel())
	release(1)
	got = append(got, sel(), sel())
	if want := ints(0, 1, 2, 0, 2, 1); !slices.Equal(got, want) {
		t.Errorf("Select sequence = %v; want the seed's %v", got, want)
	}
}

func TestSelectWaitsForRelease(t *testing.T) {
	st := newState(t, Options{}, densePolicies(1), Topology{})
	held := mustSelect(t, st, SelectIdle, "")
	type result struct {
		sel Decision
		err error
	}
	done := make(chan result)
	go func() {
		sel, err := st.Select(context.Background(), SelectRequest{Wait: time.Hour, Router: SelectIdle, EnvID: ""})
		done <- result{sel, err}
	}()
	waitForWaiters(t, st, 1)
	mustRelease(t, st, held.Lease)
	r := <-done
	if r.err != nil || r.sel.Policy.Index != 0 || r.sel.Lease == held.Lease {
		t.Fatalf("waiting Select = %+v, %v; want policy 0 with a new lease", r.sel, r.err)
	}
	if !st.LeaseValid(r.sel.Lease) || st.LeaseValid(held.Lease) {
		t.Errorf("LeaseValid: new %v, released %v; want true, false", st.LeaseValid(r.sel.Lease), st.LeaseValid(held.Lease))
	}
	mustRelease(t, st, r.sel.Lease)
}

func TestSelectErrors(t *testing.T) {
	empty := New(Options{})
	for _, kind := range []Selector{SelectIdle, SelectIdleAffinity, SelectRoundRobin} {
		if _, err := empty.Select(context.Background(), SelectRequest{Wait: time.Hour, Router: kind, EnvID: "env-0"}); !errors.Is(err, ErrNoPolicies) {
			t.Errorf("Select(%T) with no policies = %v; want ErrNoPolicies", kind, err)
		}
	}
	st := newState(t, Options{}, densePolicies(1), Topology{})
	sel := mustSelect(t, st, SelectIdle, "")
	mustRelease(t, st, sel.Lease)
	if _, err := st.Release(sel.Lease); !errors.Is(err, ErrLeaseEnded) {
		t.Errorf("second Release = %v; want ErrLeaseEnded", err)
	}
	if _, err := st.Release(12345); !errors.Is(err, ErrUnknownLease) {
		t.Errorf("Release(never issued) = %v; want ErrUnknownLease", err)
	}
	if _, err := st.ReleaseIndex(0); !errors.Is(err, ErrUnknownLease) {
		t.Errorf("ReleaseIndex(idle policy) = %v; want ErrUnknownLease", err)
	}
	if _, err := st.ReleaseIndex(4); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("ReleaseIndex(unknown index) = %v; want ErrUnknownPolicy", err)
	}
	if err := st.SetDraining("nope", true); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("SetDraining(unknown id) = %v; want ErrUnknownPolicy", err)
	}
	if got := st.ObserveProbe("nope", Probe{OK: false}); got != NoTransition {
		t.Errorf("ObserveProbe(unknown id) = %v; want NoTransition", got)
	}
}

func TestReleaseIndex(t *testing.T) {
	st := newState(t, Options{}, withCapacity(densePolicies(1), 2), Topology{})
	first := mustSelect(t, st, SelectIdle, "")
	second := mustSelect(t, st, SelectIdle, "")
	got, err := st.ReleaseIndex(0)
	if err != nil || got.Lease != first.Lease {
		t.Fatalf("ReleaseIndex(0) = lease %d, %v; want the oldest lease %d", got.Lease, err, first.Lease)
	}
	if st.LeaseValid(first.Lease) || !st.LeaseValid(second.Lease) {
		t.Errorf("after ReleaseIndex: first valid %v, second valid %v; want false, true", st.LeaseValid(first.Lease), st.LeaseValid(second.Lease))
	}
}

func TestSelectRoundRobin(t *testing.T) {
	seedTopo := nodes(map[string][2][]int{"n0": {ints(0, 1), ints(0, 1)}, "n1": {ints(2), ints(2)}})
	// Eval ids in topology order, not index order; policy 3 on no node.
	orderTopo := nodes(map[string][2][]int{"n0": {ints(0, 1), ints(1, 0)}, "n1": {ints(2), ints(2)}})
	tests := []struct {
		name string
		n    int
		topo Topology
		envs []string
		want []int
	}{
		{
			name: "seed example", n: 3, topo: seedTopo,
			envs: []string{"env-0", "env-1", "env-2", "env-9", "env-0"},
			want: ints(0, 1, 2, 0, 0),
		},
		{
			// Answers from testdata/seed_oracle.py: per-node counters, one
			// global counter for envs without a node.
			name: "per-node and global counters", n: 4, topo: orderTopo,
			envs: []string{"env-0", "env-1", "env-2", "env-9", "env-0", "env-x", "env-2", "env-1", "env-9", "env-7", "env-3", "env-0"},
			want: ints(1, 0, 2, 0, 1, 1, 2, 0, 2, 3, 0, 1),
		},
		{
			name: "no topology is global round robin", n: 3, topo: Topology{},
			envs: []string{"env-0", "env-0", "env-0", "env-0"},
			want: ints(0, 1, 2, 0),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newState(t, Options{}, densePolicies(tt.n), tt.topo)
			var got []int
			for _, e := range tt.envs {
				sel := mustSelect(t, st, SelectRoundRobin, e)
				if sel.Lease != 0 {
					t.Errorf("round robin issued lease %d; want none", sel.Lease)
				}
				got = append(got, sel.Policy.Index)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("round robin over %q = %v; want %v", tt.envs, got, tt.want)
			}
			// Round robin does not make a policy busy.
			if got, want := selectIndices(t, st, SelectIdle, ""), ints(0); !slices.Equal(got, want) {
				t.Errorf("SelectIdle after round robin = %v; want %v", got, want)
			}
		})
	}
}

func TestSelectIdleAffinity(t *testing.T) {
	// a: policies 0, 1 and env 0; b: policies 2, 3 and env 1.
	topo := nodes(map[string][2][]int{"a": {ints(0), ints(0, 1)}, "b": {ints(1), ints(2, 3)}})
	st := newState(t, Options{}, densePolicies(4), topo)
	steps := []struct {
		env  string
		want int
	}{
		{"env-1", 2}, // b's oldest idle, although 0 heads the global deque
		{"env-1", 3},
		{"env-1", 0}, // b busy: the oldest idle anywhere
		{"env-x", 1}, // unknown env: global
		{"env-0", -1},
	}
	leases := map[int]uint64{}
	for i, step := range steps {
		if step.want < 0 {
			wantNoIdle(t, st, SelectIdleAffinity, step.env)
			continue
		}
		sel := mustSelect(t, st, SelectIdleAffinity, step.env)
		if sel.Policy.Index != step.want {
			t.Fatalf("step %d: SelectIdleAffinity(%q) = %d; want %d", i, step.env, sel.Policy.Index, step.want)
		}
		if want := map[int]string{0: "a", 1: "a", 2: "b", 3: "b"}[step.want]; sel.Node != want {
			t.Errorf("step %d: node %q; want %q", i, sel.Node, want)
		}
		leases[sel.Policy.Index] = sel.Lease
	}
	// Free 1 (a) then 3 (b): env on a takes 1, env on b takes 3, whatever
	// the global order.
	mustRelease(t, st, leases[1])
	mustRelease(t, st, leases[3])
	if got, want := selectIndices(t, st, SelectIdleAffinity, "env-1", "env-0"), ints(3, 1); !slices.Equal(got, want) {
		t.Errorf("after releases: %v; want %v", got, want)
	}
	// A node-affine pick leaves the global deque consistent: plain
	// SelectIdle sees the rest in order.
	mustRelease(t, st, leases[0])
	mustRelease(t, st, leases[2])
	if got, want := selectIndices(t, st, SelectIdleAffinity, "env-1"), ints(2); !slices.Equal(got, want) {
		t.Errorf("env-1 = %v; want %v", got, want)
	}
	if got, want := selectIndices(t, st, SelectIdle, ""), ints(0); !slices.Equal(got, want) {
		t.Errorf("SelectIdle = %v; want %v", got, want)
	}
	wantNoIdle(t, st, SelectIdle, "")
}

func TestCapacity(t *testing.T) {
	t.Run("one policy k times", func(t *testing.T) {
		const k = 3
		st := newState(t, Options{}, withCapacity(densePolicies(1), k), Topology{})
		seen := map[uint64]bool{}
		for range k {
			sel := mustSelect(t, st, SelectIdle, "")
			if sel.Policy.Index != 0 || seen[sel.Lease] {
				t.Fatalf("Select = policy %d lease %d; want policy 0, a new lease", sel.Policy.Index, sel.Lease)
			}
			seen[sel.Lease] = true
		}
		wantNoIdle(t, st, SelectIdle, "")
		ps := policyStats(t, st, 0)
		if ps.Inflight != k || ps.Capacity != k || ps.State != StateBusy || ps.Selected != k {
			t.Errorf("stats = inflight %d capacity %d state %s selected %d; want %d %d busy %d", ps.Inflight, ps.Capacity, ps.State, ps.Selected, k, k, k)
		}
		for l := range seen {
			mustRelease(t, st, l)
			break
		}
		if got := selectIndices(t, st, SelectIdle, ""); !slices.Equal(got, ints(0)) {
			t.Errorf("after one release: %v; want [0]", got)
		}
	})
	t.Run("capacity spreads before doubling up", func(t *testing.T) {
		ps := densePolicies(3)
		ps[0].Capacity, ps[1].Capacity, ps[2].Capacity = 2, 1, 3
		st := newState(t, Options{}, ps, Topology{})
		got := selectIndices(t, st, SelectIdle, "", "", "", "", "", "")
		if want := ints(0, 1, 2, 0, 2, 2); !slices.Equal(got, want) {
			t.Errorf("Select order = %v; want %v", got, want)
		}
		wantNoIdle(t, st, SelectIdle, "")
	})
	t.Run("zero means one", func(t *testing.T) {
		st := newState(t, Options{}, withCapacity(densePolicies(2), 0), Topology{})
		selectIndices(t, st, SelectIdle, "", "")
		wantNoIdle(t, st, SelectIdle, "")
	})
}

// An unavailability takes policy p1 out of routing one way (off) and
// brings it back (on).
type unavailability struct {
	name      string
	off, on   func(tb testing.TB, st *State)
	wantState string
}

func unavailabilities() []unavailability {
	return []unavailability{
		{
			name: "draining",
			off: func(tb testing.TB, st *State) {
				tb.Helper()
				if err := st.SetDraining("p1", true); err != nil {
					tb.Fatal(err)
				}
			},
			on: func(tb testing.TB, st *State) {
				tb.Helper()
				if err := st.SetDraining("p1", false); err != nil {
					tb.Fatal(err)
				}
			},
			wantState: StateDraining,
		},
		{
			name: "unhealthy",
			off: func(tb testing.TB, st *State) {
				tb.Helper()
				for i := range 3 { // default FailThreshold
					want := NoTransition
					if i == 2 {
						want = BecameUnhealthy
					}
					if got := st.ObserveProbe("p1", Probe{OK: false}); got != want {
						tb.Fatalf("failed probe %d: %v; want %v", i+1, got, want)
					}
				}
			},
			on: func(tb testing.TB, st *State) {
				tb.Helper()
				for i := range 2 { // default PassThreshold
					want := NoTransition
					if i == 1 {
						want = BecameHealthy
					}
					if got := st.ObserveProbe("p1", Probe{OK: true, Idle: true}); got != want {
						tb.Fatalf("good probe %d: %v; want %v", i+1, got, want)
					}
				}
			},
			wantState: StateUnhealthy,
		},
	}
}

func TestUnavailablePolicyGetsNoWork(t *testing.T) {
	// One node holding every policy, so that round robin would cycle over p1.
	topo := nodes(map[string][2][]int{"a": {ints(0), ints(0, 1, 2)}})
	for _, u := range unavailabilities() {
		t.Run(u.name, func(t *testing.T) {
			st := newState(t, Options{}, densePolicies(3), topo)
			u.off(t, st)
			if got := policyStats(t, st, 1).State; got != u.wantState {
				t.Errorf("state = %q; want %q", got, u.wantState)
			}

			if got, want := selectIndices(t, st, SelectRoundRobin, "env-0", "env-0", "env-0", "env-x", "env-x", "env-x"), ints(0, 2, 0, 0, 2, 0); !slices.Equal(got, want) {
				t.Errorf("round robin = %v; want %v", got, want)
			}
			a, err := st.Assign(AssignRequest{Kind: AssignLeastLoaded, NumTasks: 4, Loads: []int64{0, 0, 0}})
			if err != nil || !slices.Equal(a.Indices, ints(0, 2, 0, 2)) {
				t.Errorf("stateless Assign = %v, %v; want [0 2 0 2]", a.Indices, err)
			}
			a, err = st.Assign(AssignRequest{Kind: AssignNodeAffinity, NumTasks: 2, EnvIDs: []string{"env-0", "env-0"}})
			if err != nil || !slices.Equal(a.Indices, ints(0, 2)) {
				t.Errorf("tracked Assign = %v, %v; want [0 2]", a.Indices, err)
			}
			idle := selectIndices(t, st, SelectIdle, "", "")
			if !slices.Equal(idle, ints(0, 2)) {
				t.Errorf("SelectIdle = %v; want [0 2]", idle)
			}
			wantNoIdle(t, st, SelectIdleAffinity, "env-0")

			u.on(t, st)
			if got := policyStats(t, st, 1).State; got != StateIdle {
				t.Errorf("state after coming back = %q; want idle", got)
			}
			if got := selectIndices(t, st, SelectIdle, ""); !slices.Equal(got, ints(1)) {
				t.Errorf("SelectIdle after coming back = %v; want [1]", got)
			}
			if got := selectIndices(t, st, SelectRoundRobin, "env-x"); !slices.Equal(got, ints(1)) {
				t.Errorf("round robin after coming back = %v; want [1]", got)
			}
		})
	}
}

func TestUnavailableWhileLeased(t *testing.T) {
	for _, u := range unavailabilities() {
		t.Run(u.name, func(t *testing.T) {
			st := newState(t, Options{}, densePolicies(2), Topology{})
			selectIndices(t, st, SelectIdle, "") // 0
			held := mustSelect(t, st, SelectIdle, "")
			u.off(t, st)
			// The lease is still good; releasing it parks the slot.
			mustRelease(t, st, held.Lease)
			wantNoIdle(t, st, SelectIdle, "")
			if ps := policyStats(t, st, 1); ps.IdleCapacity != 0 || ps.Inflight != 0 {
				t.Errorf("parked policy: idle capacity %d, inflight %d; want 0, 0", ps.IdleCapacity, ps.Inflight)
			}
			u.on(t, st)
			if got := selectIndices(t, st, SelectIdle, ""); !slices.Equal(got, ints(1)) {
				t.Errorf("after coming back: %v; want [1]", got)
			}
		})
	}
}

func TestHealthThresholds(t *testing.T) {
	st := newState(t, Options{FailThreshold: 2, PassThreshold: 3}, densePolicies(1), Topology{})
	probes := []struct {
		ok   bool
		want Transition
	}{
		{false, NoTransition},
		{true, NoTransition}, // a pass resets the failure streak
		{false, NoTransition},
		{false, BecameUnhealthy},
		{false, NoTransition}, // already unhealthy: no second transition
		{true, NoTransition},
		{true, NoTransition},
		{false, NoTransition}, // a failure resets the pass streak
		{true, NoTransition},
		{true, NoTransition},
		{true, BecameHealthy},
		{true, NoTransition},
	}
	for i, p := range probes {
		if got := st.ObserveProbe("p0", Probe{OK: p.ok, Idle: true}); got != p.want {
			t.Errorf("probe %d (ok=%v) = %v; want %v", i, p.ok, got, p.want)
		}
	}
	ps := policyStats(t, st, 0)
	if ps.Probes != uint64(len(probes)) || ps.ProbeFailures != 5 || !ps.Healthy || ps.FailStreak != 0 {
		t.Errorf("stats: probes %d failures %d healthy %v streak %d", ps.Probes, ps.ProbeFailures, ps.Healthy, ps.FailStreak)
	}
}

func TestProbeGrace(t *testing.T) {
	const grace = 100 * time.Millisecond
	tests := []struct {
		name     string
		after    time.Duration // probe sent this long after the selection
		idle     bool
		wantFree bool
	}{
		{"idle probe sent right after selection", 0, true, false},
		{"idle probe sent before grace", grace - time.Nanosecond, true, false},
		{"idle probe sent at grace", grace, true, true},
		{"idle probe sent after grace", grace + 50*time.Millisecond, true, true},
		{"busy probe after grace", 10 * grace, false, false},
		{"idle probe sent before the selection", -time.Second, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := fakeclock.New()
			st := newState(t, Options{Grace: grace, Now: clock.Now}, densePolicies(1), Topology{})
			selectedAt := clock.Now()
			sel := mustSelectOnIdle(t, st, SelectIdle, "")
			// The answer arrives late; only the send time counts.
			clock.Advance(time.Hour)
			st.ObserveProbe("p0", Probe{SentAt: selectedAt.Add(tt.after), OK: true, Idle: tt.idle})
			if got := !st.LeaseValid(sel.Lease); got != tt.wantFree {
				t.Fatalf("lease freed = %v; want %v", got, tt.wantFree)
			}
			if tt.wantFree {
				if got := selectIndices(t, st, SelectIdle, ""); !slices.Equal(got, ints(0)) {
					t.Errorf("after the probe freed it: %v; want [0]", got)
				}
			} else {
				wantNoIdle(t, st, SelectIdle, "")
			}
		})
	}
}

func TestProbeGraceIsPerLease(t *testing.T) {
	const grace = time.Second
	clock := fakeclock.New()
	st := newState(t, Options{Grace: grace, Now: clock.Now}, withCapacity(densePolicies(1), 2), Topology{})
	old := mustSelectOnIdle(t, st, SelectIdle, "")
	clock.Advance(grace)
	recent := mustSelectOnIdle(t, st, SelectIdle, "")
	st.ObserveProbe("p0", Probe{SentAt: clock.Now(), OK: true, Idle: true})
	if st.LeaseValid(old.Lease) || !st.LeaseValid(recent.Lease) {
		t.Errorf("old lease valid %v, recent valid %v; want false, true", st.LeaseValid(old.Lease), st.LeaseValid(recent.Lease))
	}
}

func TestUpdateCarriesState(t *testing.T) {
	topo := nodes(map[string][2][]int{"a": {ints(0), ints(0, 1)}, "b": {ints(1), ints(2)}})
	st := newState(t, Options{}, densePolicies(3), topo)
	if _, err := st.Assign(AssignRequest{Kind: AssignLeastLoaded, NumTasks: 5}); err != nil { // loads 2 2 1
		t.Fatal(err)
	}
	held := mustSelect(t, st, SelectIdle, "")                // p0
	selectIndices(t, st, SelectRoundRobin, "env-0", "env-x") // a's position 1, global 1
	if err := st.SetDraining("p2", true); err != nil {
		t.Fatal(err)
	}

	// Same ids and indices, new URLs, and a new policy 3 on a; the
	// registration carries p2's drain flag.
	ps := densePolicies(4)
	for i := range ps {
		ps[i].URL = "http://moved-" + ps[i].ID
	}
	ps[2].Draining = true
	topo2 := nodes(map[string][2][]int{"a": {ints(0), ints(0, 1, 3)}, "b": {ints(1), ints(2)}})
	if err := st.Update(ps, topo2); err != nil {
		t.Fatal(err)
	}
	var loads []int64
	for _, s := range st.Stats().Policies {
		loads = append(loads, s.Load)
	}
	if want := []int64{2, 2, 1, 0}; !slices.Equal(loads, want) {
		t.Errorf("loads after Update = %v; want %v", loads, want)
	}
	if !st.LeaseValid(held.Lease) {
		t.Errorf("lease lost by Update")
	}
	if ps := policyStats(t, st, 2); !ps.Draining || ps.Policy.URL != "http://moved-p2" {
		t.Errorf("p2 after Update: draining %v url %q; want true and the new URL", ps.Draining, ps.Policy.URL)
	}
	// Counters continue: a's round robin at position 1 of [0 1 3], global at 1.
	if got, want := selectIndices(t, st, SelectRoundRobin, "env-0", "env-0", "env-x"), ints(1, 3, 1); !slices.Equal(got, want) {
		t.Errorf("round robin after Update = %v; want %v", got, want)
	}
	// Idle deque keeps its order, new capacity at the back: 1 then 3 (2 drains).
	if got, want := selectIndices(t, st, SelectIdle, "", ""), ints(1, 3); !slices.Equal(got, want) {
		t.Errorf("SelectIdle after Update = %v; want %v", got, want)
	}
	mustRelease(t, st, held.Lease)

	// A policy that changes index starts over; a removed one loses its lease.
	held = mustSelect(t, st, SelectIdle, "") // p0
	moved := []Policy{{Index: 5, ID: "p0"}, {Index: 1, ID: "p1"}}
	if err := st.Update(moved, Topology{}); err != nil {
		t.Fatal(err)
	}
	if st.LeaseValid(held.Lease) {
		t.Errorf("lease of a policy whose index changed survived Update")
	}
	if _, err := st.Release(held.Lease); !errors.Is(err, ErrLeaseEnded) {
		t.Errorf("Release of an ended lease = %v; want ErrLeaseEnded", err)
	}
	if ps := policyStats(t, st, 5); ps.Load != 0 || ps.Selected != 0 {
		t.Errorf("re-indexed policy kept load %d, selected %d; want a fresh start", ps.Load, ps.Selected)
	}
	if got := st.Stats(); got.Leases != 1 || len(got.Policies) != 2 {
		t.Errorf("Stats after Update: %d leases, %d policies; want 1 (p1's), 2", got.Leases, len(got.Policies))
	}
}

func TestUpdateWakesWaiter(t *testing.T) {
	st := newState(t, Options{}, densePolicies(1), Topology{})
	mustSelect(t, st, SelectIdle, "")
	done := make(chan int)
	go func() {
		sel, err := st.Select(context.Background(), SelectRequest{Wait: time.Hour, Router: SelectIdle, EnvID: ""})
		if err != nil {
			done <- -1
			return
		}
		done <- sel.Policy.Index
	}()
	waitForWaiters(t, st, 1)
	if err := st.Update(densePolicies(2), Topology{}); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got != 1 {
		t.Errorf("waiter got %d; want the new policy 1", got)
	}
}

func TestUpdateShrinkCapacity(t *testing.T) {
	st := newState(t, Options{}, withCapacity(densePolicies(1), 3), Topology{})
	a := mustSelect(t, st, SelectIdle, "")
	b := mustSelect(t, st, SelectIdle, "")
	if err := st.Update(withCapacity(densePolicies(1), 1), Topology{}); err != nil {
		t.Fatal(err)
	}
	// Two leases out on one slot: nothing idle until both come back, then
	// exactly one slot.
	wantNoIdle(t, st, SelectIdle, "")
	mustRelease(t, st, a.Lease)
	mustRelease(t, st, b.Lease)
	mustSelect(t, st, SelectIdle, "")
	wantNoIdle(t, st, SelectIdle, "")
	if ps := policyStats(t, st, 0); ps.Capacity != 1 || ps.Inflight != 1 {
		t.Errorf("capacity %d inflight %d; want 1, 1", ps.Capacity, ps.Inflight)
	}
}

// Excluded policies are never handed out, by any leasing router or the
// sticky stage; a waiter with exclusions does not take their freed slots.
func TestSelectExclude(t *testing.T) {
	for _, r := range []Selector{SelectIdle, SelectIdleAffinity, &powerOfTwo{}} {
		st := newState(t, Options{}, densePolicies(2), Topology{})
		for range 3 {
			d, err := st.Select(cancelled(), SelectRequest{Router: r, Exclude: []string{"p0"}})
			if err != nil || d.Policy.ID != "p1" {
				t.Fatalf("%T excluding p0: %s, %v; want p1", r, d.Policy.ID, err)
			}
			mustRelease(t, st, d.Lease)
		}
		if _, err := st.Select(cancelled(), SelectRequest{Router: r, Exclude: []string{"p0", "p1"}, Wait: time.Hour}); !errors.Is(err, ErrAllExcluded) {
			t.Fatalf("%T excluding both: %v; want ErrAllExcluded at once", r, err)
		}
		owner, _ := st.Snapshot().Owner("s")
		d, err := st.Select(cancelled(), SelectRequest{Router: r, Session: "s", Exclude: []string{owner}})
		if err != nil || d.Policy.ID == owner || d.Sticky != StickyMoved {
			t.Fatalf("%T excluding the home: %s (%q), %v; want the other, moved", r, d.Policy.ID, d.Sticky, err)
		}
		mustRelease(t, st, d.Lease)
	}
	// A waiter excluding p0 lets p0's freed slot go by.
	st := newState(t, Options{}, densePolicies(2), Topology{})
	held := []Decision{mustSelect(t, st, SelectIdle, ""), mustSelect(t, st, SelectIdle, "")}
	got := make(chan Decision, 1)
	go func() {
		d, err := st.Select(context.Background(), SelectRequest{Wait: time.Hour, Exclude: []string{"p0"}})
		if err != nil {
			t.Error(err)
		}
		got <- d
	}()
	waitForWaiters(t, st, 1)
	mustRelease(t, st, held[0].Lease) // p0: not for this waiter
	mustRelease(t, st, held[1].Lease) // p1
	if d := <-got; d.Policy.ID != "p1" {
		t.Errorf("waiter excluding p0 got %s; want p1", d.Policy.ID)
	}
}

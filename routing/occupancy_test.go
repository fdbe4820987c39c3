package routing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/fakeclock"
	"github.com/policyrouter/policyrouter/internal/poll"
)

// loadAnswer reports an engine's answer with a load figure, as the SGLang
// and vLLM engines do: idle while the load is below the capacity.
func loadAnswer(tb testing.TB, st *State, id string, sentAt time.Time, load int64, capacity int) {
	tb.Helper()
	st.ObserveProbe(id, Probe{SentAt: sentAt, OK: true, Idle: load < int64(capacity), Load: load, HasLoad: true})
}

// The trial's repro, with a fleet of one engine of capacity 2 that
// reports its load: two leases out, one holder's request running (load
// 1), the other stepping its environment. The engine's idle answer ends
// neither lease, a third /select waits, and both releases say released.
func TestExplicitLeasesAgainstAnEngineLoad(t *testing.T) {
	clock := fakeclock.New()
	st := newState(t, Options{Polled: true, Now: clock.Now, Grace: 500 * time.Millisecond}, withCapacity(densePolicies(1), 2), Topology{})
	loadAnswer(t, st, "p0", clock.Now(), 0, 2)
	a := mustSelect(t, st, SelectIdle, "")
	b := mustSelect(t, st, SelectIdle, "")
	// 0.6 s of probes every 100 ms: A's request runs, B's is not sent yet.
	for range 6 {
		clock.Advance(100 * time.Millisecond)
		loadAnswer(t, st, "p0", clock.Now(), 1, 2)
	}
	if got := st.Stats().Leases; got != 2 {
		t.Fatalf("leases out = %d; want 2 (a lease is its holder's until it says so)", got)
	}
	ps := policyStats(t, st, 0)
	if ps.Occupancy != 2 || ps.EngineLoad != 1 || ps.OutsideLoad != 0 {
		t.Errorf("occupancy %d engine %d outside %d; want 2, 1, 0", ps.Occupancy, ps.EngineLoad, ps.OutsideLoad)
	}
	wantNoIdle(t, st, SelectIdle, "")
	for _, l := range []uint64{a.Lease, b.Lease} {
		if _, err := st.Release(l); err != nil {
			t.Errorf("Release(%d) = %v; want released", l, err)
		}
	}
	if got := st.LeasesEnded(); got["release"] != 2 || got["probe"] != 0 {
		t.Errorf("leases ended = %v; want 2 by release, none by probe", got)
	}
}

// Traffic that did not come through the router counts: with nothing out
// and an engine load of 1 of 2, exactly one hand-out.
func TestOutsideLoadCounts(t *testing.T) {
	for _, r := range idleSelectors {
		t.Run(fmtRouter(r), func(t *testing.T) {
			clock := fakeclock.New()
			st := newState(t, Options{Polled: true, Now: clock.Now}, withCapacity(densePolicies(1), 2), Topology{})
			loadAnswer(t, st, "p0", clock.Now(), 1, 2)
			mustSelect(t, st, r, "")
			wantNoIdle(t, st, r, "")
			ps := policyStats(t, st, 0)
			if ps.OutsideLoad != 1 || ps.Occupancy != 2 {
				t.Errorf("outside %d occupancy %d; want 1, 2", ps.OutsideLoad, ps.Occupancy)
			}
		})
	}
}

// A holder that sends more than one request counts as what the engine
// reports; a probe sent before a release does not hold back the slot the
// release freed, since the release is newer news.
func TestEngineLoadAboveLeases(t *testing.T) {
	clock := fakeclock.New()
	st := newState(t, Options{Polled: true, Now: clock.Now}, withCapacity(densePolicies(1), 3), Topology{})
	loadAnswer(t, st, "p0", clock.Now(), 0, 3)
	a := mustSelect(t, st, SelectIdle, "")
	clock.Advance(100 * time.Millisecond)
	sent := clock.Now()
	loadAnswer(t, st, "p0", sent, 2, 3) // A's holder runs two requests
	clock.Advance(time.Millisecond)
	mustSelect(t, st, SelectIdle, "") // occupancy 2 -> 3
	wantNoIdle(t, st, SelectIdle, "")
	clock.Advance(time.Millisecond)
	mustRelease(t, st, a.Lease) // both of A's requests are over
	mustSelect(t, st, SelectIdle, "")
	wantNoIdle(t, st, SelectIdle, "")
}

// An explicit lease outlives Grace with its engine idle: no probe ends it.
// An on_idle lease seen working is freed by the next idle answer.
func TestReleaseModes(t *testing.T) {
	clock := fakeclock.New()
	st := newState(t, Options{Polled: true, Now: clock.Now, Grace: time.Second}, withCapacity(densePolicies(1), 2), Topology{})
	answer(t, st, 0, clock.Now(), true)
	explicit := mustSelect(t, st, SelectIdle, "")
	onIdle := mustSelectOnIdle(t, st, SelectIdle, "")
	clock.Advance(100 * time.Millisecond)
	answer(t, st, 0, clock.Now(), false) // both at work
	for range 30 {                       // 3 s of idle answers: three times Grace
		clock.Advance(100 * time.Millisecond)
		answer(t, st, 0, clock.Now(), true)
	}
	if !st.LeaseValid(explicit.Lease) {
		t.Error("explicit lease ended by an idle answer")
	}
	if st.LeaseValid(onIdle.Lease) {
		t.Error("on_idle lease seen working, then idle: still out")
	}
	_, err := st.Release(onIdle.Lease)
	if how, ok := HowEnded(err); !ok || how != EndProbe {
		t.Errorf("Release(on_idle lease) = %v; want ended by probe", err)
	}
	if _, err := st.Release(explicit.Lease); err != nil {
		t.Errorf("Release(explicit lease) = %v; want released", err)
	}
	_, err = st.Release(explicit.Lease)
	if how, ok := HowEnded(err); !ok || how != EndRelease || !errors.Is(err, ErrLeaseEnded) {
		t.Errorf("second Release = %v; want ended by release", err)
	}
}

// Leases that end by TTL and by removal are counted and named.
func TestLeasesEndedByHow(t *testing.T) {
	st := newState(t, Options{}, densePolicies(2), Topology{})
	ttl, err := st.Select(cancelled(), SelectRequest{Router: SelectIdle, LeaseTTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	removed := mustSelect(t, st, SelectIdle, "")
	if removed.Policy.Index == ttl.Policy.Index {
		t.Fatal("both leases on one policy")
	}
	poll.Until(t, "the TTL to end the lease", func() bool { return !st.LeaseValid(ttl.Lease) })
	keep := densePolicies(2)[ttl.Policy.Index : ttl.Policy.Index+1]
	if err := st.Update(keep, Topology{}); err != nil {
		t.Fatal(err)
	}
	for lease, want := range map[uint64]EndHow{ttl.Lease: EndTTL, removed.Lease: EndRemoved} {
		if _, err := st.Release(lease); !errors.Is(err, ErrLeaseEnded) {
			t.Errorf("Release(%d) = %v; want ended", lease, err)
		} else if how, _ := HowEnded(err); how != want {
			t.Errorf("Release(%d) ended by %v; want %v", lease, how, want)
		}
	}
	if got := st.LeasesEnded(); got["ttl"] != 1 || got["removed"] != 1 {
		t.Errorf("leases ended = %v; want one by ttl, one removed", got)
	}
}

// Lowering the floor hands a waiting /select the idle policy it admits at
// once; a request with a floor of its own keeps it.
func TestLowerFloorWakesWaiters(t *testing.T) {
	st := newState(t, Options{}, densePolicies(1), Topology{})
	st.SetMinVersion(45)
	own := int64(45)
	pinned := make(chan error, 1)
	go func() {
		_, err := st.Select(context.Background(), SelectRequest{Router: SelectIdle, Wait: time.Hour, MinVersion: &own, Stop: t.Context().Done()})
		pinned <- err
	}()
	poll.Until(t, "one waiter", func() bool { return st.Stats().Waiters == 1 })
	done := make(chan Decision, 1)
	go func() {
		d, err := st.Select(context.Background(), SelectRequest{Router: SelectIdle, Wait: time.Hour})
		if err != nil {
			t.Error(err)
		}
		done <- d
	}()
	poll.Until(t, "two waiters", func() bool { return st.Stats().Waiters == 2 })
	st.SetMinVersion(0)
	if d := <-done; d.Policy.Index != 0 {
		t.Errorf("woken with policy %d; want 0", d.Policy.Index)
	}
	if got := st.Stats().Waiters; got != 1 {
		t.Errorf("%d waiters; want the one with its own floor", got)
	}
}

// The filter stage's seam: a criterion is one Filter in the pipeline, and
// every router, the prefer stage and waiters obey it.
func TestFilterStage(t *testing.T) {
	defer func(saved []Filter) { filters = saved }(filters)
	filters = append(filters, oddOnly{})
	st := newState(t, Options{}, densePolicies(4), Topology{})
	for range 4 {
		for _, r := range []Selector{SelectIdle, SelectIdleAffinity, SelectRoundRobin, &powerOfTwo{}} {
			d, err := st.Select(cancelled(), SelectRequest{Router: r, Session: "s"})
			if err != nil && !errors.Is(err, ErrNoIdlePolicy) {
				t.Fatalf("Select(%T): %v", r, err)
			}
			if err == nil && d.Policy.Index%2 == 0 {
				t.Fatalf("Select(%T) = policy %d; the filter keeps odd indices only", r, d.Policy.Index)
			}
			if d.Lease != 0 {
				mustRelease(t, st, d.Lease)
			}
		}
	}
	for _, r := range []Assigner{AssignLeastLoaded, AssignNodeAffinity} {
		a, err := st.Assign(AssignRequest{Kind: r, NumTasks: 6})
		if err != nil {
			t.Fatalf("Assign(%T): %v", r, err)
		}
		for _, i := range a.Indices {
			if i%2 == 0 {
				t.Fatalf("Assign(%T) = %v; the filter keeps odd indices only", r, a.Indices)
			}
		}
	}
}

// oddOnly is a test filter: policies of odd index only.
type oddOnly struct{}

func (oddOnly) Keep(_ Query, c Candidate) bool { return c.Policy().Index%2 == 1 }

// A request whose exclusions leave no policy is answered at once, not
// after its wait: nothing it may get can become idle.
func TestExcludedEverywhereAnswersAtOnce(t *testing.T) {
	st := newState(t, Options{}, densePolicies(2), Topology{})
	_, err := st.Select(context.Background(), SelectRequest{Router: SelectIdle, Wait: time.Hour, Exclude: []string{"p0", "p1"}})
	if !errors.Is(err, ErrAllExcluded) || !errors.Is(err, ErrAllUnavailable) {
		t.Fatalf("Select excluding every policy = %v; want ErrAllExcluded at once", err)
	}
	a := mustSelect(t, st, SelectIdle, "")
	idle := []string{"p1", "p0"}[a.Policy.Index] // the other one
	_, err = st.Select(cancelled(), SelectRequest{Router: SelectIdle, Exclude: []string{idle}})
	if !errors.Is(err, ErrNoIdlePolicy) {
		t.Fatalf("Select excluding the idle one of two, the other leased = %v; want it to wait", err)
	}
}

// A freed slot goes to the longest waiter whose home it is, else to the
// longest waiter not bound for a home; a session within its sticky wait
// keeps waiting for its home rather than take another policy's slot, and
// takes its home when that frees.
func TestFreedSlotGoesToALongestWaiter(t *testing.T) {
	st := newState(t, Options{}, densePolicies(2), Topology{})
	home, _ := st.Snapshot().Owner("s")
	a := mustSelect(t, st, SelectIdle, "")
	b := mustSelect(t, st, SelectIdle, "")
	homeLease, other := a, b
	if a.Policy.ID != home {
		homeLease, other = b, a
	}
	got := make(chan Decision, 2)
	sel := func(req SelectRequest) {
		d, err := st.Select(context.Background(), req)
		if err != nil {
			t.Error(err)
		}
		got <- d
	}
	go sel(SelectRequest{Router: SelectIdle, Session: "s", StickyWait: time.Hour, Wait: time.Hour})
	poll.Until(t, "the session to wait for its home", func() bool { return st.Stats().Waiters == 1 })
	go sel(SelectRequest{Router: SelectIdle, Wait: time.Hour})
	poll.Until(t, "a second waiter", func() bool { return st.Stats().Waiters == 2 })

	// The other policy frees: the waiter without a home takes it, though
	// it came later.
	mustRelease(t, st, other.Lease)
	if d := <-got; d.Sticky != NotSticky || d.Policy.ID != other.Policy.ID {
		t.Fatalf("first served %+v; want the waiter without a session, on %s", d, other.Policy.ID)
	}
	// It frees again with only the session waiting for its busy home: the
	// session keeps waiting, and the slot stays idle.
	mustRelease(t, st, st.leaseOn(t, other.Policy.ID))
	if ps := st.Stats(); ps.Waiters != 1 || ps.Leases != 1 {
		t.Fatalf("%d waiters, %d leases; want the session still waiting for its home", ps.Waiters, ps.Leases)
	}
	// Its home frees: the session gets it.
	mustRelease(t, st, homeLease.Lease)
	if d := <-got; d.Sticky != StickyHome || d.Policy.ID != home {
		t.Fatalf("then served %+v; want the session at its home %s", d, home)
	}
}

// leaseOn returns the lease out on the policy with the given id.
func (st *State) leaseOn(tb testing.TB, id string) uint64 {
	tb.Helper()
	st.mu.Lock()
	defer st.mu.Unlock()
	for l, s := range st.leases {
		if s.rt.policy.ID == id {
			return l
		}
	}
	tb.Fatalf("no lease on %s", id)
	return 0
}

// A lease that ends unfinished (its holder gave up on the answer; the
// engine may run on) frees nothing by itself: its work counts until a
// probe sent after the hand-out shows what the engine runs. A release
// that says the work is over frees the slot at once. Three placements:
// the lease handed out after the engine's figure, before it, and with a
// probe in flight across the hand-out and the end.
func TestUnfinishedEndHoldsTheSlot(t *testing.T) {
	release := map[bool]func(*State, uint64) (Decision, error){
		false: (*State).Release,
		true:  (*State).ReleaseUnfinished,
	}
	for _, unfinished := range []bool{false, true} {
		name := map[bool]string{false: "release", true: "unfinished"}[unfinished]
		// want reports whether a slot is idle right after the end: only
		// after a release.
		want := func(t *testing.T, st *State) {
			t.Helper()
			if unfinished {
				wantNoIdle(t, st, SelectIdle, "")
				return
			}
			mustSelect(t, st, SelectIdle, "")
		}

		t.Run(name+"/handed out after the figure", func(t *testing.T) {
			clock := fakeclock.New()
			st := newState(t, Options{Polled: true, Now: clock.Now}, withCapacity(densePolicies(1), 2), Topology{})
			loadAnswer(t, st, "p0", clock.Now(), 0, 2)
			clock.Advance(time.Millisecond)
			a := mustSelect(t, st, SelectIdle, "")
			mustSelect(t, st, SelectIdle, "")
			clock.Advance(time.Millisecond)
			if _, err := release[unfinished](st, a.Lease); err != nil {
				t.Fatal(err)
			}
			want(t, st)
			if !unfinished {
				return
			}
			if ps := policyStats(t, st, 0); ps.Occupancy != 2 || ps.Inflight != 1 {
				t.Errorf("occupancy %d, in flight %d; want 2 (the lease out and the work left running), 1", ps.Occupancy, ps.Inflight)
			}
			// The engine still runs both; then only the lease's.
			clock.Advance(time.Millisecond)
			loadAnswer(t, st, "p0", clock.Now(), 2, 2)
			wantNoIdle(t, st, SelectIdle, "")
			clock.Advance(time.Millisecond)
			loadAnswer(t, st, "p0", clock.Now(), 1, 2)
			mustSelect(t, st, SelectIdle, "")
		})

		t.Run(name+"/handed out before the figure", func(t *testing.T) {
			clock := fakeclock.New()
			st := newState(t, Options{Polled: true, Now: clock.Now}, withCapacity(densePolicies(1), 1), Topology{})
			loadAnswer(t, st, "p0", clock.Now(), 0, 1)
			clock.Advance(time.Millisecond)
			a := mustSelect(t, st, SelectIdle, "")
			clock.Advance(time.Millisecond)
			loadAnswer(t, st, "p0", clock.Now(), 1, 1) // its work runs
			clock.Advance(time.Millisecond)
			if _, err := release[unfinished](st, a.Lease); err != nil {
				t.Fatal(err)
			}
			want(t, st)
			if !unfinished {
				return
			}
			clock.Advance(time.Millisecond)
			loadAnswer(t, st, "p0", clock.Now(), 1, 1) // the engine runs on
			wantNoIdle(t, st, SelectIdle, "")
			clock.Advance(time.Millisecond)
			loadAnswer(t, st, "p0", clock.Now(), 0, 1) // it noticed
			mustSelect(t, st, SelectIdle, "")
		})

		t.Run(name+"/probe in flight", func(t *testing.T) {
			clock := fakeclock.New()
			st := newState(t, Options{Polled: true, Now: clock.Now}, withCapacity(densePolicies(1), 1), Topology{})
			loadAnswer(t, st, "p0", clock.Now(), 0, 1)
			clock.Advance(time.Millisecond)
			sent := clock.Now() // a probe goes out
			clock.Advance(time.Millisecond)
			a := mustSelect(t, st, SelectIdle, "")
			clock.Advance(time.Millisecond)
			if _, err := release[unfinished](st, a.Lease); err != nil {
				t.Fatal(err)
			}
			// Its answer, idle, was made before the lease's work began.
			loadAnswer(t, st, "p0", sent, 0, 1)
			want(t, st)
		})
	}
}

// A lease whose TTL ran out ended without its holder saying its work was
// over: the work counts until a probe shows it gone.
func TestExpiredLeaseHoldsTheSlot(t *testing.T) {
	clock := fakeclock.New()
	st := newState(t, Options{Polled: true, Now: clock.Now}, withCapacity(densePolicies(1), 1), Topology{})
	loadAnswer(t, st, "p0", clock.Now(), 0, 1)
	clock.Advance(time.Millisecond)
	l, err := st.Select(cancelled(), SelectRequest{Router: SelectIdle, LeaseTTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the TTL to end the lease", func() bool { return !st.LeaseValid(l.Lease) })
	wantNoIdle(t, st, SelectIdle, "")
	clock.Advance(time.Millisecond)
	loadAnswer(t, st, "p0", clock.Now(), 1, 1) // its holder's request runs on
	wantNoIdle(t, st, SelectIdle, "")
	clock.Advance(time.Millisecond)
	loadAnswer(t, st, "p0", clock.Now(), 0, 1)
	mustSelect(t, st, SelectIdle, "")
}

package routing

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/fakeclock"
)

// An on_idle lease whose work has not started survives every idle answer within
// Grace: an env worker that steps its environment for 2 s between /select
// and its request keeps its policy, and nobody else gets it meanwhile.
// Once a probe sees the work running, the idle answer after it frees the
// lease at once.
func TestLeaseSurvivesIdleAnswersBeforeItsWork(t *testing.T) {
	clock := fakeclock.New()
	st := newState(t, Options{Now: clock.Now}, densePolicies(1), Topology{}) // default Grace
	sel := mustSelectOnIdle(t, st, SelectIdle, "")
	start := clock.Now()
	for range 20 { // 2 s of idle answers, every 100 ms
		clock.Advance(100 * time.Millisecond)
		st.ObserveProbe("p0", Probe{SentAt: clock.Now(), OK: true, Idle: true})
		if !st.LeaseValid(sel.Lease) {
			t.Fatalf("lease freed by an idle answer %v after the hand-out, before any work", clock.Now().Sub(start))
		}
		wantNoIdle(t, st, SelectIdle, "")
	}
	clock.Advance(100 * time.Millisecond)
	st.ObserveProbe("p0", Probe{SentAt: clock.Now(), OK: true, Idle: false}) // the work runs
	if !st.LeaseValid(sel.Lease) {
		t.Fatal("lease freed by a busy answer")
	}
	clock.Advance(100 * time.Millisecond)
	st.ObserveProbe("p0", Probe{SentAt: clock.Now(), OK: true, Idle: true}) // and is over
	if st.LeaseValid(sel.Lease) {
		t.Fatal("lease seen working, then idle: still out")
	}
	if got := mustSelectOnIdle(t, st, SelectIdle, ""); got.Policy.Index != 0 {
		t.Errorf("after the work: %d; want 0", got.Policy.Index)
	}
}

// A busy answer to a probe sent before the hand-out says nothing of the
// lease's work: the idle answer after it does not free the lease.
func TestBusyAnswerSentBeforeHandOutProvesNothing(t *testing.T) {
	clock := fakeclock.New()
	st := newState(t, Options{Now: clock.Now}, densePolicies(1), Topology{})
	sentBefore := clock.Now()
	clock.Advance(time.Millisecond)
	sel := mustSelectOnIdle(t, st, SelectIdle, "")
	clock.Advance(50 * time.Millisecond)
	st.ObserveProbe("p0", Probe{SentAt: sentBefore, OK: true, Idle: false})
	clock.Advance(50 * time.Millisecond)
	st.ObserveProbe("p0", Probe{SentAt: clock.Now(), OK: true, Idle: true})
	if !st.LeaseValid(sel.Lease) {
		t.Fatal("lease freed by an idle answer after a busy answer that predates it")
	}
}

// A client that never releases (the seed adapter) gets its policy back:
// work too short for any probe to see is freed by the first idle answer
// sent Grace after the hand-out.
func TestUnseenLeaseFreedAfterGrace(t *testing.T) {
	clock := fakeclock.New()
	st := newState(t, Options{Now: clock.Now}, densePolicies(1), Topology{})
	sel := mustSelectOnIdle(t, st, SelectIdle, "")
	clock.Advance(DefaultGrace - time.Millisecond)
	st.ObserveProbe("p0", Probe{SentAt: clock.Now(), OK: true, Idle: true})
	if !st.LeaseValid(sel.Lease) {
		t.Fatal("freed before Grace")
	}
	clock.Advance(time.Millisecond)
	st.ObserveProbe("p0", Probe{SentAt: clock.Now(), OK: true, Idle: true})
	if st.LeaseValid(sel.Lease) {
		t.Fatal("not freed at Grace")
	}
}

// With a load figure, an idle answer of a batching policy frees only the
// leases beyond its running requests, and counts the oldest leases as the
// running ones.
func TestIdleAnswerWithLoadFreesOnlyTheExcess(t *testing.T) {
	clock := fakeclock.New()
	st := newState(t, Options{Now: clock.Now}, withCapacity(densePolicies(1), 4), Topology{})
	var leases []uint64
	for range 3 {
		leases = append(leases, mustSelectOnIdle(t, st, SelectIdle, "").Lease)
		clock.Advance(time.Millisecond)
	}
	// All three run: seen working.
	st.ObserveProbe("p0", Probe{SentAt: clock.Now(), OK: true, Idle: true, Load: 3, HasLoad: true})
	for i, l := range leases {
		if !st.LeaseValid(l) {
			t.Fatalf("lease %d freed while the policy runs 3", i)
		}
	}
	clock.Advance(100 * time.Millisecond)
	// One finished: exactly one lease ends.
	st.ObserveProbe("p0", Probe{SentAt: clock.Now(), OK: true, Idle: true, Load: 2, HasLoad: true})
	out := 0
	for _, l := range leases {
		if st.LeaseValid(l) {
			out++
		}
	}
	if out != 2 {
		t.Fatalf("%d leases out after load 3 -> 2; want 2", out)
	}
	clock.Advance(100 * time.Millisecond)
	st.ObserveProbe("p0", Probe{SentAt: clock.Now(), OK: true, Idle: true, Load: 0, HasLoad: true})
	if got := st.Stats().Leases; got != 0 {
		t.Fatalf("%d leases out after load 0; want 0", got)
	}
}

// Policies that answer idle in the first probe round after a registration
// enter the idle deque in index order, whatever order their answers come
// in: the first selects are the seed's deque(eval_policies), and a later
// first answer still takes its place by index among policies never handed
// out.
func TestFirstProbeRoundEntersInIndexOrder(t *testing.T) {
	for _, order := range [][]int{{1, 5, 0, 2, 3, 4}, {5, 4, 3, 2, 1, 0}, {0, 1, 2, 3, 4, 5}} {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			topo := nodes(map[string][2][]int{"a": {ints(0, 1), ints(0, 2, 4)}, "b": {ints(2, 3), ints(1, 3, 5)}})
			st := newState(t, Options{Polled: true}, densePolicies(6), topo)
			for _, i := range order {
				st.ObserveProbe(fmt.Sprintf("p%d", i), Probe{SentAt: time.Now(), OK: true, Idle: true})
			}
			if got := selectIndices(t, st, SelectIdle, "", "", "", "", "", ""); !slices.Equal(got, ints(0, 1, 2, 3, 4, 5)) {
				t.Errorf("first selects = %v; want index order", got)
			}
		})
	}
	t.Run("per node", func(t *testing.T) {
		topo := nodes(map[string][2][]int{"a": {ints(0, 1), ints(0, 2, 4)}, "b": {ints(2, 3), ints(1, 3, 5)}})
		st := newState(t, Options{Polled: true}, densePolicies(6), topo)
		for _, i := range []int{4, 5, 2, 3, 0, 1} {
			st.ObserveProbe(fmt.Sprintf("p%d", i), Probe{SentAt: time.Now(), OK: true, Idle: true})
		}
		if got := selectIndices(t, st, SelectIdleAffinity, "env-0", "env-2", "env-0", "env-2"); !slices.Equal(got, ints(0, 1, 2, 3)) {
			t.Errorf("per-node first selects = %v; want [0 1 2 3]", got)
		}
	})
	t.Run("late answer", func(t *testing.T) {
		st := newState(t, Options{Polled: true}, densePolicies(4), Topology{})
		for _, i := range []int{3, 1} {
			st.ObserveProbe(fmt.Sprintf("p%d", i), Probe{SentAt: time.Now(), OK: true, Idle: true})
		}
		first := mustSelect(t, st, SelectIdle, "") // 1: 0 is not heard from yet
		mustRelease(t, st, first.Lease)            // 1 goes to the back: [3 1]
		for _, i := range []int{2, 0} {
			st.ObserveProbe(fmt.Sprintf("p%d", i), Probe{SentAt: time.Now(), OK: true, Idle: true})
		}
		if got := selectIndices(t, st, SelectIdle, "", "", "", ""); !slices.Equal(got, ints(0, 2, 3, 1)) {
			t.Errorf("selects = %v; want [0 2 3 1]", got)
		}
	})
}

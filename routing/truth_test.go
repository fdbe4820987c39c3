package routing

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/fakeclock"
)

// answer reports one probe of policy p (id "p<i>") sent at sentAt.
func answer(tb testing.TB, st *State, index int, sentAt time.Time, idle bool) {
	tb.Helper()
	st.ObserveProbe(densePolicies(index + 1)[index].ID, Probe{SentAt: sentAt, OK: true, Idle: idle})
}

// idleSelectors are the routers that hand out idle slots under leases.
var idleSelectors = []Selector{SelectIdle, SelectIdleAffinity}

// A router that restarts while every policy is held (on the same stored
// registration) hands out nothing until a policy answers idle, then only
// that policy.
func TestRestartWhileHeldHandsOutNothingUntilIdle(t *testing.T) {
	clock := fakeclock.New()
	topo := nodes(map[string][2][]int{"a": {ints(0, 1), ints(0, 1)}, "b": {ints(2, 3), ints(2, 3)}})
	before := newState(t, Options{Polled: true, Now: clock.Now}, densePolicies(4), topo)
	for i := range 4 {
		answer(t, before, i, clock.Now(), true)
	}
	for range 4 {
		mustSelect(t, before, SelectIdle, "")
	}

	// The restarted router: same registration, nothing heard yet.
	st := newState(t, Options{Polled: true, Now: clock.Now}, densePolicies(4), topo)
	for _, ps := range st.Stats().Policies {
		if ps.State != StateUnknown {
			t.Errorf("policy %d after restart is %s; want %s", ps.Policy.Index, ps.State, StateUnknown)
		}
	}
	for _, r := range append(slices.Clone(idleSelectors), SelectRoundRobin) {
		if sel, err := st.Select(cancelled(), SelectRequest{Router: r, EnvID: "env-0"}); err == nil {
			t.Errorf("Select(%T) before any answer = policy %d; want nothing", r, sel.Policy.Index)
		}
	}
	if a, err := st.Assign(AssignRequest{NumTasks: 1}); !errors.Is(err, ErrAllUnavailable) {
		t.Errorf("Assign before any answer = %v, %v; want ErrAllUnavailable", a.Indices, err)
	}
	// Ten rounds of busy answers change nothing.
	for range 10 {
		clock.Advance(50 * time.Millisecond)
		for i := range 4 {
			answer(t, st, i, clock.Now(), false)
		}
		for _, r := range idleSelectors {
			wantNoIdle(t, st, r, "env-0")
		}
	}
	if got := policyStats(t, st, 3).State; got != StateBusy {
		t.Errorf("policy 3 answering busy is %s; want %s", got, StateBusy)
	}
	// A waiter started now gets the first policy to answer idle.
	got := make(chan Decision, 1)
	go func() {
		sel, err := st.Select(context.Background(), SelectRequest{Wait: time.Hour, Router: SelectIdleAffinity, EnvID: "env-0"})
		if err != nil {
			t.Errorf("waiting Select: %v", err)
		}
		got <- sel
	}()
	waitForWaiters(t, st, 1)
	answer(t, st, 2, clock.Now(), true)
	if sel := <-got; sel.Policy.Index != 2 {
		t.Errorf("waiter got policy %d; want 2, the one that answered idle", sel.Policy.Index)
	}
	wantNoIdle(t, st, SelectIdle, "")
}

// A policy whose last answer is busy is never handed out by the idle
// routers, until it answers idle; a lease that ends after the busy probe was
// sent is newer news and puts its slot back.
func TestBusyAnswerIsNotHandedOut(t *testing.T) {
	for _, r := range idleSelectors {
		t.Run(fmtRouter(r), func(t *testing.T) {
			clock := fakeclock.New()
			topo := nodes(map[string][2][]int{"a": {ints(0), ints(0, 1)}, "b": {ints(1), ints(2)}})
			st := newState(t, Options{Polled: true, Now: clock.Now, Grace: time.Second}, densePolicies(3), topo)
			for i := range 3 {
				answer(t, st, i, clock.Now(), true)
			}
			// Policies 0 and 2 become busy through other users.
			clock.Advance(time.Millisecond)
			answer(t, st, 0, clock.Now(), false)
			answer(t, st, 2, clock.Now(), false)
			for range 3 {
				sel := mustSelect(t, st, r, "env-0")
				if sel.Policy.Index != 1 {
					t.Fatalf("Select = policy %d; want 1, the only one not busy", sel.Policy.Index)
				}
				mustRelease(t, st, sel.Lease)
			}
			held := mustSelect(t, st, r, "env-1")
			wantNoIdle(t, st, r, "env-1")

			// A busy answer sent before the release does not hold the slot;
			// one sent after does.
			sentBefore := clock.Now()
			clock.Advance(time.Millisecond)
			mustRelease(t, st, held.Lease)
			answer(t, st, 1, sentBefore, false)
			held = mustSelect(t, st, r, "env-1")
			if held.Policy.Index != 1 {
				t.Fatalf("after release = policy %d; want 1", held.Policy.Index)
			}
			clock.Advance(time.Millisecond)
			mustRelease(t, st, held.Lease)
			clock.Advance(time.Millisecond)
			answer(t, st, 1, clock.Now(), false)
			wantNoIdle(t, st, r, "env-1")

			// Idle again: handed out again, in answer order.
			answer(t, st, 2, clock.Now(), true)
			answer(t, st, 1, clock.Now(), true)
			if got := selectIndices(t, st, r, "", ""); !slices.Equal(got, ints(2, 1)) {
				t.Errorf("after idle answers = %v; want [2 1]", got)
			}
			if got := policyStats(t, st, 0).State; got != StateBusy {
				t.Errorf("policy 0 = %s; want busy", got)
			}
		})
	}
}

// A policy not heard from (newly registered while polling) gets no work
// from any router, and /assign and round robin skip it too.
func TestUnknownPolicyIsNeverHandedOut(t *testing.T) {
	clock := fakeclock.New()
	st := newState(t, Options{Polled: true, Now: clock.Now}, densePolicies(2), Topology{})
	answer(t, st, 0, clock.Now(), true)
	// Policy 2 joins; policy 1 has failed probes only.
	if err := st.Update(densePolicies(3), Topology{}); err != nil {
		t.Fatal(err)
	}
	st.ObserveProbe("p1", Probe{SentAt: clock.Now()})
	for range 20 {
		for _, r := range []Selector{SelectIdle, SelectIdleAffinity, SelectRoundRobin} {
			sel, err := st.Select(cancelled(), SelectRequest{Router: r})
			if err == nil && sel.Policy.Index != 0 {
				t.Fatalf("Select(%T) = policy %d, not yet heard from", r, sel.Policy.Index)
			}
			if sel.Lease != 0 {
				mustRelease(t, st, sel.Lease)
			}
		}
		a, err := st.Assign(AssignRequest{NumTasks: 3, Kind: AssignNodeAffinity, EnvIDs: []string{"env-0", "env-1", "env-2"}})
		if err != nil || !slices.Equal(a.Indices, ints(0, 0, 0)) {
			t.Fatalf("Assign = %v, %v; want every task on policy 0", a.Indices, err)
		}
	}
	if got := policyStats(t, st, 2).State; got != StateUnknown {
		t.Errorf("policy 2 = %s; want unknown", got)
	}
	if n, total := st.Unprobed(); n != 1 || total != 3 {
		t.Errorf("Unprobed = %d of %d; want 1 of 3", n, total)
	}
	answer(t, st, 2, clock.Now(), true)
	// Never handed out, policy 2 goes before policy 0, which was: the
	// seed's deque holds its unused policies ahead of the returned ones.
	if got := selectIndices(t, st, SelectIdle, "", ""); !slices.Equal(got, ints(2, 0)) {
		t.Errorf("after policy 2 answers = %v; want [2 0]", got)
	}
}

// Without a poller, policies are trusted idle from registration.
func TestUnpolledPoliciesAreTrusted(t *testing.T) {
	st := newState(t, Options{}, densePolicies(2), Topology{})
	if got := selectIndices(t, st, SelectIdle, "", ""); !slices.Equal(got, ints(0, 1)) {
		t.Errorf("Select = %v; want [0 1]", got)
	}
	if n, _ := st.Unprobed(); n != 2 {
		t.Errorf("Unprobed = %d; want 2 (no probes, but no poller either)", n)
	}
}

// A lease past its TTL ends like a released one: its slot is idle again,
// a later release says it had ended, and the expiry is counted.
func TestLeaseTTLEndsLease(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts Options
		req  time.Duration
	}{
		{name: "per request", req: 5 * time.Millisecond},
		{name: "default", opts: Options{LeaseTTL: 5 * time.Millisecond}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := newState(t, tt.opts, densePolicies(1), Topology{})
			sel, err := st.Select(cancelled(), SelectRequest{Router: SelectIdle, LeaseTTL: tt.req})
			if err != nil {
				t.Fatal(err)
			}
			// A waiter gets the slot when the lease expires.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			next, err := st.Select(ctx, SelectRequest{Wait: time.Hour, Router: SelectIdle, LeaseTTL: time.Hour})
			if err != nil {
				t.Fatalf("waiting for the expiry: %v", err)
			}
			if st.LeaseValid(sel.Lease) || !st.LeaseValid(next.Lease) {
				t.Errorf("expired lease valid %v, next valid %v; want false, true", st.LeaseValid(sel.Lease), st.LeaseValid(next.Lease))
			}
			if _, err := st.Release(sel.Lease); !errors.Is(err, ErrLeaseEnded) {
				t.Errorf("Release(expired) = %v; want ErrLeaseEnded", err)
			}
			if got := policyStats(t, st, 0).Expired; got != 1 {
				t.Errorf("Expired = %d; want 1", got)
			}
			// Released before its TTL, a lease does not expire later.
			mustRelease(t, st, next.Lease)
			if got := policyStats(t, st, 0).Expired; got != 1 {
				t.Errorf("Expired after a release = %d; want 1", got)
			}
		})
	}
}

// Probes answer busy while a holder works and idle otherwise, at random
// moments, while many waiters select and release: no capacity-1 policy is
// ever held twice (a lease whose work has not started survives every idle
// answer; one seen working is freed by the idle answer after its work), a
// policy that only ever answers busy is never handed out, and nothing is
// lost.
func TestConcurrentAnswersNeverDoubleHandOut(t *testing.T) {
	const (
		policies  = 8
		alwaysBus = 6 // policies 6 and 7 only ever answer busy
		workers   = 16
		rounds    = 200
	)
	topo := nodes(map[string][2][]int{"a": {ints(0, 1), ints(0, 1, 2, 3)}, "b": {ints(2, 3), ints(4, 5, 6, 7)}})
	// Grace is long: only a lease seen working can be freed by an idle
	// answer.
	st := newState(t, Options{Polled: true, Grace: time.Hour}, densePolicies(policies), topo)
	var holders [policies]atomic.Int32

	ctx, stop := context.WithCancel(context.Background())
	var probes sync.WaitGroup
	for i := range policies {
		probes.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 1))
			id := densePolicies(policies)[i].ID
			for ctx.Err() == nil {
				sent := time.Now()
				idle := i < alwaysBus && holders[i].Load() == 0
				st.ObserveProbe(id, Probe{SentAt: sent, OK: true, Idle: idle})
				time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
			}
		})
	}

	var work sync.WaitGroup
	var handed atomic.Int64
	for w := range workers {
		work.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for range rounds {
				wctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+r.IntN(5))*time.Millisecond)
				sel, err := st.Select(wctx, SelectRequest{Wait: time.Hour, Router: idleSelectors[r.IntN(2)], EnvID: "env-" + string(rune('0'+r.IntN(4)))})
				cancel()
				if err != nil {
					continue
				}
				i := sel.Policy.Index
				if i >= alwaysBus {
					t.Errorf("policy %d, which only answers busy, was handed out", i)
				}
				if n := holders[i].Add(1); n > 1 {
					t.Errorf("policy %d held %d times at once", i, n)
				}
				handed.Add(1)
				time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
				holders[i].Add(-1)
				// The idle answer after the work may have freed it already.
				if _, err := st.Release(sel.Lease); err != nil && !errors.Is(err, ErrLeaseEnded) {
					t.Errorf("Release: %v", err)
				}
			}
		})
	}
	work.Wait()
	stop()
	probes.Wait()
	if handed.Load() == 0 {
		t.Fatal("nothing was handed out")
	}
	stats := st.Stats()
	if stats.Leases != 0 || stats.Waiters != 0 {
		t.Errorf("after the run: %d leases, %d waiters; want none", stats.Leases, stats.Waiters)
	}
	t.Logf("%d hand-outs", handed.Load())
}

func fmtRouter(r Selector) string {
	for _, row := range Routers() {
		if row.Select == r {
			return row.Name
		}
	}
	return "unlisted"
}

// Why a policy fails, since when it is unhealthy and when it last answered
// are kept for /stats, and cleared once it is healthy again.
func TestHealthYouCanActOn(t *testing.T) {
	clock := fakeclock.New()
	st := newState(t, Options{Polled: true, FailThreshold: 2, PassThreshold: 2}, densePolicies(1), Topology{})
	ok := clock.Now()
	answer(t, st, 0, ok, true)
	clock.Advance(time.Second)
	firstFail := clock.Now()
	st.ObserveProbe("p0", Probe{SentAt: firstFail, Err: "connection refused"})
	if ps := policyStats(t, st, 0); ps.LastError != "connection refused" || !ps.UnhealthySince.IsZero() || !ps.LastOK.Equal(ok) {
		t.Errorf("after one failure: last error %q, unhealthy since %v, last ok %v", ps.LastError, ps.UnhealthySince, ps.LastOK)
	}
	clock.Advance(time.Second)
	st.ObserveProbe("p0", Probe{SentAt: clock.Now(), Err: "status 404"})
	ps := policyStats(t, st, 0)
	if ps.State != StateUnhealthy || ps.LastError != "status 404" || !ps.UnhealthySince.Equal(firstFail) {
		t.Errorf("unhealthy: state %s, last error %q, since %v; want unhealthy, status 404, %v", ps.State, ps.LastError, ps.UnhealthySince, firstFail)
	}
	clock.Advance(time.Second)
	answer(t, st, 0, clock.Now(), true)
	if ps := policyStats(t, st, 0); ps.LastError != "status 404" || ps.UnhealthySince.IsZero() {
		t.Errorf("one pass of two: last error %q, since %v; want both kept", ps.LastError, ps.UnhealthySince)
	}
	clock.Advance(time.Second)
	answer(t, st, 0, clock.Now(), true)
	if ps := policyStats(t, st, 0); ps.State != StateIdle || ps.LastError != "" || !ps.UnhealthySince.IsZero() || !ps.LastOK.Equal(clock.Now()) {
		t.Errorf("healthy again: state %s, last error %q, since %v, last ok %v", ps.State, ps.LastError, ps.UnhealthySince, ps.LastOK)
	}
}

// A policy's weight version is the registered one until its /idle answers
// report one; a registration with a higher version raises it.
func TestWeightVersions(t *testing.T) {
	clock := fakeclock.New()
	ps := densePolicies(2)
	ps[1].Version = 4
	st := newState(t, Options{Polled: true}, ps, Topology{})
	if a, b := policyStats(t, st, 0).Version, policyStats(t, st, 1).Version; a != 0 || b != 4 {
		t.Fatalf("registered versions %d, %d; want 0, 4", a, b)
	}
	st.ObserveProbe("p0", Probe{SentAt: clock.Now(), OK: true, Idle: true, Version: 7, HasVersion: true})
	st.ObserveProbe("p1", Probe{SentAt: clock.Now(), OK: true, Idle: true}) // reports none: kept
	if a, b := policyStats(t, st, 0).Version, policyStats(t, st, 1).Version; a != 7 || b != 4 {
		t.Errorf("after answers: versions %d, %d; want 7, 4", a, b)
	}
	ps[0].Version, ps[1].Version = 2, 9 // a re-registration lowers nothing
	if err := st.Update(ps, Topology{}); err != nil {
		t.Fatal(err)
	}
	if a, b := policyStats(t, st, 0).Version, policyStats(t, st, 1).Version; a != 7 || b != 9 {
		t.Errorf("after re-registration: versions %d, %d; want 7, 9", a, b)
	}
}

// A replica that becomes the leader resets: the old leader's hand-outs are
// not known to it, so it hands out nothing until a policy answers idle,
// and leases from before the reset are ended.
func TestResetForgetsLeasesAndWaitsForAnswers(t *testing.T) {
	clock := fakeclock.New()
	st := newState(t, Options{Polled: true, Now: clock.Now}, densePolicies(3), Topology{})
	for i := range 3 {
		answer(t, st, i, clock.Now(), true)
	}
	held := mustSelect(t, st, SelectIdle, "")
	mustSelect(t, st, SelectIdle, "")
	mustSelect(t, st, SelectIdle, "")
	// A Select waiting when the state resets ends with ErrReset.
	waited := make(chan error, 1)
	go func() {
		_, err := st.Select(context.Background(), SelectRequest{Wait: time.Hour, Router: SelectIdle})
		waited <- err
	}()
	waitForWaiters(t, st, 1)
	st.Reset()
	if err := <-waited; !errors.Is(err, ErrReset) {
		t.Errorf("a Select waiting across Reset = %v, want ErrReset", err)
	}
	if n := st.Stats().Waiters; n != 0 {
		t.Errorf("%d waiters after Reset, want 0", n)
	}
	for _, ps := range st.Stats().Policies {
		if ps.State != StateUnknown || ps.Inflight != 0 {
			t.Errorf("policy %d after Reset: %s, %d in flight; want %s, 0", ps.Policy.Index, ps.State, ps.Inflight, StateUnknown)
		}
	}
	if _, err := st.Release(held.Lease); !errors.Is(err, ErrLeaseEnded) {
		t.Errorf("Release of a lease from before Reset = %v, want ErrLeaseEnded", err)
	}
	for _, r := range idleSelectors {
		wantNoIdle(t, st, r, "")
	}
	if n, total := st.Unprobed(); n != 3 || total != 3 {
		t.Errorf("Unprobed after Reset = %d of %d, want 3 of 3", n, total)
	}
	clock.Advance(time.Second)
	other := (held.Policy.Index + 1) % 3
	answer(t, st, held.Policy.Index, clock.Now(), false)
	answer(t, st, other, clock.Now(), true)
	if sel := mustSelect(t, st, SelectIdle, ""); sel.Policy.Index != other {
		t.Errorf("after Reset got policy %d, want %d, the one that answered idle", sel.Policy.Index, other)
	}
}

package routing

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nodes builds a Topology from node -> (env ids, eval ids).
func nodes(spec map[string][2][]int) Topology {
	t := make(Topology, len(spec))
	for node, c := range spec {
		t[node] = map[string][]int{KindEnv: c[0], KindEval: c[1]}
	}
	return t
}

// ints is a shorthand for []int literals in tables.
func ints(v ...int) []int { return v }

// densePolicies returns n policies with indices 0..n-1 and ids "p0".."pN".
func densePolicies(n int) []Policy {
	ps := make([]Policy, n)
	for i := range ps {
		ps[i] = Policy{Index: i, ID: "p" + strconv.Itoa(i), URL: "http://policy-" + strconv.Itoa(i)}
	}
	return ps
}

// withCapacity sets every policy's capacity to k.
func withCapacity(ps []Policy, k int) []Policy {
	for i := range ps {
		ps[i].Capacity = k
	}
	return ps
}

// newState returns a State holding policies and topo.
func newState(tb testing.TB, opts Options, policies []Policy, topo Topology) *State {
	tb.Helper()
	st := New(opts)
	if err := st.Update(policies, topo); err != nil {
		tb.Fatalf("Update: %v", err)
	}
	return st
}

// cancelled is a context that is already done: Select with it answers at
// once, with context.Canceled when it would have to wait.
func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// mustSelect selects without waiting and fails the test when nothing is
// available.
func mustSelect(tb testing.TB, st *State, kind Selector, envID string) Decision {
	tb.Helper()
	sel, err := st.Select(cancelled(), SelectRequest{Router: kind, EnvID: envID})
	if err != nil {
		tb.Fatalf("Select(%T, %q): %v", kind, envID, err)
	}
	return sel
}

// leaseBoth leases the one slot of each of st's two policies, p0 and p1,
// and returns their decisions in that order.
func leaseBoth(tb testing.TB, st *State) (p0, p1 Decision) {
	tb.Helper()
	p0, p1 = mustSelect(tb, st, SelectIdle, ""), mustSelect(tb, st, SelectIdle, "")
	if p1.Policy.ID != "p1" {
		p0, p1 = p1, p0
	}
	return p0, p1
}

// mustSelectOnIdle selects with the seed's release contract
// (ReleaseOnIdle): an idle answer may end the lease.
func mustSelectOnIdle(tb testing.TB, st *State, kind Selector, envID string) Decision {
	tb.Helper()
	sel, err := st.Select(cancelled(), SelectRequest{Router: kind, EnvID: envID, Release: ReleaseOnIdle})
	if err != nil {
		tb.Fatalf("Select(%T, %q, on_idle): %v", kind, envID, err)
	}
	return sel
}

// selectIndices selects once per env id, without waiting, and returns the
// chosen indices.
func selectIndices(tb testing.TB, st *State, kind Selector, envIDs ...string) []int {
	tb.Helper()
	var got []int
	for _, e := range envIDs {
		got = append(got, mustSelect(tb, st, kind, e).Policy.Index)
	}
	return got
}

// wantNoIdle checks that a Select of kind would have to wait.
func wantNoIdle(tb testing.TB, st *State, kind Selector, envID string) {
	tb.Helper()
	sel, err := st.Select(cancelled(), SelectRequest{Router: kind, EnvID: envID})
	if !errors.Is(err, ErrNoIdlePolicy) {
		tb.Fatalf("Select(%T, %q) = %d, %v; want it to wait (ErrNoIdlePolicy)", kind, envID, sel.Policy.Index, err)
	}
}

func mustRelease(tb testing.TB, st *State, lease uint64) {
	tb.Helper()
	if _, err := st.Release(lease); err != nil {
		tb.Fatalf("Release(%d): %v", lease, err)
	}
}

// policyStats returns the stats of the policy with the given index.
func policyStats(tb testing.TB, st *State, index int) PolicyStats {
	tb.Helper()
	for _, ps := range st.Stats().Policies {
		if ps.Policy.Index == index {
			return ps
		}
	}
	tb.Fatalf("no stats for policy %d", index)
	return PolicyStats{}
}

// wantInputError checks that err is an *InputError on field whose message
// mentions every string in mention.
func wantInputError(tb testing.TB, err error, field string, mention ...string) {
	tb.Helper()
	var ie *InputError
	if !errors.As(err, &ie) {
		tb.Fatalf("err = %v (%T); want *InputError on %q", err, err, field)
	}
	if ie.Field != field {
		tb.Errorf("field = %q; want %q (err %v)", ie.Field, field, err)
	}
	for _, m := range mention {
		if !strings.Contains(ie.Msg, m) {
			tb.Errorf("message %q does not mention %q", ie.Msg, m)
		}
	}
}

// waitForWaiters returns once n /select callers are queued. It polls
// without a deadline: a waiter that never queues is a hang that go test's
// -timeout reports, not a timing flake.
func waitForWaiters(tb testing.TB, st *State, n int) {
	tb.Helper()
	for st.Stats().Waiters < n {
		time.Sleep(100 * time.Microsecond)
	}
	if got := st.Stats().Waiters; got != n {
		tb.Fatalf("%d waiters queued; want %d", got, n)
	}
}

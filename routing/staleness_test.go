package routing

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/fakeclock"
)

// versioned returns n policies p0..pn-1 with the given weight versions.
func versioned(versions ...int64) []Policy {
	ps := densePolicies(len(versions))
	for i, v := range versions {
		ps[i].Version = v
	}
	return ps
}

// A policy below the weight-version floor is never handed out or assigned,
// by any router, in random states; with the floor met, answers do not
// change.
func TestStalePolicyIsNeverRouted(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	for c := range 300 {
		n := 1 + r.IntN(8)
		vs := make([]int64, n)
		for i := range vs {
			vs[i] = int64(r.IntN(4))
		}
		topo := nodes(map[string][2][]int{"a": {ints(0), ints(0)}})
		st := newState(t, Options{}, versioned(vs...), topo)
		floor := int64(r.IntN(5))
		var reqFloor *int64
		if r.IntN(2) == 0 {
			st.SetMinVersion(floor)
		} else {
			reqFloor = &floor
			st.SetMinVersion(int64(r.IntN(5))) // the request's floor wins
		}
		fresh := 0
		for _, v := range vs {
			if v >= floor {
				fresh++
			}
		}
		for _, router := range []Selector{SelectIdle, SelectIdleAffinity, SelectRoundRobin} {
			for range n + 1 {
				sel, err := st.Select(cancelled(), SelectRequest{Router: router, EnvID: "env-0", MinVersion: reqFloor})
				if err != nil {
					continue
				}
				if vs[sel.Policy.Index] < floor {
					t.Fatalf("case %d: %T handed out policy %d at version %d under floor %d", c, router, sel.Policy.Index, vs[sel.Policy.Index], floor)
				}
				if sel.Lease != 0 {
					defer mustRelease(t, st, sel.Lease)
				}
			}
		}
		for _, loads := range [][]int64{nil, make([]int64, n)} {
			a, err := st.Assign(AssignRequest{Kind: AssignNodeAffinity, NumTasks: 5, Loads: loads, EnvIDs: []string{"env-0", "env-1", "env-0", "x", "env-0"}, MinVersion: reqFloor})
			if fresh == 0 {
				if !errors.Is(err, ErrNoFreshPolicy) {
					t.Fatalf("case %d: Assign with nothing fresh = %v, %v; want ErrNoFreshPolicy", c, a.Indices, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("case %d: Assign: %v", c, err)
			}
			for _, idx := range a.Indices {
				if vs[idx] < floor {
					t.Fatalf("case %d: Assign gave a task to policy %d at version %d under floor %d", c, idx, vs[idx], floor)
				}
			}
		}
	}
}

// The floor leaves the seed's answers alone when every policy meets it,
// and skips stale policies in place when some do not.
func TestFloorSkipsStalePolicies(t *testing.T) {
	st := newState(t, Options{}, versioned(5, 4, 5, 5), Topology{})
	st.SetMinVersion(5)
	if got := selectIndices(t, st, SelectIdle, "", "", ""); !slices.Equal(got, ints(0, 2, 3)) {
		t.Errorf("Select under floor 5 = %v; want [0 2 3]", got)
	}
	wantNoIdle(t, st, SelectIdle, "")
	// A request may ask for less: policy 1 is fine for it.
	low := int64(4)
	sel, err := st.Select(cancelled(), SelectRequest{Router: SelectIdle, MinVersion: &low})
	if err != nil || sel.Policy.Index != 1 {
		t.Errorf("Select with min_version 4 = %d, %v; want policy 1", sel.Policy.Index, err)
	}
	a, err := st.Assign(AssignRequest{NumTasks: 3, Loads: []int64{0, 0, 9, 9}})
	if err != nil || !slices.Equal(a.Indices, ints(0, 0, 0)) {
		t.Errorf("stateless Assign under floor 5 = %v, %v; want [0 0 0] (policy 1 is stale)", a.Indices, err)
	}
	st.SetMinVersion(0)
	a, err = st.Assign(AssignRequest{NumTasks: 3, Loads: []int64{0, 0, 9, 9}})
	if err != nil || !slices.Equal(a.Indices, ints(0, 1, 0)) {
		t.Errorf("stateless Assign without floor = %v, %v; want the seed's [0 1 0]", a.Indices, err)
	}
}

// A /select waiting for a fresh policy gets one as soon as an idle policy
// reports the version, or when a fresh one is released; a stale policy's
// idle slot never goes to it.
func TestWaiterGetsFreshPolicy(t *testing.T) {
	clock := fakeclock.New()
	st := newState(t, Options{Polled: true, Now: clock.Now}, versioned(1, 1), Topology{})
	for _, id := range []string{"p0", "p1"} {
		st.ObserveProbe(id, Probe{SentAt: clock.Now(), OK: true, Idle: true, Version: 1, HasVersion: true})
	}
	st.SetMinVersion(2)
	got := make(chan Decision, 1)
	go func() {
		sel, err := st.Select(context.Background(), SelectRequest{Wait: time.Hour, Router: SelectIdle})
		if err != nil {
			t.Errorf("waiting Select: %v", err)
		}
		got <- sel
	}()
	waitForWaiters(t, st, 1)
	var we *WaitError
	if _, err := st.Select(cancelled(), SelectRequest{Router: SelectIdle}); !errors.As(err, &we) || we.Err != ErrNoFreshPolicy {
		t.Errorf("try with every policy stale = %v; want ErrNoFreshPolicy", err)
	}
	// Policy 1 comes back from its update at version 2.
	st.ObserveProbe("p1", Probe{SentAt: clock.Now(), OK: true, Idle: true, Version: 2, HasVersion: true})
	select {
	case sel := <-got:
		if sel.Policy.Index != 1 {
			t.Errorf("waiter got policy %d; want 1, the fresh one", sel.Policy.Index)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not get the policy that reported the new version")
	}
	if _, err := st.Select(cancelled(), SelectRequest{Router: SelectIdle}); !errors.As(err, &we) || we.Err != ErrNoIdlePolicy {
		t.Errorf("try with policy 1 fresh and leased = %v; want ErrNoIdlePolicy", err)
	}
	// A stale release goes to the deque, not to a fresh-only waiter.
	old := int64(0)
	stale, err := st.Select(cancelled(), SelectRequest{Router: SelectIdle, MinVersion: &old})
	if err != nil || stale.Policy.Index != 0 {
		t.Fatalf("Select with min_version 0 = %d, %v; want policy 0", stale.Policy.Index, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	go func() {
		waitForWaiters(t, st, 1)
		mustRelease(t, st, stale.Lease)
	}()
	if sel, err := st.Select(ctx, SelectRequest{Wait: time.Hour, Router: SelectIdle}); err == nil {
		t.Errorf("fresh-only waiter got policy %d at version 1", sel.Policy.Index)
	}
}

// A session's home meets the weight-version floor too: a stale policy is
// never a home, in /select or /assign.
func TestStaleIsNeverAHome(t *testing.T) {
	st := newState(t, Options{}, versioned(1, 2, 1, 2, 1, 2, 1, 2), Topology{})
	st.SetMinVersion(2)
	for i := range 200 {
		key := "traj-" + strconv.Itoa(i)
		sel, err := st.Select(cancelled(), SelectRequest{Router: SelectIdle, Session: key})
		if err != nil {
			t.Fatalf("Select(%s): %v", key, err)
		}
		if sel.Policy.Index%2 == 0 {
			t.Fatalf("session %s homed on stale policy %d", key, sel.Policy.Index)
		}
		mustRelease(t, st, sel.Lease)
		a, err := st.Assign(AssignRequest{NumTasks: 2, Sessions: []string{key, key}})
		if err != nil {
			t.Fatal(err)
		}
		for _, idx := range a.Indices {
			if idx%2 == 0 {
				t.Fatalf("session %s assigned to stale policy %d", key, idx)
			}
		}
	}
}

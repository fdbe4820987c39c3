package routing

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"
)

// sessions returns n distinct session keys.
func sessions(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "trajectory-" + strconv.Itoa(i)
	}
	return keys
}

// stickySelect selects for a session without waiting for an idle policy.
func stickySelect(tb testing.TB, st *State, r Selector, env, session string) Decision {
	tb.Helper()
	sel, err := st.Select(cancelled(), SelectRequest{Router: r, EnvID: env, Session: session})
	if err != nil {
		tb.Fatalf("Select(session %q): %v", session, err)
	}
	return sel
}

func TestStickySameSessionSamePolicy(t *testing.T) {
	for _, r := range []struct {
		name string
		sel  Selector
	}{{"simple", SelectIdle}, {"idle_affinity", SelectIdleAffinity}, {"node_affinity", SelectRoundRobin}} {
		t.Run(r.name, func(t *testing.T) {
			st := newState(t, Options{}, densePolicies(16), Topology{})
			homes := make(map[int]bool)
			for _, key := range sessions(64) {
				want, ok := st.Snapshot().Owner(key)
				if !ok {
					t.Fatal("Owner: no policy")
				}
				for range 5 {
					sel := stickySelect(t, st, r.sel, "env-0", key)
					if sel.Policy.ID != want {
						t.Fatalf("session %q got %s; want its home %s", key, sel.Policy.ID, want)
					}
					if sel.Lease != 0 {
						mustRelease(t, st, sel.Lease)
					}
					homes[sel.Policy.Index] = true
				}
			}
			// 64 sessions over 16 policies: they are not all on one.
			if len(homes) < 8 {
				t.Errorf("64 sessions went to %d policies; want them spread over at least 8", len(homes))
			}
			if got := st.Stats().Sticky; got.Hits != 64*5 || got.Spills != 0 || got.Misses != 0 {
				t.Errorf("sticky stats = %+v; want %d hits only", got, 64*5)
			}
		})
	}
}

// owners returns each key's natural home on the ring of policies.
func owners(tb testing.TB, ps []Policy, keys []string) []string {
	tb.Helper()
	snap, err := newSnapshot(ps, Topology{})
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i], _ = snap.Owner(k)
	}
	return out
}

func TestStickyRingMovesFewKeys(t *testing.T) {
	const n, keys = 10, 10_000
	ks := sessions(keys)
	before := owners(t, densePolicies(n), ks)

	t.Run("remove", func(t *testing.T) {
		gone := "p3"
		after := owners(t, slices.DeleteFunc(densePolicies(n), func(p Policy) bool { return p.ID == gone }), ks)
		for i := range ks {
			switch {
			case before[i] == gone && after[i] == gone:
				t.Fatalf("key %q still on the removed policy", ks[i])
			case before[i] != gone && after[i] != before[i]:
				t.Fatalf("key %q moved from %s to %s though %s stayed", ks[i], before[i], after[i], before[i])
			}
		}
	})
	t.Run("add", func(t *testing.T) {
		after := owners(t, densePolicies(n+1), ks)
		moved := 0
		for i := range ks {
			if after[i] != before[i] {
				moved++
				if after[i] != "p"+strconv.Itoa(n) {
					t.Fatalf("key %q moved from %s to %s, not to the new policy", ks[i], before[i], after[i])
				}
			}
		}
		// Ideal is keys/(n+1) ≈ 909; allow half as much again for the
		// ring's unevenness at 128 points per policy.
		if limit := keys * 3 / (2 * (n + 1)); moved > limit || moved == 0 {
			t.Errorf("%d of %d keys moved when policy %d of %d joined; want between 1 and %d", moved, keys, n+1, n+1, limit)
		}
		t.Logf("%d of %d keys moved (ideal %d)", moved, keys, keys/(n+1))
	})
}

func TestStickyRingIsStable(t *testing.T) {
	// Registration order does not matter, and the ring is the same in
	// every process: these homes were computed once and must not change.
	ps := densePolicies(8)
	rev := slices.Clone(ps)
	slices.Reverse(rev)
	a, b := owners(t, ps, sessions(200)), owners(t, rev, sessions(200))
	if !slices.Equal(a, b) {
		t.Fatal("homes depend on registration order")
	}
	snap, _ := newSnapshot(ps, Topology{})
	if got := len(snap.rings().all.points); got != 8*RingPoints || RingPoints < 100 {
		t.Errorf("ring has %d points for 8 policies; want %d (>= 100 each)", got, 8*RingPoints)
	}
}

func TestStickyAssignHotSessionBounded(t *testing.T) {
	const n, tasks = 8, 1000
	keys := make([]string, tasks)
	for i := range keys {
		keys[i] = "group-7"
	}
	for _, c := range []float64{0, 1, 1.25, 2} {
		t.Run("c="+strconv.FormatFloat(c, 'g', -1, 64), func(t *testing.T) {
			cf := c
			if cf == 0 {
				cf = DefaultLoadFactor
			}
			check := func(t *testing.T, got []int, start []int64) {
				t.Helper()
				loads := slices.Clone(start)
				var total int64
				for _, l := range loads {
					total += l
				}
				for task, idx := range got {
					if b := loadBound(cf, total, n); loads[idx] >= b {
						t.Fatalf("task %d went to policy %d at load %d; the bound was %d", task, idx, loads[idx], b)
					}
					loads[idx]++
					total++
				}
				used := 0
				for _, l := range loads {
					if l > start[0] {
						used++
					}
				}
				if used < 2 {
					t.Errorf("one hot session used %d policies; want it spread", used)
				}
				if max := slices.Max(loads); max > loadBound(cf, total-1, n) {
					t.Errorf("max load %d above the final bound %d", max, loadBound(cf, total-1, n))
				}
			}
			t.Run("tracked", func(t *testing.T) {
				st := newState(t, Options{}, densePolicies(n), Topology{})
				a, err := st.Assign(AssignRequest{NumTasks: tasks, Sessions: keys, LoadFactor: c})
				if err != nil {
					t.Fatal(err)
				}
				check(t, a.Indices, make([]int64, n))
				for i := range n {
					if got, want := policyStats(t, st, i).Load, int64(slices.Index(a.Indices, i)); want >= 0 && got == 0 {
						t.Errorf("policy %d has load %d after taking tasks", i, got)
					}
				}
			})
			t.Run("stateless", func(t *testing.T) {
				st := newState(t, Options{}, densePolicies(n), Topology{})
				start := []int64{3, 3, 3, 3, 3, 3, 3, 3}
				a, err := st.Assign(AssignRequest{NumTasks: tasks, Sessions: keys, Loads: start, LoadFactor: c})
				if err != nil {
					t.Fatal(err)
				}
				check(t, a.Indices, start)
			})
		})
	}
}

func TestStickyAssignMixed(t *testing.T) {
	st := newState(t, Options{}, densePolicies(4), Topology{})
	home, _ := st.Snapshot().Owner("s")
	a, err := st.Assign(AssignRequest{NumTasks: 3, Sessions: []string{"", "s", ""}, Loads: []int64{0, 0, 0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Snapshot().Policies()[a.Indices[1]].ID; got != home {
		t.Errorf("task with session went to %s; want its home %s", got, home)
	}
	// The others are the least loaded ones after the home took its task.
	want := []int{0, 1}
	if h := a.Indices[1]; h <= 1 {
		want = slices.DeleteFunc([]int{0, 1, 2}, func(i int) bool { return i == h })
	}
	if got := []int{a.Indices[0], a.Indices[2]}; !slices.Equal(got, want) {
		t.Errorf("tasks without session went to %v; want %v", got, want)
	}
	_, err = st.Assign(AssignRequest{NumTasks: 2, Sessions: []string{"s"}})
	wantInputError(t, err, "session_ids", "1 entries")
}

func TestStickyNeverHomesUnavailable(t *testing.T) {
	// p0..p3 answer idle, p4 is drained, p5 unhealthy, p6 and p7 unknown
	// (Polled: not heard from since registration).
	ps := densePolicies(8)
	ps[4].Draining = true
	st := newState(t, Options{Polled: true, FailThreshold: 1}, ps, Topology{})
	now := time.Now()
	for i := range 6 {
		st.ObserveProbe(ps[i].ID, Probe{SentAt: now, OK: true, Idle: true})
	}
	st.ObserveProbe(ps[5].ID, Probe{SentAt: now, OK: false, Err: "down"})
	bad := map[int]string{4: StateDraining, 5: StateUnhealthy, 6: StateUnknown, 7: StateUnknown}
	for i, want := range bad {
		if got := policyStats(t, st, i).State; got != want {
			t.Fatalf("policy %d is %s; want %s", i, got, want)
		}
	}
	keys := sessions(500)
	for _, key := range keys {
		for _, r := range []Selector{SelectIdle, SelectRoundRobin} {
			sel := stickySelect(t, st, r, "env-1", key)
			if s, ok := bad[sel.Policy.Index]; ok {
				t.Fatalf("session %q homed on policy %d, which is %s", key, sel.Policy.Index, s)
			}
			if sel.Lease != 0 {
				mustRelease(t, st, sel.Lease)
			}
		}
	}
	a, err := st.Assign(AssignRequest{NumTasks: len(keys), Sessions: keys})
	if err != nil {
		t.Fatal(err)
	}
	for task, idx := range a.Indices {
		if s, ok := bad[idx]; ok {
			t.Fatalf("assign task %d homed on policy %d, which is %s", task, idx, s)
		}
	}
	got := st.Stats().Sticky
	if got.Misses == 0 || got.Hits == 0 {
		t.Errorf("sticky stats = %+v; want hits and misses (sessions of the unavailable policies)", got)
	}
}

// busyHome returns a state of 4 policies, 3 of them leased out: a
// session's home (with that lease) and two others. The home's load, 1, is
// under the bound ⌈1.25 · (3 + 1) / 4⌉ = 2, so it stays the home while
// busy; idle is the one policy left idle.
func busyHome(t *testing.T) (st *State, key string, home Decision, others []uint64, idle int) {
	t.Helper()
	st = newState(t, Options{}, densePolicies(4), Topology{})
	key = "trajectory-busy"
	home = stickySelect(t, st, SelectIdle, "", key)
	taken := map[int]bool{home.Policy.Index: true}
	for range 2 {
		sel := mustSelect(t, st, SelectIdle, "")
		others = append(others, sel.Lease)
		taken[sel.Policy.Index] = true
	}
	for i := range 4 {
		if !taken[i] {
			idle = i
		}
	}
	return st, key, home, others, idle
}

func TestStickyBusyHomeWait(t *testing.T) {
	t.Run("released within the wait", func(t *testing.T) {
		st, key, home, _, _ := busyHome(t)
		got := make(chan Decision, 1)
		go func() {
			sel, err := st.Select(context.Background(), SelectRequest{Wait: time.Hour, Session: key, StickyWait: time.Hour})
			if err != nil {
				t.Errorf("Select: %v", err)
			}
			got <- sel
		}()
		waitForWaiters(t, st, 1)
		mustRelease(t, st, home.Lease)
		sel := <-got
		if sel.Policy.Index != home.Policy.Index {
			t.Fatalf("session got policy %d; want its home %d, released while it waited", sel.Policy.Index, home.Policy.Index)
		}
		if s := st.Stats().Sticky; s.Hits != 2 || s.Spills != 0 {
			t.Errorf("sticky stats = %+v; want 2 hits", s)
		}
	})
	t.Run("not released: spill", func(t *testing.T) {
		st, key, home, _, idle := busyHome(t)
		sel, err := st.Select(context.Background(), SelectRequest{Wait: time.Hour, Session: key, StickyWait: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if sel.Policy.Index == home.Policy.Index {
			t.Fatalf("session got its busy home %d", home.Policy.Index)
		}
		// The spill went where the router sends: the one idle policy.
		if sel.Policy.Index != idle {
			t.Errorf("spill went to %d; want the router's pick %d", sel.Policy.Index, idle)
		}
		if s := st.Stats().Sticky; s.Spills != 1 {
			t.Errorf("sticky stats = %+v; want 1 spill", s)
		}
		// A spill does not re-home: once the home is free the session is
		// back on it.
		mustRelease(t, st, home.Lease)
		mustRelease(t, st, sel.Lease)
		if again := stickySelect(t, st, SelectIdle, "", key); again.Policy.Index != home.Policy.Index {
			t.Errorf("after the spill the session went to %d; want its home %d", again.Policy.Index, home.Policy.Index)
		}
	})
	t.Run("no wait: spill at once", func(t *testing.T) {
		st, key, _, _, idle := busyHome(t)
		if sel := stickySelect(t, st, SelectIdle, "", key); sel.Policy.Index != idle {
			t.Fatalf("session got %d; want the idle policy %d", sel.Policy.Index, idle)
		}
		if s := st.Stats().Sticky; s.Spills != 1 {
			t.Errorf("sticky stats = %+v; want 1 spill", s)
		}
	})
	t.Run("round robin hands out a busy home", func(t *testing.T) {
		st, key, home, _, _ := busyHome(t)
		if sel := stickySelect(t, st, SelectRoundRobin, "", key); sel.Policy.Index != home.Policy.Index || sel.Lease != 0 {
			t.Errorf("round robin gave %d (lease %d); want the home %d without a lease", sel.Policy.Index, sel.Lease, home.Policy.Index)
		}
	})
	t.Run("gives up, consumes nothing", func(t *testing.T) {
		st, key, home, others, _ := busyHome(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := st.Select(ctx, SelectRequest{Wait: time.Hour, Session: key, StickyWait: time.Hour})
			done <- err
		}()
		waitForWaiters(t, st, 1)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Select = %v; want context.Canceled", err)
		}
		mustRelease(t, st, home.Lease)
		for _, l := range others {
			mustRelease(t, st, l)
		}
		if got := st.Stats(); got.Idle != 4 || got.Leases != 0 || got.Waiters != 0 {
			t.Errorf("after giving up: %d idle, %d leases, %d waiters; want 4, 0, 0", got.Idle, got.Leases, got.Waiters)
		}
	})
	t.Run("sticky waiter first", func(t *testing.T) {
		// A FIFO waiter queued first still loses the home's slot to the
		// session waiting for it.
		st := newState(t, Options{}, densePolicies(1), Topology{})
		home := stickySelect(t, st, SelectIdle, "", "k")
		fifo := make(chan Decision, 1)
		go func() {
			sel, _ := st.Select(context.Background(), SelectRequest{Wait: time.Hour})
			fifo <- sel
		}()
		waitForWaiters(t, st, 1)
		sticky := make(chan Decision, 1)
		go func() {
			sel, _ := st.Select(context.Background(), SelectRequest{Wait: time.Hour, Session: "k", StickyWait: time.Hour})
			sticky <- sel
		}()
		waitForWaiters(t, st, 2)
		mustRelease(t, st, home.Lease)
		s := <-sticky
		mustRelease(t, st, s.Lease)
		f := <-fifo
		mustRelease(t, st, f.Lease)
		if s.Lease >= f.Lease {
			t.Errorf("sticky waiter got lease %d after the FIFO waiter's %d", s.Lease, f.Lease)
		}
	})
}

func TestStickyNodeAffinity(t *testing.T) {
	ps, topo := benchCluster(16, 4) // policy i and env worker i on node-(i%4)
	st := newState(t, Options{}, ps, topo)
	for _, key := range sessions(100) {
		sel := stickySelect(t, st, SelectIdleAffinity, "env-2", key)
		if sel.Node != "node-2" {
			t.Fatalf("session %q from env-2 homed on %s; want node-2", key, sel.Node)
		}
		mustRelease(t, st, sel.Lease)
		a, err := st.Assign(AssignRequest{Kind: AssignNodeAffinity, NumTasks: 1, EnvIDs: []string{"env-3"}, Sessions: []string{key}, Loads: make([]int64, 16)})
		if err != nil {
			t.Fatal(err)
		}
		if a.Indices[0]%4 != 3 {
			t.Fatalf("assign of %q from env-3 went to policy %d, not on node-3", key, a.Indices[0])
		}
	}
	// Every policy of node-2 drained: the session falls back to all.
	for _, i := range []int{2, 6, 10, 14} {
		if err := st.SetDraining(ps[i].ID, true); err != nil {
			t.Fatal(err)
		}
	}
	if sel := stickySelect(t, st, SelectIdleAffinity, "env-2", "k"); sel.Node == "node-2" {
		t.Errorf("homed on drained node-2")
	}
}

func TestStickyInputChecks(t *testing.T) {
	wantInputError(t, CheckSession("session_id", string(make([]byte, MaxSessionBytes+1))), "session_id", "256 bytes")
	if err := CheckSession("session_id", string(make([]byte, MaxSessionBytes))); err != nil {
		t.Errorf("256 bytes refused: %v", err)
	}
	for _, c := range []float64{0.5, -1, 1e9} {
		wantInputError(t, CheckLoadFactor("load_factor", c), "load_factor", "between")
	}
	for _, c := range []float64{0, 1, 1.25, 1000} {
		if err := CheckLoadFactor("load_factor", c); err != nil {
			t.Errorf("CheckLoadFactor(%g) = %v", c, err)
		}
	}
}

// TestStickyRingLoadsKeptUpToDate checks the ledger's ring loads (the
// sessions waiting for their homes, and the available policies), kept up
// to date change by change, against a count from scratch after every step
// of a mixed sequence of hand-outs, releases, assignments, completions,
// drains, probes and registration changes.
func TestStickyRingLoadsKeptUpToDate(t *testing.T) {
	ps, topo := benchCluster(8, 2)
	st := newState(t, Options{Polled: true, FailThreshold: 1, PassThreshold: 1}, ps, topo)
	check := func(step string) {
		t.Helper()
		st.mu.Lock()
		defer st.mu.Unlock()
		// The first call starts the ledger's count (as the first session
		// does); later ones only read it.
		st.ringLoadLocked(st.ledger.snap.rings().all)
		var all ringLoad
		byNode := make(map[string]ringLoad)
		for _, rt := range st.ledger.snap.rts {
			if rt.available() {
				l := int64(rt.homeWaiters.len)
				all.total += l
				all.n++
				if rt.node == "" {
					continue
				}
				nl := byNode[rt.node]
				nl.total += l
				nl.n++
				byNode[rt.node] = nl
			}
		}
		if all != st.stickyAll {
			t.Fatalf("%s: ring load of all = %+v; want %+v", step, st.stickyAll, all)
		}
		for node, want := range byNode {
			if got := st.stickyNode[node]; got == nil || *got != want {
				t.Fatalf("%s: ring load of %s = %v; want %+v", step, node, got, want)
			}
		}
		if len(st.stickyNode) != len(byNode) {
			t.Fatalf("%s: %d node ring loads; want %d", step, len(st.stickyNode), len(byNode))
		}
	}
	check("registered, none heard")
	now := time.Now()
	for _, p := range ps {
		st.ObserveProbe(p.ID, Probe{SentAt: now, OK: true, Idle: true})
	}
	check("all heard")
	var leases []uint64
	for i, key := range sessions(5) {
		sel := stickySelect(t, st, SelectIdle, "env-"+strconv.Itoa(i), key)
		leases = append(leases, sel.Lease)
	}
	check("5 leases")
	if _, err := st.Assign(AssignRequest{NumTasks: 20, Sessions: sessions(20)}); err != nil {
		t.Fatal(err)
	}
	check("assigned")
	if _, err := st.Complete(3, 2); err != nil {
		t.Fatal(err)
	}
	check("completed")
	mustRelease(t, st, leases[0])
	check("released")
	if err := st.SetDraining(ps[1].ID, true); err != nil {
		t.Fatal(err)
	}
	check("drained")
	st.ObserveProbe(ps[2].ID, Probe{SentAt: now, OK: false, Err: "down"})
	check("unhealthy")
	st.ObserveProbe(ps[4].ID, Probe{SentAt: now, OK: true, Idle: false, Load: 9, HasLoad: true})
	check("load reported")
	if err := st.Update(ps[:6], Topology{}); err != nil {
		t.Fatal(err)
	}
	check("two removed, topology cleared")
	if err := st.Update(ps, topo); err != nil {
		t.Fatal(err)
	}
	check("re-registered")
}

func TestStickyAssignCountsLeases(t *testing.T) {
	// Two policies; the session's home holds 2 leases. Its load for the
	// bound, 2, is not below ⌈1.25 · (2 + 1) / 2⌉ = 2, so the tracked
	// /assign task goes to the other policy; the stateless one (loads
	// given, no leases) goes home.
	st := newState(t, Options{}, withCapacity(densePolicies(2), 3), Topology{})
	home, _ := st.Snapshot().Owner("s")
	for range 2 {
		if sel := stickySelect(t, st, SelectIdle, "", "s"); sel.Policy.ID != home {
			t.Fatalf("select went to %s; want the home %s", sel.Policy.ID, home)
		}
	}
	a, err := st.Assign(AssignRequest{NumTasks: 1, Sessions: []string{"s"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Snapshot().Policies()[a.Indices[0]].ID; got == home {
		t.Errorf("tracked task went to the home %s, whose leases put it at the bound", home)
	}
	a, err = st.Assign(AssignRequest{NumTasks: 1, Sessions: []string{"s"}, Loads: []int64{0, 0}})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Snapshot().Policies()[a.Indices[0]].ID; got != home {
		t.Errorf("stateless task went to %s; want the home %s", got, home)
	}
}

func TestStickyNodeRingIsItsOwnRing(t *testing.T) {
	// A node's ring, cut out of the ring of all policies, is the ring its
	// policies would have alone.
	ps, topo := benchCluster(12, 3)
	snap, err := newSnapshot(ps, topo)
	if err != nil {
		t.Fatal(err)
	}
	got := snap.rings().byNode["node-1"]
	var pos []int
	for p := range ps {
		if snap.nodes[p] == "node-1" {
			pos = append(pos, p)
		}
	}
	want := newRing(snap.policies, pos, "node-1")
	if !slices.Equal(got.points, want.points) || len(got.points) != 4*RingPoints {
		t.Fatalf("node ring of %d points differs from the ring of its %d policies (%d points)", len(got.points), len(pos), len(want.points))
	}
}

// A policy removed and registered again at the same URL, under a new id,
// keeps its sessions: the ring is keyed by the server that holds their
// caches. Every one of 300 sessions comes home again.
func TestStickyReRegisteredPolicyKeepsItsSessions(t *testing.T) {
	ps := densePolicies(8)
	st := newState(t, Options{}, ps, Topology{})
	keys := sessions(300)
	before := make([]string, len(keys))
	for i, key := range keys {
		sel := stickySelect(t, st, SelectIdle, "", key)
		mustRelease(t, st, sel.Lease)
		before[i] = sel.Policy.URL
	}
	if err := st.Update(slices.Delete(slices.Clone(ps), 3, 4), Topology{}); err != nil {
		t.Fatal(err)
	}
	again := slices.Clone(ps)
	again[3].ID = "p3-registered-again"
	if err := st.Update(again, Topology{}); err != nil {
		t.Fatal(err)
	}
	home := 0
	for i, key := range keys {
		sel := stickySelect(t, st, SelectIdle, "", key)
		mustRelease(t, st, sel.Lease)
		if sel.Policy.URL == before[i] {
			home++
		}
	}
	if home != len(keys) {
		t.Errorf("%d of %d sessions came home after the re-registration; want all", home, len(keys))
	}
}

// At low load a session waits sticky_wait for its busy home rather than
// spill: with capacity-1 policies, a home holding one lease is busy, not
// overloaded. Its outcome says where it landed.
func TestStickyWaitAppliesAtLowLoad(t *testing.T) {
	st := newState(t, Options{}, densePolicies(8), Topology{})
	const key = "episode-7"
	home := stickySelect(t, st, SelectIdle, "", key)
	if home.Sticky != StickyHome {
		t.Fatalf("first select: sticky %q; want home", home.Sticky)
	}
	got := make(chan Decision, 1)
	go func() {
		d, err := st.Select(context.Background(), SelectRequest{Session: key, StickyWait: time.Hour, Wait: time.Hour})
		if err != nil {
			t.Error(err)
		}
		got <- d
	}()
	waitForStickyWaiters(t, st, home.Policy.ID, 1)
	mustRelease(t, st, home.Lease)
	d := <-got
	if d.Policy.ID != home.Policy.ID || d.Sticky != StickyHome {
		t.Errorf("after waiting: %s (%q); want its home %s (home)", d.Policy.ID, d.Sticky, home.Policy.ID)
	}
}

// Without sticky_wait a busy home spills at once to the router's pick; a
// drained home moves the session to its next successor.
func TestStickyOutcomes(t *testing.T) {
	st := newState(t, Options{}, densePolicies(8), Topology{})
	const key = "episode-3"
	home := stickySelect(t, st, SelectIdle, "", key)
	spilled := stickySelect(t, st, SelectIdle, "", key)
	if spilled.Sticky != StickySpilled || spilled.Policy.ID == home.Policy.ID {
		t.Errorf("busy home, no wait: %s (%q); want another policy (spilled)", spilled.Policy.ID, spilled.Sticky)
	}
	mustRelease(t, st, home.Lease)
	mustRelease(t, st, spilled.Lease)
	if err := st.SetDraining(home.Policy.ID, true); err != nil {
		t.Fatal(err)
	}
	moved := stickySelect(t, st, SelectIdle, "", key)
	if moved.Sticky != StickyMoved || moved.Policy.ID == home.Policy.ID {
		t.Errorf("drained home: %s (%q); want the next successor (moved)", moved.Policy.ID, moved.Sticky)
	}
	if plain := mustSelect(t, st, SelectIdle, ""); plain.Sticky != NotSticky {
		t.Errorf("no session: sticky %q; want none", plain.Sticky)
	}
}

// A hot home's queue of waiting sessions is bounded: once it holds
// ⌈c·(waiting+1)/available⌉ sessions, the next one spills at once instead
// of queueing.
func TestStickyQueueBound(t *testing.T) {
	st := newState(t, Options{}, densePolicies(4), Topology{})
	const key = "hot"
	home := stickySelect(t, st, SelectIdle, "", key)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Bound with nobody waiting: ceil(1.25*1/4) = 1.
		_, _ = st.Select(ctx, SelectRequest{Session: key, StickyWait: time.Hour, Wait: time.Hour})
	}()
	waitForStickyWaiters(t, st, home.Policy.ID, 1)
	// One waits; the bound is now ceil(1.25*2/4) = 1: the next spills.
	d, err := st.Select(context.Background(), SelectRequest{Session: key, StickyWait: time.Hour, Wait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if d.Sticky != StickySpilled || d.Policy.ID == home.Policy.ID {
		t.Errorf("past the bound: %s (%q); want a spill", d.Policy.ID, d.Sticky)
	}
	cancel()
	<-done
}

func waitForStickyWaiters(tb testing.TB, st *State, id string, n int) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st.mu.Lock()
		got := st.runtimes[id].homeWaiters.len
		st.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d sessions waiting for %s; want %d", got, id, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// The tasks of one /assign that name one session (a GRPO group) land on
// one policy as a unit when it has the capacity, in tracked and stateless
// mode; a home whose capacity cannot take the group takes what it can and
// the next successor the rest.
func TestStickyAssignGroupLandsTogether(t *testing.T) {
	group := func(key string, n int) []string {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = key
		}
		return keys
	}
	for _, mode := range []string{"tracked", "stateless"} {
		t.Run(mode, func(t *testing.T) {
			st := newState(t, Options{}, withCapacity(densePolicies(8), 8), Topology{})
			req := AssignRequest{NumTasks: 24, Sessions: slices.Concat(group("g1", 8), group("g2", 8), group("g3", 8))}
			if mode == "stateless" {
				req.Loads = make([]int64, 8)
			}
			a, err := st.Assign(req)
			if err != nil {
				t.Fatal(err)
			}
			for g := range 3 {
				tasks := a.Indices[8*g : 8*g+8]
				if slices.ContainsFunc(tasks, func(i int) bool { return i != tasks[0] }) {
					t.Errorf("group %d split: %v", g+1, tasks)
				}
				// The first group finds its home under the bound; a later
				// one whose home took a group already may be moved on, as
				// a unit.
				owner, _ := st.Snapshot().Owner(req.Sessions[8*g])
				if g == 0 && st.Snapshot().Policies()[tasks[0]].ID != owner {
					t.Errorf("group 1 on %d; want its home %s", tasks[0], owner)
				}
				want := StickyMoved
				if st.Snapshot().Policies()[tasks[0]].ID == owner {
					want = StickyHome
				}
				for _, o := range a.Sticky[8*g : 8*g+8] {
					if o != want {
						t.Errorf("group %d outcome %q; want %q", g+1, o, want)
					}
				}
			}
		})
	}
	t.Run("capacity 4", func(t *testing.T) {
		st := newState(t, Options{}, withCapacity(densePolicies(8), 4), Topology{})
		a, err := st.Assign(AssignRequest{NumTasks: 8, Sessions: group("g1", 8)})
		if err != nil {
			t.Fatal(err)
		}
		first, second := a.Indices[:4], a.Indices[4:]
		if slices.ContainsFunc(first, func(i int) bool { return i != first[0] }) ||
			slices.ContainsFunc(second, func(i int) bool { return i != second[0] }) || first[0] == second[0] {
			t.Errorf("group of 8 on capacity-4 policies = %v; want 4 on its home, 4 on the next", a.Indices)
		}
		if a.Sticky[0] != StickyHome || a.Sticky[7] != StickyMoved {
			t.Errorf("outcomes %v; want home for the first 4, moved for the rest", a.Sticky)
		}
	})
}

// sessionHomedAt returns a session key whose home among n idle
// capacity-1 policies is the policy of the given index.
func sessionHomedAt(tb testing.TB, n, index int) string {
	tb.Helper()
	for i := range 1000 {
		key := "episode-" + strconv.Itoa(i)
		st := newState(tb, Options{}, densePolicies(n), Topology{})
		if stickySelect(tb, st, SelectIdle, "", key).Policy.Index == index {
			return key
		}
	}
	tb.Fatalf("no session key of 1000 is homed at policy %d of %d", index, n)
	return ""
}

// A sticky wait never outlasts its request: the wait for a busy home is
// at most half of what is left of the request's wait, then the request
// takes an idle policy. The case reported: four idle policies, a session's
// first select gets policy 1, its second, with a wait of 1 s under the
// default 2 s sticky wait, ran out ("no idle policy within 1s") while
// policies 0, 2 and 3 were idle.
func TestStickyWaitLeavesTimeToSpill(t *testing.T) {
	key := sessionHomedAt(t, 4, 1)
	for _, tt := range []struct {
		name         string
		wait, sticky time.Duration
	}{
		{"the reported case", time.Second, DefaultStickyWait},
		{"sticky wait as long as the wait", time.Second, time.Second},
		{"sticky wait far longer", 400 * time.Millisecond, time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := newState(t, Options{}, densePolicies(4), Topology{})
			home := stickySelect(t, st, SelectIdle, "", key)
			if home.Policy.Index != 1 || home.Sticky != StickyHome {
				t.Fatalf("first select: policy %d (%q); want 1 (home)", home.Policy.Index, home.Sticky)
			}
			d, err := st.Select(context.Background(), SelectRequest{Session: key, Wait: tt.wait, StickyWait: tt.sticky})
			if err != nil {
				t.Fatalf("second select, home busy, policies 0, 2 and 3 idle: %v; want one of them", err)
			}
			if d.Policy.Index == 1 || d.Sticky != StickySpilled {
				t.Errorf("second select: policy %d (%q); want an idle one (spilled)", d.Policy.Index, d.Sticky)
			}
			if s := st.Stats().Sticky; s.Hits != 1 || s.Spills != 1 {
				t.Errorf("sticky stats = %+v; want 1 hit, 1 spill", s)
			}
		})
	}
	// With nothing else idle the answer is still no, after the wait.
	t.Run("nothing else idle", func(t *testing.T) {
		st := newState(t, Options{}, densePolicies(4), Topology{})
		stickySelect(t, st, SelectIdle, "", key)
		for range 3 {
			mustSelect(t, st, SelectIdle, "")
		}
		_, err := st.Select(context.Background(), SelectRequest{Session: key, Wait: 100 * time.Millisecond, StickyWait: time.Hour})
		if !errors.Is(err, ErrNoIdlePolicy) {
			t.Errorf("every policy busy: %v; want ErrNoIdlePolicy", err)
		}
		if s := st.Stats().Sticky; s.Hits != 1 || s.Spills != 1 {
			t.Errorf("sticky stats = %+v; want 1 hit, 1 spill (the refused request)", s)
		}
	})
}

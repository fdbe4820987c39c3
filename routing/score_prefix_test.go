package routing

import (
	"context"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/prefix"
)

// k is the blocks of one step of the prefix index: the tests' prompts
// are whole steps, so that what the index keeps is all of them.
const k = prefix.DefaultStride

// chain returns n chained block hashes of a prompt whose token ids start
// at base: prompts with different bases share no block.
func chain(base, n int) []prefix.Hash {
	ids := make([]uint32, n*prefix.BlockTokens)
	for i := range ids {
		ids[i] = uint32(base + i)
	}
	return prefix.TokenHashes(ids, 0)
}

// selectHashes selects with hashes without waiting and fails the test when
// nothing is available.
func selectHashes(tb testing.TB, st *State, hashes []prefix.Hash, mut ...func(*SelectRequest)) Decision {
	tb.Helper()
	req := SelectRequest{Router: SelectIdle, PrefixHashes: hashes}
	for _, m := range mut {
		m(&req)
	}
	d, err := st.Select(context.Background(), req)
	if err != nil {
		tb.Fatalf("Select: %v", err)
	}
	return d
}

func TestPrefixScorePrefersHolder(t *testing.T) {
	for _, tc := range []struct {
		name        string
		held        map[string][]prefix.Hash // confirmed blocks per policy
		hashes      []prefix.Hash
		wantID      string
		wantOutcome string
		wantMatch   int
	}{
		{"holder", map[string][]prefix.Hash{"p2": chain(0, 4*k)}, chain(0, 4*k), "p2", PrefixHit, 4 * k},
		{"longest of two", map[string][]prefix.Hash{"p1": chain(0, 2*k), "p3": chain(0, 3*k)}, chain(0, 4*k), "p3", PrefixHit, 3 * k},
		{"nobody holds it: the router's pick", map[string][]prefix.Hash{"p2": chain(100, 4*k)}, chain(0, 4*k), "p0", PrefixMiss, 0},
		{"no hashes: the router's pick", map[string][]prefix.Hash{"p2": chain(0, 4*k)}, nil, "p0", PrefixNone, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newState(t, Options{}, withCapacity(densePolicies(4), 4), Topology{})
			for id, h := range tc.held {
				st.PrefixAdd(id, h)
			}
			d := selectHashes(t, st, tc.hashes)
			if d.Policy.ID != tc.wantID || d.PrefixOutcome != tc.wantOutcome || d.PrefixMatch != tc.wantMatch {
				t.Errorf("got %s %s match %d; want %s %s match %d", d.Policy.ID, d.PrefixOutcome, d.PrefixMatch,
					tc.wantID, tc.wantOutcome, tc.wantMatch)
			}
		})
	}
}

func TestPrefixScoreLoadBound(t *testing.T) {
	for _, tc := range []struct {
		name        string
		busy        int // leases out on p0, the holder, of capacity 4
		wantID      string
		wantOutcome string
	}{
		{"idle holder", 0, "p0", PrefixHit},
		{"holder at the bound", 2, "p0", PrefixHit},        // 2/4 - 0 = 0.5
		{"holder past the bound", 3, "p1", PrefixBalanced}, // 3/4 - 0 > 0.5: least loaded
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newState(t, Options{}, withCapacity(densePolicies(3), 4), Topology{})
			st.PrefixAdd("p0", chain(0, 8*k))
			for range tc.busy {
				selectHashes(t, st, nil, func(r *SelectRequest) { r.Exclude = []string{"p1", "p2"} })
			}
			d := selectHashes(t, st, chain(0, 8*k))
			if d.Policy.ID != tc.wantID || d.PrefixOutcome != tc.wantOutcome {
				t.Errorf("got %s %s; want %s %s", d.Policy.ID, d.PrefixOutcome, tc.wantID, tc.wantOutcome)
			}
		})
	}
}

// TestPrefixScoreGRPO sends a group of 8 samples of one prompt together
// (no lease released): pending blocks attract the group to the first
// sample's policy while it has room, and it spreads once that is full.
func TestPrefixScoreGRPO(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int
		others   int // leases out on each of p1..p3 before the group
		want     map[string]int
	}{
		{"room for the group", 16, 0, map[string]int{"p0": 8}},
		// The others half full: the bound holds, and p0 takes samples
		// until it is full; then p1 attracts the rest until it is full.
		{"full at 4", 4, 2, map[string]int{"p0": 4, "p1": 2, "p2": 2}},
		// The others idle: p0 takes samples while its load is within
		// half its capacity of theirs.
		{"past the bound", 4, 0, map[string]int{"p0": 3, "p1": 3, "p2": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newState(t, Options{}, withCapacity(densePolicies(4), tc.capacity), Topology{})
			for range 3 * tc.others {
				selectHashes(t, st, nil, func(r *SelectRequest) { r.Exclude = []string{"p0"} })
			}
			h := chain(7, 20*k)
			got := map[string]int{}
			for i := range 8 {
				d := selectHashes(t, st, h)
				got[d.Policy.ID]++
				if i == 0 && d.PrefixOutcome != PrefixMiss {
					t.Errorf("first sample: outcome %s; want miss", d.PrefixOutcome)
				}
				if d.PrefixMatch != 0 {
					t.Errorf("sample %d: match %d; want 0 (pending blocks are not claimed)", i, d.PrefixMatch)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("samples per policy %v; want %v", got, tc.want)
			}
			for id, n := range tc.want {
				if got[id] != n {
					t.Errorf("samples per policy %v; want %v", got, tc.want)
				}
			}
		})
	}
}

// TestPrefixScoreHotPrefixSpreads sends one prefix on every request, none
// released: the holder takes requests until its load is past the bound,
// then the load spreads them, and every policy ends up holding the prefix
// with the same load.
func TestPrefixScoreHotPrefixSpreads(t *testing.T) {
	st := newState(t, Options{}, withCapacity(densePolicies(4), 16), Topology{})
	h := chain(1, 4*k)
	got := map[string]int{}
	for range 36 {
		got[selectHashes(t, st, h).Policy.ID]++
	}
	for _, id := range []string{"p0", "p1", "p2", "p3"} {
		if got[id] != 9 {
			t.Errorf("requests per policy %v; want 9 each", got)
			break
		}
	}
}

func TestPrefixConfirmAndMatch(t *testing.T) {
	st := newState(t, Options{}, withCapacity(densePolicies(2), 4), Topology{})
	h := chain(3, 5*k)
	d := selectHashes(t, st, h)
	if d.PrefixMatch != 0 {
		t.Fatalf("first: match %d; want 0", d.PrefixMatch)
	}
	if _, err := st.Release(d.Lease); err != nil {
		t.Fatal(err)
	}
	st.PrefixRelease(d.Policy.ID, h, true, -1)
	d2 := selectHashes(t, st, h)
	if d2.Policy.ID != d.Policy.ID || d2.PrefixMatch != 5*k || d2.PrefixOutcome != PrefixHit {
		t.Errorf("second: %s match %d %s; want %s match %d hit", d2.Policy.ID, d2.PrefixMatch, d2.PrefixOutcome, d.Policy.ID, 5*k)
	}
	// A failed request drops what it had pending.
	other := chain(900, 3*k)
	d3 := selectHashes(t, st, other, func(r *SelectRequest) { r.Exclude = []string{d.Policy.ID} })
	st.PrefixRelease(d3.Policy.ID, other, false, -1)
	if d4 := selectHashes(t, st, other); d4.PrefixOutcome != PrefixMiss {
		t.Errorf("after a failure: outcome %s; want miss", d4.PrefixOutcome)
	}
}

func TestPrefixClearedBySubscriptions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		event func(*State)
	}{
		{"version reported", func(st *State) {
			st.ObserveProbe("p1", Probe{OK: true, Idle: true, HasVersion: true, Version: 2})
		}},
		{"version set", func(st *State) { _ = st.SetVersion("p1", 2) }},
		{"version registered", func(st *State) {
			ps := withCapacity(densePolicies(2), 4)
			ps[1].Version = 2
			_ = st.Update(ps, Topology{})
		}},
		{"asleep", func(st *State) {
			st.ObserveProbe("p1", Probe{OK: true, Idle: true, Asleep: true})
			st.ObserveProbe("p1", Probe{OK: true, Idle: true})
		}},
		{"restarted", func(st *State) {
			for range DefaultFailThreshold {
				st.ObserveProbe("p1", Probe{OK: false})
			}
			for range DefaultPassThreshold {
				st.ObserveProbe("p1", Probe{OK: true, Idle: true})
			}
		}},
		{"removed and back", func(st *State) {
			_ = st.Update(withCapacity(densePolicies(1), 4), Topology{})
			_ = st.Update(withCapacity(densePolicies(2), 4), Topology{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newState(t, Options{}, withCapacity(densePolicies(2), 4), Topology{})
			h := chain(5, 3*k)
			st.PrefixAdd("p1", h)
			if d := selectHashes(t, st, h); d.Policy.ID != "p1" {
				t.Fatalf("before: %s; want p1", d.Policy.ID)
			} else if _, err := st.Release(d.Lease); err != nil {
				t.Fatal(err)
			}
			tc.event(st)
			for _, ps := range st.PrefixStats().Index.Policies {
				if ps.ID == "p1" && ps.IndexedTokens != 0 {
					t.Errorf("p1 indexes %d tokens after the event; want 0", ps.IndexedTokens)
				}
			}
			if d := selectHashes(t, st, h); d.PrefixOutcome != PrefixMiss {
				t.Errorf("after: outcome %s on %s; want miss", d.PrefixOutcome, d.Policy.ID)
			}
		})
	}
}

func TestPrefixSessionHomeFirst(t *testing.T) {
	st := newState(t, Options{}, withCapacity(densePolicies(4), 4), Topology{})
	home := selectHashes(t, st, nil, func(r *SelectRequest) { r.Session = "s1" })
	if _, err := st.Release(home.Lease); err != nil {
		t.Fatal(err)
	}
	other := "p0"
	if home.Policy.ID == other {
		other = "p1"
	}
	h := chain(11, 4*k)
	st.PrefixAdd(other, h)
	d := selectHashes(t, st, h, func(r *SelectRequest) { r.Session = "s1" })
	if d.Policy.ID != home.Policy.ID || d.Sticky != StickyHome || d.PrefixOutcome != PrefixBalanced {
		t.Errorf("got %s %s %s; want the home %s, home, balanced", d.Policy.ID, d.Sticky, d.PrefixOutcome, home.Policy.ID)
	}
}

// TestPrefixWaiterHandOff: a waiter with hashes is served in arrival order,
// and its hand-off records its hashes pending and reports its match.
func TestPrefixWaiterHandOff(t *testing.T) {
	st := newState(t, Options{}, withCapacity(densePolicies(1), 1), Topology{})
	h := chain(21, 6*k)
	st.PrefixAdd("p0", h[:2*k])
	busy := mustSelect(t, st, SelectIdle, "")
	got := make(chan Decision, 1)
	go func() {
		d, err := st.Select(context.Background(), SelectRequest{Router: SelectIdle, Wait: time.Hour, PrefixHashes: h})
		if err != nil {
			t.Error(err)
		}
		got <- d
	}()
	waitForWaiters(t, st, 1)
	mustRelease(t, st, busy.Lease)
	d := <-got
	if d.PrefixMatch != 2*k || d.PrefixOutcome != PrefixHit {
		t.Errorf("hand-off: match %d %s; want %d, a hit", d.PrefixMatch, d.PrefixOutcome, 2*k)
	}
	ps := st.PrefixStats()
	if len(ps.Index.Policies) != 1 || ps.Index.Policies[0].PendingTokens != 4*k*prefix.BlockTokens {
		t.Errorf("index after the hand-off %+v; want p0 with 4 blocks pending", ps.Index.Policies)
	}
	if ps.Decisions[PrefixHit] != 1 || ps.MatchedTokens != 2*k*prefix.BlockTokens || ps.PromptTokens != 6*k*prefix.BlockTokens {
		t.Errorf("counts %+v; want 1 hit, 32 matched and 96 prompt tokens", ps)
	}
}

func TestPrefixLongListCapped(t *testing.T) {
	st := newState(t, Options{}, withCapacity(densePolicies(2), 4), Topology{})
	h := make([]prefix.Hash, prefix.MaxBlocks+500)
	copy(h, chain(0, len(h)))
	d := selectHashes(t, st, h)
	if d.PrefixOutcome != PrefixMiss {
		t.Errorf("outcome %s; want miss", d.PrefixOutcome)
	}
	if got := st.PrefixStats().PromptTokens; got != prefix.MaxBlocks*prefix.BlockTokens {
		t.Errorf("prompt tokens %d; want %d (capped)", got, prefix.MaxBlocks*prefix.BlockTokens)
	}
}

// A probe that carries the engine's KV size makes it the policy's budget
// in the index; one without keeps the budget it had.
func TestPrefixCapacityFromProbe(t *testing.T) {
	st := newState(t, Options{PrefixIndexTokens: 1 << 12}, withCapacity(densePolicies(2), 4), Topology{})
	capacity := func(id string) int64 {
		for _, ps := range st.PrefixStats().Index.Policies {
			if ps.ID == id {
				return ps.CapacityTokens
			}
		}
		return -1
	}
	st.ObserveProbe("p1", Probe{OK: true, Idle: true, KVTokens: 160})
	st.PrefixAdd("p1", chain(1, 20*k)) // 320 tokens, over the budget
	if got := capacity("p1"); got != 160 {
		t.Errorf("p1's budget %d after a probe with a KV size of 160; want 160", got)
	}
	for _, ps := range st.PrefixStats().Index.Policies {
		if ps.ID == "p1" && ps.IndexedTokens > 160 {
			t.Errorf("p1 indexes %d tokens over its budget of 160", ps.IndexedTokens)
		}
	}
	st.ObserveProbe("p1", Probe{OK: true, Idle: true})
	if got := capacity("p1"); got != 160 {
		t.Errorf("p1's budget %d after a probe without a KV size; want 160 kept", got)
	}
}

// A freed slot goes to the longest waiter, but a younger one whose prompt
// the slot's policy has cached (the rest of a GRPO group) may go ahead of
// it, at most maxPrefixBypass times: no waiter starves for want of a
// cached prefix.
func TestPrefixWaiterBypassIsBounded(t *testing.T) {
	st := newState(t, Options{}, withCapacity(densePolicies(2), 1), Topology{})
	cold, held := chain(1000, 2*k), chain(2000, 2*k)
	st.PrefixAdd("p1", held)
	busy0, busy1 := leaseBoth(t, st)
	type result struct {
		i int
		d Decision
	}
	got := make(chan result, maxPrefixBypass+2)
	wait := func(i int, hashes []prefix.Hash) {
		go func() {
			d, err := st.Select(context.Background(), SelectRequest{Router: SelectIdle, Wait: time.Hour, PrefixHashes: hashes})
			if err != nil {
				t.Error(err)
			}
			got <- result{i, d}
		}()
		waitForWaiters(t, st, i+1)
	}
	wait(0, cold) // the longest waiter, whose prompt no policy holds
	for i := 1; i <= maxPrefixBypass+1; i++ {
		wait(i, held)
	}
	// p1's slot, freed again and again: the waiters holding its prefix go
	// first, maxPrefixBypass of them, then the longest waiter.
	lease := busy1.Lease
	for n := 1; n <= maxPrefixBypass+1; n++ {
		mustRelease(t, st, lease)
		r := <-got
		want := n
		if n == maxPrefixBypass+1 {
			want = 0
		}
		if r.i != want || r.d.Policy.ID != "p1" {
			t.Fatalf("release %d of p1's slot went to waiter %d on %s; want waiter %d", n, r.i, r.d.Policy.ID, want)
		}
		lease = r.d.Lease
	}
	mustRelease(t, st, busy0.Lease)
	if r := <-got; r.i != maxPrefixBypass+1 {
		t.Errorf("p0's slot went to waiter %d; want the last, %d", r.i, maxPrefixBypass+1)
	}
	mustRelease(t, st, lease)
}

// A prompt no policy holds goes to a least loaded policy, whatever the
// router's oldest idle slot: the start of a group lands where its
// samples find room.
func TestPrefixMissGoesToLeastLoaded(t *testing.T) {
	st := newState(t, Options{}, withCapacity(densePolicies(2), 4), Topology{})
	var byPolicy = map[string][]uint64{}
	for range 8 {
		d := mustSelect(t, st, SelectIdle, "")
		byPolicy[d.Policy.ID] = append(byPolicy[d.Policy.ID], d.Lease)
	}
	// p0's freed slot is the oldest idle one, on the busier policy: p0
	// runs 3, p1 nothing.
	mustRelease(t, st, byPolicy["p0"][0])
	for _, l := range byPolicy["p1"] {
		mustRelease(t, st, l)
	}
	if d := selectHashes(t, st, chain(7, 2*k)); d.Policy.ID != "p1" || d.PrefixOutcome != PrefixMiss {
		t.Errorf("a prompt nobody holds: %s (%s); want p1, the least loaded", d.Policy.ID, d.PrefixOutcome)
	}
}

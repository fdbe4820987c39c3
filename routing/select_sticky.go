package routing

import (
	"context"
	"time"
)

// selectSticky is the sticky stage of Select, for a request that names a
// session. It finds the session's home (sticky.go) among the candidates
// of router r and:
//   - for a router that hands policies out blind, without a lease (round
//     robin), hands out the home, busy or not, as that router would;
//   - for a leasing router, leases an idle slot of the home; when the home
//     is busy, waits for it up to req.StickyWait (and ctx), in FIFO order
//     with other waiters for that policy, which a freed slot of the policy
//     serves before any other waiter.
//
// done is false when the router is to decide instead: no policy can be the
// home (a miss), or the home stayed busy (a spill; the session's home does
// not move, its next request tries it again). A waiter that gives up
// consumes nothing. With done true it returns the selection, or ctx.Err()
// when ctx ended the wait.
func (st *State) selectSticky(ctx context.Context, req SelectRequest, r Selector, envNode string, ttl time.Duration) (sel Selection, done bool, err error) {
	c := st.loadFactor(req.LoadFactor)
	h := sessionHash(req.Session)
	floor := st.minVersionOf(req.MinVersion)
	affine := envAffine(r, nil)
	// The rings are built on first use; build them outside the lock (an
	// Update in between only means building the next snapshot's under it).
	st.snap.Load().rings()

	st.mu.Lock()
	snap := st.ledger.snap
	pos, natural := st.homeLocked(snap, h, envNode, affine, c, floor)
	if pos < 0 {
		st.mu.Unlock()
		st.sticky.misses.Add(1)
		return Selection{}, false, nil
	}
	rt := snap.rts[pos]
	if !r.leases() {
		rt.selected.Add(1)
		st.mu.Unlock()
		st.sticky.count(natural)
		return Selection{Policy: rt.policy, Node: rt.node}, true, nil
	}
	if s := idleSlotLocked(rt); s != nil {
		st.unlistLocked(s)
		sel = st.leaseLocked(s, ttl)
		st.mu.Unlock()
		st.sticky.count(natural)
		return sel, true, nil
	}
	if req.StickyWait <= 0 || ctx.Err() != nil {
		st.mu.Unlock()
		st.sticky.spills.Add(1)
		return Selection{}, false, nil
	}
	w := &waiter{ch: make(chan struct{}), ttl: ttl, minVersion: floor}
	rt.stickyWaiters.pushBack(w)
	st.mu.Unlock()

	timer := time.NewTimer(req.StickyWait)
	defer timer.Stop()
	select {
	case <-w.ch:
		if w.err != nil {
			return Selection{}, true, w.err
		}
		st.sticky.count(natural)
		return w.sel, true, nil
	case <-timer.C:
	case <-ctx.Done():
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case w.err != nil:
		return Selection{}, true, w.err // ended, and removed, by Reset
	case w.granted == nil:
		rt.stickyWaiters.remove(w)
		if err := ctx.Err(); err != nil {
			return Selection{}, true, err
		}
		st.sticky.spills.Add(1)
		return Selection{}, false, nil
	case ctx.Err() == nil:
		// The home freed up as the wait ran out: take it.
		st.sticky.count(natural)
		return w.sel, true, nil
	default:
		st.giveBackLocked(w)
		return Selection{}, true, ctx.Err()
	}
}

// homeLocked returns the position of the home of the session hashed to h
// in snap, for /select: the env worker's node's ring first for an
// env-affine router, then the ring of all policies. A home is available
// and meets the weight-version floor. Load is leases out plus tracked
// load. pos is -1 when no policy can be the home. Caller must hold mu.
func (st *State) homeLocked(snap *Snapshot, h uint64, envNode string, affine bool, c float64, floor int64) (pos int, natural bool) {
	avail := func(p int) bool { rt := snap.rts[p]; return rt.available() && rt.version.Load() >= floor }
	load := func(p int) int64 {
		rt := snap.rts[p]
		return int64(rt.inflight) + rt.load
	}
	home := func(r *hashRing) (int, bool) {
		rl := st.ringLoadLocked(r)
		if rl.n == 0 {
			return -1, false
		}
		return r.homeUnder(h, loadBound(c, rl.total, rl.n), avail, load)
	}
	first, fallback := snap.ringsFor(envNode, affine)
	pos, natural = home(first)
	if pos < 0 && fallback != nil {
		// The node's ring has no home: the session's natural home is lost.
		pos, _ = home(fallback)
		natural = false
	}
	return pos, natural
}

// idleSlotLocked returns an idle (listed) slot of rt, or nil when it has
// none. Caller must hold State.mu.
func idleSlotLocked(rt *policyRuntime) *slot {
	for _, s := range rt.slots {
		if s.listed {
			return s
		}
	}
	return nil
}

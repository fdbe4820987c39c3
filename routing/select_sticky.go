package routing

import (
	"context"
	"time"
)

// selectSticky is the sticky stage of Select, for a request that names a
// session. It finds the session's home: the first policy after the
// session key on the ring of the router's candidates (the env worker's
// node's ring first for an env-affine router) that is available and meets
// the weight-version floor. Then:
//   - a router that hands policies out blind, without a lease (round
//     robin), hands out the home, busy or not, as that router would;
//   - a leasing router leases an idle slot of the home; when the home is
//     busy it waits for it up to req.StickyWait (within req.Wait), in FIFO
//     order with the other sessions waiting for that policy, which a freed
//     slot of the policy serves before any other waiter. The wait is
//     refused, and the request spills at once, only when the home's queue
//     of waiting sessions is already at the bound ⌈c · (waiting + 1) /
//     available⌉ of its ring: that keeps a hot home from collecting the
//     waits of many sessions, while a busy home at low load is waited for.
//
// done is false when the router is to decide instead; d.Sticky then says
// why: StickyMoved (no policy can be the home) or StickySpilled (the home
// stayed busy, or its queue was full; the session's home does not move,
// its next request tries it again). A waiter that gives up consumes
// nothing.
func (st *State) selectSticky(ctx context.Context, req SelectRequest, r Selector, ttl time.Duration, floor int64) (d Decision, done bool, err error) {
	c := st.loadFactor(req.LoadFactor)
	h := sessionHash(req.Session)
	affine := envAffine(r, nil)
	// The rings are built on first use; build them outside the lock (an
	// Update in between only means building the next snapshot's under it).
	st.snap.Load().rings()

	st.mu.Lock()
	snap := st.ledger.snap
	envNode := snap.EnvNode(req.EnvID)
	filter := candidateFilter{floor: floor, exclude: req.Exclude}
	pos, natural, ring := snap.home(h, envNode, affine, func(_ *hashRing, p int) bool {
		rt := snap.rts[p]
		return rt.available() && filter.ok(rt)
	})
	if pos < 0 {
		st.mu.Unlock()
		st.sticky.misses.Add(1)
		return Decision{Sticky: StickyMoved}, false, nil
	}
	outcome := StickyMoved
	if natural {
		outcome = StickyHome
	}
	served := func(d Decision) (Decision, bool, error) {
		st.sticky.count(natural)
		d.EnvNode, d.Sticky = envNode, outcome
		return d, true, nil
	}
	rt := snap.rts[pos]
	if !r.leases() {
		d = st.handOutLocked(rt)
		st.mu.Unlock()
		return served(d)
	}
	if s := idleSlotLocked(rt); s != nil {
		st.unlistLocked(s)
		d = st.leaseLocked(s, ttl)
		st.mu.Unlock()
		return served(d)
	}
	wait := min(req.StickyWait, req.Wait)
	if wait <= 0 || int64(rt.stickyWaiters.len) >= st.queueBoundLocked(ring, c) {
		st.mu.Unlock()
		st.sticky.spills.Add(1)
		return Decision{Sticky: StickySpilled}, false, nil
	}
	w := &waiter{ch: make(chan struct{}), ttl: ttl, filter: filter}
	rt.stickyWaiters.pushBack(w)
	st.stickyLoadLocked(rt)
	st.mu.Unlock()

	err = st.await(ctx, w, wait, req.Stop)
	if err == nil {
		if w.err != nil {
			return Decision{}, true, w.err
		}
		return served(w.sel)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case w.err != nil:
		return Decision{}, true, w.err // ended, and removed, by Reset
	case w.granted == nil:
		rt.stickyWaiters.remove(w)
		st.stickyLoadLocked(rt)
		if err != errWaitTimeout {
			return Decision{}, true, err
		}
		st.sticky.spills.Add(1)
		return Decision{Sticky: StickySpilled}, false, nil
	case err == errWaitTimeout:
		// The home freed up as the wait ran out: take it.
		return served(w.sel)
	default:
		st.giveBackLocked(w)
		return Decision{}, true, err
	}
}

// queueBoundLocked is the most sessions that may wait for one home of
// ring: ⌈c · (waiting + 1) / available⌉ over the ring's available
// policies. Caller must hold mu.
func (st *State) queueBoundLocked(r *hashRing, c float64) int64 {
	rl := st.ringLoadLocked(r)
	return loadBound(c, rl.total, max(rl.n, 1))
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

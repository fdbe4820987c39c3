package routing

import "time"

// The prefer stage of a decision (after the filters, before the router's
// pick): a request that names a session is offered to its home first.

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

// preference is the outcome of the prefer stage for a request that names
// a session: its home (nil when no policy can be one), whether that is
// its natural home, and whether the request waits for it alone.
type preference struct {
	session  bool
	home     *policyRuntime
	natural  bool
	homeOnly bool
	// stickyWait is how long it waits for its home alone.
	stickyWait time.Duration
}

// preferLocked is the prefer stage: it finds the session's home, the first
// policy after the session key on the ring of the router's candidates (the
// env worker's node's ring first for an env-affine router) that is
// available and passes the filters, and hands it out when it can. A
// router that hands policies out blind (round robin) hands out the home,
// busy or not, as that router would; a leasing router leases an idle slot
// of the home, or, when the home is busy, has the request wait for it
// alone up to req.StickyWait, unless the home's queue of waiting sessions
// is already at the bound ⌈c · (waiting + 1) / available⌉ of its ring:
// that keeps a hot home from collecting the waits of many sessions, while
// a busy home at low load is waited for. The wait for the home is at most
// half of left, what is left of the request's wait, so that a request
// whose sticky wait is as long as its wait (or longer) still has time to
// spill to another policy: a session's request never runs out waiting for
// its home while others are idle. done is true when it decided. Caller
// must hold mu.
func (st *State) preferLocked(req *SelectRequest, r Selector, q *Query, ttl time.Duration, envNode string, left time.Duration) (pref preference, d Decision, done bool) {
	pref.session = true
	snap := st.ledger.snap
	pos, natural, ring := snap.home(sessionHash(req.Session), envNode, envAffine(r, nil), func(_ *hashRing, p int) bool {
		rt := snap.rts[p]
		return rt.available() && q.ok(rt)
	})
	if pos < 0 {
		return pref, Decision{}, false
	}
	rt := snap.rts[pos]
	pref.home, pref.natural = rt, natural
	if !r.leases() {
		d = st.handOutLocked(rt)
		d.EnvNode = envNode
		return pref, pref.served(st, d), true
	}
	if s := idleSlotLocked(rt); s != nil {
		st.unlistLocked(s)
		d = st.leaseLocked(s, ttl, req.Release)
		d.EnvNode = envNode
		return pref, pref.served(st, d), true
	}
	pref.stickyWait = min(req.StickyWait, left/2)
	pref.homeOnly = pref.stickyWait > 0 && int64(rt.homeWaiters.len) < st.queueBoundLocked(ring, st.loadFactor(req.LoadFactor))
	return pref, Decision{}, false
}

// served labels a decision with the prefer stage's outcome, and counts it.
func (pref preference) served(st *State, d Decision) Decision {
	d.Sticky = pref.count(st, &d)
	return d
}

// count counts a session's request once, by where it landed (d nil: it
// got nothing), and returns the outcome: StickyHome or StickyMoved at its
// home (natural or not), StickySpilled elsewhere, StickyMoved when there
// was no home. NotSticky without a session.
func (pref preference) count(st *State, d *Decision) Sticky {
	switch {
	case !pref.session:
		return NotSticky
	case pref.home == nil:
		st.sticky.misses.Add(1)
		return StickyMoved
	case d != nil && d.Policy.ID == pref.home.policy.ID:
		st.sticky.count(pref.natural)
		if pref.natural {
			return StickyHome
		}
		return StickyMoved
	default:
		st.sticky.spills.Add(1)
		return StickySpilled
	}
}

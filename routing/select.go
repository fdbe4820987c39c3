package routing

import (
	"context"
	"time"
)

// SelectRequest is one /select call.
type SelectRequest struct {
	// Router picks the policy; SelectIdle when nil.
	Router Selector
	// EnvID names the env worker, for routers that prefer its node.
	EnvID string
	// LeaseTTL ends the lease this long after the hand-out unless it was
	// released before; 0 means the State's default (Options.LeaseTTL).
	LeaseTTL time.Duration
	// MinVersion, when set, is the weight-version floor of this request
	// instead of the State's (SetMinVersion).
	MinVersion *int64
	// Session, when not empty, is the request's session key: the sticky
	// stage offers it to its home first (see selectSticky).
	Session string
	// StickyWait is how long a session waits for its busy home before it
	// spills to the router's pick; 0 spills at once.
	StickyWait time.Duration
	// LoadFactor is c of the home's load bound; 0 means Options.LoadFactor.
	LoadFactor float64
}

// Selection is the answer of Select.
type Selection struct {
	Policy Policy
	// Node is the policy's effective node.
	Node string
	// Lease identifies the hand-out for Release; 0 for routers that issue
	// none (round robin).
	Lease uint64
}

// Select picks a policy for one sync request. Leasing routers (SelectIdle,
// SelectIdleAffinity) take an idle slot; when there is none they wait, in
// FIFO order with other waiters, until one is released, seen idle,
// expired or registered, or until ctx is done (returning ctx.Err(); a
// waiter that gives up consumes nothing). A waiter takes the first slot to
// become idle, whatever its node. A ctx that is already done makes Select a
// non-blocking try: it returns ctx.Err() at once when nothing is idle.
// Routers that do not lease never wait. ErrNoPolicies means no policy is
// registered, ErrAllUnavailable that none passes the availability filter
// (unhealthy, draining, not heard from) or is awaiting its first probe:
// Select answers those at once instead of waiting, and ErrOverloaded when
// it would wait but Options.MaxWaiters calls are waiting already.
func (st *State) Select(ctx context.Context, req SelectRequest) (Selection, error) {
	r := req.Router
	if r == nil {
		r = SelectIdle
	}
	ttl := req.LeaseTTL
	if ttl <= 0 {
		ttl = st.opts.LeaseTTL
	}
	// Outside the lock: the env worker's node is a preference, and a
	// registration change in between only makes it one snapshot old.
	envNode := st.snap.Load().EnvNode(req.EnvID)
	if req.Session != "" {
		if sel, done, err := st.selectSticky(ctx, req, r, envNode, ttl); done {
			return sel, err
		}
	}

	floor := st.minVersionOf(req.MinVersion)

	st.mu.Lock()
	st.ledger.minVersion = floor
	if p, ok := r.pick(&st.ledger, envNode); ok {
		var sel Selection
		if p.slot != nil {
			st.unlistLocked(p.slot)
			sel = st.leaseLocked(p.slot, ttl)
		} else {
			rt := st.ledger.snap.rts[p.pos]
			rt.selected.Add(1)
			sel = Selection{Policy: rt.policy, Node: rt.node}
		}
		st.mu.Unlock()
		return sel, nil
	}
	if len(st.runtimes) == 0 {
		st.mu.Unlock()
		return Selection{}, ErrNoPolicies
	}
	if !r.leases() || !st.anyAvailableLocked() {
		st.mu.Unlock()
		return Selection{}, ErrAllUnavailable
	}
	if err := ctx.Err(); err != nil {
		st.mu.Unlock()
		return Selection{}, err
	}
	if st.waiters.len >= st.opts.MaxWaiters {
		st.mu.Unlock()
		return Selection{}, ErrOverloaded
	}
	w := &waiter{ch: make(chan struct{}), ttl: ttl, minVersion: floor}
	st.waiters.pushBack(w)
	st.mu.Unlock()

	select {
	case <-w.ch:
		if w.err != nil {
			return Selection{}, w.err
		}
		return w.sel, nil
	case <-ctx.Done():
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if w.err != nil {
		return Selection{}, w.err // ended, and removed, by Reset
	}
	if w.granted == nil {
		st.waiters.remove(w)
		return Selection{}, ctx.Err()
	}
	st.giveBackLocked(w)
	return Selection{}, ctx.Err()
}

// giveBackLocked undoes the hand-out to a waiter that was granted a slot
// while giving up, and puts the slot back where it was, at the head.
// Caller must hold mu.
func (st *State) giveBackLocked(w *waiter) {
	if s := w.granted; s.lease == w.sel.Lease {
		freedAt := s.freedAt
		s.rt.selected.Add(^uint64(0))
		st.endLeaseLocked(s)
		s.freedAt = freedAt
		st.offerLocked(s, true)
	}
}

// anyAvailableLocked reports whether a registered policy passes the
// availability filter, or may pass it soon: it was just registered (or the
// router just started) and its first probe has not been answered yet.
// Caller must hold mu.
func (st *State) anyAvailableLocked() bool {
	for _, rt := range st.ledger.snap.rts {
		if rt.available() || (!rt.heard.Load() && rt.probes.Load() == 0 && rt.healthy.Load() && !rt.draining.Load()) {
			return true
		}
	}
	return false
}

// Release returns a leased slot to idle at once. It returns ErrLeaseEnded
// for a lease that was issued but is no longer out, so that releasing is
// idempotent, and ErrUnknownLease for one never issued.
func (st *State) Release(lease uint64) (Selection, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.leases[lease]
	if s == nil {
		if lease != 0 && lease <= st.nextLease {
			return Selection{}, ErrLeaseEnded
		}
		return Selection{}, ErrUnknownLease
	}
	sel := Selection{Policy: s.rt.policy, Node: s.rt.node, Lease: lease}
	st.releaseLocked(s, false)
	return sel, nil
}

// ReleaseIndex releases the oldest lease of the policy with the given index.
// It returns ErrUnknownPolicy for an unknown index and ErrUnknownLease when
// the policy has no lease out.
func (st *State) ReleaseIndex(index int) (Selection, error) {
	snap := st.snap.Load()
	pos, ok := snap.ByIndex(index)
	if !ok {
		return Selection{}, ErrUnknownPolicy
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var oldest *slot
	for _, s := range snap.rts[pos].slots {
		if s.lease != 0 && (oldest == nil || s.lease < oldest.lease) {
			oldest = s
		}
	}
	if oldest == nil {
		return Selection{}, ErrUnknownLease
	}
	sel := Selection{Policy: oldest.rt.policy, Node: oldest.rt.node, Lease: oldest.lease}
	st.releaseLocked(oldest, false)
	return sel, nil
}

// LeaseValid reports whether lease is out.
func (st *State) LeaseValid(lease uint64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.leases[lease] != nil
}

package routing

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// SelectRequest is one /select call.
type SelectRequest struct {
	// Router picks the policy; SelectIdle when nil.
	Router Selector
	// EnvID names the env worker, for routers that prefer its node.
	EnvID string
	// Wait is how long the call may wait for an idle policy when none is
	// idle now; 0 only tries. Waiting also ends when the caller's ctx is
	// done (it left) or Stop is closed (the server is shutting down).
	Wait time.Duration
	// Stop, when closed, ends a wait with ErrShuttingDown.
	Stop <-chan struct{}
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
	// spills to the router's pick; 0 spills at once. It is part of Wait,
	// not added to it.
	StickyWait time.Duration
	// LoadFactor is c of the bound on the home's queue of waiting
	// sessions; 0 means Options.LoadFactor.
	LoadFactor float64
	// Exclude names policies (by id) this request must not get: those a
	// proxied request already failed on.
	Exclude []string
}

// Sticky is where the sticky stage sent a request that named a session.
type Sticky string

// Sticky outcomes; NotSticky for a request without a session.
const (
	NotSticky Sticky = ""
	// StickyHome: the session's natural home, its first ring successor.
	StickyHome Sticky = "home"
	// StickyMoved: the natural home could not serve (unavailable, below
	// the weight-version floor) and the next successor on the ring did;
	// or no policy could be a home and the router chose.
	StickyMoved Sticky = "moved"
	// StickySpilled: the home was busy past sticky_wait_ms, or its queue
	// of waiting sessions was past the bound, and the router chose.
	StickySpilled Sticky = "spilled"
)

// Decision is the one answer of a routing decision: everything a handler
// or the proxy needs to answer, computed on one snapshot under one lock.
type Decision struct {
	Policy Policy
	// Node is the policy's effective node.
	Node string
	// EnvNode is the env worker's node, "" when the env id maps to none.
	EnvNode string
	// Lease identifies the hand-out for Release, LeaseID renders it; 0
	// and "" for routers that issue none (round robin).
	Lease   uint64
	LeaseID string
	// Version is the policy's weight version at dispatch.
	Version int64
	// Sticky is the sticky stage's outcome, NotSticky without a session.
	Sticky Sticky
}

// AffinityHeld reports whether the policy is on the env worker's node;
// false when the env worker has no node.
func (d Decision) AffinityHeld() bool { return d.EnvNode != "" && d.EnvNode == d.Node }

// A WaitError is a Select that waited req.Wait in vain: its Err is
// ErrNoIdlePolicy, or ErrNoFreshPolicy when no available policy met the
// floor.
type WaitError struct {
	Err    error
	Waited time.Duration
	Floor  int64
}

func (e *WaitError) Error() string {
	if e.Err == ErrNoFreshPolicy {
		return fmt.Sprintf("no policy with a fresh enough weight version (at least %d) became idle within %v", e.Floor, e.Waited)
	}
	return fmt.Sprintf("no idle policy within %v", e.Waited)
}

func (e *WaitError) Unwrap() error { return e.Err }

// Select decides one sync request. Leasing routers (SelectIdle,
// SelectIdleAffinity) take an idle slot; when there is none they wait up
// to req.Wait, in FIFO order with other waiters, until one is released,
// seen idle, expired or registered. A waiter takes the first slot to
// become idle, whatever its node; one that gives up consumes nothing.
// Routers that do not lease never wait. The errors are the decision's
// coded reasons: ErrNoPolicies (none registered), ErrAllUnavailable (none
// passes the availability filter or is awaiting its first probe; answered
// at once), ErrOverloaded (it would wait, and Options.MaxWaiters calls
// wait already), a *WaitError (nothing became idle within req.Wait),
// ErrShuttingDown (req.Stop closed), ErrReset (Reset ended the wait), or
// ctx.Err() when the caller left.
func (st *State) Select(ctx context.Context, req SelectRequest) (Decision, error) {
	r := req.Router
	if r == nil {
		r = SelectIdle
	}
	ttl := req.LeaseTTL
	if ttl <= 0 {
		ttl = st.opts.LeaseTTL
	}
	floor := st.minVersionOf(req.MinVersion)
	deadline := time.Now().Add(req.Wait)
	sticky := NotSticky
	if req.Session != "" {
		d, done, err := st.selectSticky(ctx, req, r, ttl, floor)
		if done {
			return d, err
		}
		sticky = d.Sticky
	}

	st.mu.Lock()
	envNode := st.ledger.snap.EnvNode(req.EnvID)
	filter := candidateFilter{floor: floor, exclude: req.Exclude}
	if p, ok := r.pick(st.candidatesLocked(r, filter), envNode); ok {
		var d Decision
		if p.slot != nil {
			st.unlistLocked(p.slot)
			d = st.leaseLocked(p.slot, ttl)
		} else {
			d = st.handOutLocked(st.ledger.snap.rts[p.pos])
		}
		st.mu.Unlock()
		d.EnvNode, d.Sticky = envNode, sticky
		return d, nil
	}
	if len(st.runtimes) == 0 {
		st.mu.Unlock()
		return Decision{}, ErrNoPolicies
	}
	if !r.leases() || !st.anyAvailableLocked() {
		st.mu.Unlock()
		return Decision{}, ErrAllUnavailable
	}
	wait := time.Until(deadline)
	if wait <= 0 {
		err := st.waitErrorLocked(floor, req.Wait)
		st.mu.Unlock()
		return Decision{}, err
	}
	if st.waiters.len >= st.opts.MaxWaiters {
		st.mu.Unlock()
		return Decision{}, ErrOverloaded
	}
	w := &waiter{ch: make(chan struct{}), ttl: ttl, filter: filter}
	st.waiters.pushBack(w)
	st.mu.Unlock()

	if err := st.await(ctx, w, wait, req.Stop); err != nil {
		st.mu.Lock()
		defer st.mu.Unlock()
		if w.err != nil {
			return Decision{}, w.err // ended, and removed, by Reset
		}
		if w.granted != nil {
			st.giveBackLocked(w)
		} else {
			st.waiters.remove(w)
		}
		if err == errWaitTimeout {
			return Decision{}, st.waitErrorLocked(floor, req.Wait)
		}
		return Decision{}, err
	}
	if w.err != nil {
		return Decision{}, w.err
	}
	d := w.sel
	d.EnvNode, d.Sticky = envNode, sticky
	return d, nil
}

// errWaitTimeout is await's answer when the wait ran out.
var errWaitTimeout = errors.New("wait ran out")

// await blocks until w is served (nil), wait runs out (errWaitTimeout),
// ctx is done (ctx.Err()) or stop is closed (ErrShuttingDown). A served
// waiter's result is in w.
func (st *State) await(ctx context.Context, w *waiter, wait time.Duration, stop <-chan struct{}) error {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-w.ch:
		return nil
	case <-timer.C:
		return errWaitTimeout
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return ErrShuttingDown
	}
}

// waitErrorLocked is the reason a wait of a request with floor found
// nothing. Caller must hold mu.
func (st *State) waitErrorLocked(floor int64, waited time.Duration) error {
	for _, rt := range st.ledger.snap.rts {
		pending := !rt.heard.Load() && rt.healthy.Load() && !rt.draining.Load()
		if (rt.available() || pending) && rt.fresh(floor) {
			return &WaitError{Err: ErrNoIdlePolicy, Waited: waited, Floor: floor}
		}
	}
	return &WaitError{Err: ErrNoFreshPolicy, Waited: waited, Floor: floor}
}

// handOutLocked is the hand-out of a policy without a lease (round
// robin). Caller must hold mu.
func (st *State) handOutLocked(rt *policyRuntime) Decision {
	rt.selected.Add(1)
	return Decision{Policy: rt.policy, Node: rt.node, Version: rt.version.Load()}
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
// idempotent (ErrLeaseAborted, which is an ErrLeaseEnded, for one that
// AbortLeases ended), and ErrUnknownLease for one never issued.
func (st *State) Release(lease uint64) (Decision, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.leases[lease]
	if s == nil {
		if lease != 0 && lease <= st.nextLease {
			if st.aborted.has(lease) {
				return Decision{}, ErrLeaseAborted
			}
			return Decision{}, ErrLeaseEnded
		}
		return Decision{}, ErrUnknownLease
	}
	sel := Decision{Policy: s.rt.policy, Node: s.rt.node, Lease: lease}
	st.releaseLocked(s, false)
	return sel, nil
}

// ReleaseIndex releases the oldest lease of the policy with the given index.
// It returns ErrUnknownPolicy for an unknown index and ErrUnknownLease when
// the policy has no lease out.
func (st *State) ReleaseIndex(index int) (Decision, error) {
	snap := st.snap.Load()
	pos, ok := snap.ByIndex(index)
	if !ok {
		return Decision{}, ErrUnknownPolicy
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
		return Decision{}, ErrUnknownLease
	}
	sel := Decision{Policy: oldest.rt.policy, Node: oldest.rt.node, Lease: oldest.lease}
	st.releaseLocked(oldest, false)
	return sel, nil
}

// LeaseValid reports whether lease is out.
func (st *State) LeaseValid(lease uint64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.leases[lease] != nil
}

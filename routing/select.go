package routing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/policyrouter/policyrouter/prefix"
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
	// not added to it, and at most half of it: a longer one is cut to
	// half of what is left of Wait, so that the request has time to take
	// another policy.
	StickyWait time.Duration
	// LoadFactor is c of the bound on the home's queue of waiting
	// sessions; 0 means Options.LoadFactor.
	LoadFactor float64
	// Exclude names policies (by id) this request must not get: those a
	// proxied request already failed on.
	Exclude []string
	// Model, when set, is the model id the request names: only policies
	// serving it qualify, and a model no policy serves is a
	// *ModelNotFoundError at once.
	Model string
	// Route, when set, is the engine endpoint the request is for: only
	// policies whose engine serves it qualify (Options.Serves).
	Route string
	// Release says what may end the lease besides its TTL and its
	// policy's removal: the holder alone (ReleaseExplicit, the default) or
	// also an idle answer (ReleaseOnIdle, the seed's contract).
	Release ReleaseMode
	// PrefixHashes, when not empty, are the block hashes of the request's
	// prompt (prefix.TokenHashes): the score stage sends it where the
	// prompt is cached, within the load bound (score_prefix.go), and the
	// decision records them pending on its policy. At most
	// prefix.MaxBlocks are used. Hash them before the call: the decision
	// only reads them.
	PrefixHashes []prefix.Hash
	// AwaitReturn says that policies out of routing now (draining,
	// asleep, paused) are expected back, the router having taken them out
	// itself: the call waits up to Wait for one as for a busy one, instead
	// of answering ErrAllUnavailable at once.
	AwaitReturn bool
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
	// EnvUnmapped is set when the request named an env id that maps to no
	// node of the topology: no router could prefer its node.
	EnvUnmapped bool
	// Lease identifies the hand-out for Release, LeaseID renders it; 0
	// and "" for routers that issue none (round robin).
	Lease   uint64
	LeaseID string
	// Version is the policy's weight version at dispatch.
	Version int64
	// Sticky is the sticky stage's outcome, NotSticky without a session.
	Sticky Sticky
	// PrefixMatch is the blocks of the request's prefix hashes that the
	// prefix index holds confirmed for the chosen policy, from the start
	// of the chain (pending blocks attract but are not claimed): the
	// prompt tokens expected cached are PrefixMatch times the unit.
	PrefixMatch int
	// PrefixOutcome is the score stage's outcome: PrefixHit, PrefixMiss,
	// PrefixBalanced, or PrefixNone for a request without hashes.
	PrefixOutcome string
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

// Select decides one sync request, in stages: the filters (availability,
// the weight-version floor, exclusions: filter.go), then, for a request
// that names a session, the prefer stage (its home), then the router's
// pick. Leasing routers (SelectIdle, SelectIdleAffinity) take an idle
// slot; when there is none they wait up to req.Wait until one is
// released, seen idle, expired or registered: a freed slot goes to the
// longest waiter whose home it is, else to the longest waiter. A session
// whose home is busy waits for it alone up to req.StickyWait, and at most
// half of req.Wait (unless the home's queue of sessions is at its bound),
// then takes what the router finds or the first slot to free; it is
// answered ErrNoIdlePolicy only when no policy it may take was idle. A
// waiter that gives up consumes
// nothing. Routers that do not lease never wait. The errors are the
// decision's coded reasons: ErrNoPolicies (none registered),
// ErrAllUnavailable (none passes the availability filter or is awaiting
// its first probe; answered at once), ErrAllExcluded (the request's
// exclusions leave none; at once), ErrOverloaded (it would wait, and
// Options.MaxWaiters calls wait already), a *WaitError (nothing became
// idle within req.Wait), ErrShuttingDown (req.Stop closed), ErrReset
// (Reset ended the wait), or ctx.Err() when the caller left.
func (st *State) Select(ctx context.Context, req SelectRequest) (Decision, error) {
	d, err := st.decide(ctx, req)
	d.EnvUnmapped = req.EnvID != "" && d.EnvNode == "" && err == nil
	if err == nil && len(req.PrefixHashes) == 0 {
		d.PrefixOutcome = PrefixNone
		st.prefixN.none.Add(1)
	}
	return d, err
}

// decide is Select but for EnvUnmapped.
func (st *State) decide(ctx context.Context, req SelectRequest) (Decision, error) {
	r := req.Router
	if r == nil {
		r = SelectIdle
	}
	ttl := req.LeaseTTL
	if ttl <= 0 {
		ttl = st.opts.LeaseTTL
	}
	var q Query
	if len(req.Exclude) > 0 || req.Model != "" || req.Route != "" {
		q.ask = &asks{exclude: req.Exclude, model: req.Model, route: req.Route, serves: st.opts.Serves}
	}
	if req.MinVersion != nil {
		q.floor = max(*req.MinVersion, 0)
	} else {
		q.shared = &st.floor
	}
	deadline := time.Now().Add(req.Wait)
	hashes := capHashes(req.PrefixHashes)
	var pref preference
	if req.Session != "" {
		// The rings are built on first use; build them outside the lock
		// (an Update in between only means building the next snapshot's
		// under it).
		st.snap.Load().rings()
	}

	st.mu.Lock()
	if err := st.modelCheckLocked(&q); err != nil {
		st.mu.Unlock()
		return Decision{}, err
	}
	envNode := st.ledger.snap.EnvNode(req.EnvID)
	if req.Session != "" {
		var d Decision
		var done bool
		if pref, d, done = st.preferLocked(&req, r, &q, ttl, envNode, time.Until(deadline)); done {
			if len(hashes) > 0 {
				outcome, confirmed := st.judgeLocked(pref.home, &q, hashes)
				st.notePrefixLocked(&d, hashes, outcome, confirmed)
			}
			st.mu.Unlock()
			return d, nil
		}
	}
	if !pref.homeOnly {
		if d, ok := st.pickLocked(r, &q, ttl, req.Release, envNode, hashes); ok {
			st.mu.Unlock()
			return pref.served(st, d), nil
		}
	}
	if len(st.runtimes) == 0 {
		st.mu.Unlock()
		return Decision{}, ErrNoPolicies
	}
	if !r.leases() {
		st.mu.Unlock()
		return Decision{}, ErrAllUnavailable
	}
	if err := st.availabilityLocked(&q); err != nil && !req.AwaitReturn {
		st.mu.Unlock()
		return Decision{}, err
	}
	wait := time.Until(deadline)
	if wait <= 0 {
		err := st.waitErrorLocked(q.Floor(), req.Wait)
		st.mu.Unlock()
		pref.count(st, nil)
		return Decision{}, err
	}
	if st.waiters.len >= st.opts.MaxWaiters {
		st.mu.Unlock()
		return Decision{}, ErrOverloaded
	}
	w := &waiter{ch: make(chan struct{}), ttl: ttl, mode: req.Release, q: q, home: pref.home, homeOnly: pref.homeOnly, hashes: hashes}
	st.waiters.pushBack(w)
	if w.home != nil {
		w.home.homeWaiters.pushBack(w)
		st.stickyLoadLocked(w.home)
	}
	st.mu.Unlock()
	return st.await(ctx, w, &req, r, envNode, pref, wait)
}

// pickLocked asks router r for a policy that passes q, and leases or hands
// it out: with prefix hashes, through the score stage first
// (score_prefix.go) when r leases. Caller must hold mu.
func (st *State) pickLocked(r Selector, q *Query, ttl time.Duration, mode ReleaseMode, envNode string, hashes []prefix.Hash) (Decision, bool) {
	if own, ok := st.selectors[r]; ok {
		r = own
	}
	v := View{envNode: envNode, snap: st.ledger.snap, global: &st.ledger.global, byNode: st.ledger.byNode, q: *q}
	var (
		c          Choice
		ok, scored bool
		outcome    string
		confirmed  int
	)
	if len(hashes) > 0 && r.leases() {
		c, ok, outcome, confirmed = st.scoreLocked(r, v, hashes)
		scored = true
	} else {
		c, ok = r.pick(v)
	}
	if !ok {
		return Decision{}, false
	}
	var d Decision
	var rt *policyRuntime
	if c.s != nil {
		rt = c.s.rt
		st.unlistLocked(c.s)
		d = st.leaseLocked(c.s, ttl, mode)
	} else {
		rt = st.ledger.snap.rts[c.pos]
		d = st.handOutLocked(rt)
	}
	d.EnvNode = envNode
	if len(hashes) > 0 {
		if !scored {
			outcome, confirmed = st.judgeLocked(rt, q, hashes)
		}
		st.notePrefixLocked(&d, hashes, outcome, confirmed)
	}
	return d, true
}

// errWaitTimeout is await's answer when the wait ran out.
var errWaitTimeout = errors.New("wait ran out")

// await blocks a queued waiter until it is served, its wait runs out, its
// caller leaves (ctx) or stop is closed. When its home-only phase ends
// (pref.stickyWait), the router may pick for it at once, and from then on
// any freed slot may serve it.
func (st *State) await(ctx context.Context, w *waiter, req *SelectRequest, r Selector, envNode string, pref preference, wait time.Duration) (Decision, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var homeDone <-chan time.Time
	if w.homeOnly {
		ht := time.NewTimer(pref.stickyWait)
		defer ht.Stop()
		homeDone = ht.C
	}
	var err error
	for err == nil {
		select {
		case <-w.ch:
			if w.err != nil {
				return Decision{}, w.err
			}
			d := w.sel
			d.EnvNode = envNode
			return pref.served(st, d), nil
		case <-homeDone:
			homeDone = nil
			st.mu.Lock()
			if w.granted != nil || w.err != nil {
				st.mu.Unlock()
				continue // w.ch is closed
			}
			w.homeOnly = false
			if d, ok := st.pickLocked(r, &w.q, w.ttl, w.mode, envNode, w.hashes); ok {
				st.unwaitLocked(w)
				st.mu.Unlock()
				return pref.served(st, d), nil
			}
			st.mu.Unlock()
		case <-timer.C:
			err = errWaitTimeout
		case <-ctx.Done():
			err = ctx.Err()
		case <-req.Stop:
			err = ErrShuttingDown
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case w.err != nil:
		return Decision{}, w.err // ended, and removed, by Reset
	case w.granted != nil && err == errWaitTimeout:
		// A slot came as the wait ran out: take it.
		d := w.sel
		d.EnvNode = envNode
		return pref.served(st, d), nil
	case w.granted != nil:
		st.giveBackLocked(w)
	case w.homeOnly && err == errWaitTimeout:
		// The wait ran out before the home-only phase was seen to end
		// (a late wake-up): the router picks before the answer is no.
		w.homeOnly = false
		d, ok := st.pickLocked(r, &w.q, w.ttl, w.mode, envNode, w.hashes)
		st.unwaitLocked(w)
		if ok {
			return pref.served(st, d), nil
		}
	default:
		st.unwaitLocked(w)
	}
	if err == errWaitTimeout {
		pref.count(st, nil)
		return Decision{}, st.waitErrorLocked(w.q.Floor(), req.Wait)
	}
	return Decision{}, err
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
		s.rt.selected.Add(^uint64(0))
		st.endLeaseLocked(s, EndRelease, false)
		st.endedN[EndRelease].Add(^uint64(0)) // never handed to anyone: not a lease that ended
		st.offerLocked(s, true)
	}
}

// availabilityLocked says whether waiting may help a request with q: nil
// when a registered policy that q does not exclude passes the
// availability filter, or may pass it soon (just registered, or the router
// just started, and its first probe not answered yet); else
// ErrAllUnavailable, or ErrAllExcluded when only q's exclusions leave
// none, so that such a request is answered at once rather than after its
// wait. One pass over the policies. Caller must hold mu.
func (st *State) availabilityLocked(q *Query) error {
	ex := q.Exclude()
	excluded := false
	for _, rt := range st.ledger.snap.rts {
		if !rt.available() && (rt.heard.Load() || rt.probes.Load() != 0 || !rt.healthy.Load() || rt.draining.Load()) {
			continue
		}
		if len(ex) > 0 && slices.Contains(ex, rt.policy.ID) {
			excluded = true
			continue
		}
		return nil
	}
	if excluded {
		return ErrAllExcluded
	}
	return ErrAllUnavailable
}

// Release returns a leased slot to idle at once: its holder says its work
// is over. It returns ErrLeaseEnded for a lease that was issued but is no
// longer out, so that releasing is idempotent (ErrLeaseAborted, which is
// an ErrLeaseEnded, for one that AbortLeases ended), and ErrUnknownLease
// for one never issued.
func (st *State) Release(lease uint64) (Decision, error) { return st.release(lease, false) }

// ReleaseUnfinished is Release for a holder that stopped without seeing
// its work end: a proxied request whose client left, or whose answer was
// cut. The engine may still be working on it, so its work keeps counting
// against the policy's occupancy until a probe sent after the lease was
// handed out reports what the engine runs (occupancy.go).
func (st *State) ReleaseUnfinished(lease uint64) (Decision, error) { return st.release(lease, true) }

func (st *State) release(lease uint64, unfinished bool) (Decision, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.leases[lease]
	if s == nil {
		if lease != 0 && lease <= st.nextLease {
			return Decision{}, &LeaseEndedError{How: st.ended.of(lease)}
		}
		return Decision{}, ErrUnknownLease
	}
	sel := Decision{Policy: s.rt.policy, Node: s.rt.node, Lease: lease}
	st.releaseLocked(s, EndRelease, unfinished)
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
	st.releaseLocked(oldest, EndRelease, false)
	return sel, nil
}

// LeaseValid reports whether lease is out.
func (st *State) LeaseValid(lease uint64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.leases[lease] != nil
}

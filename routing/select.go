package routing

import (
	"context"
	"fmt"
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
	// WeightLabel is that version as the policy's server last wrote it
	// (SGLang's weight_version, e.g. "step-3"), "" when it reports none.
	WeightLabel string
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
// it out: with prefix hashes or scorers, through the score stage first
// (filter.go) when r leases. Caller must hold mu.
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
	if (len(hashes) > 0 || len(scorers) > 0) && r.leases() {
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

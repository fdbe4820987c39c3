package routing

import (
	"context"
	"errors"
	"slices"
	"time"
)

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
		if out := rt.outState(); (out == "" || out == StateUnknown) && rt.fresh(floor) {
			return &WaitError{Err: ErrNoIdlePolicy, Waited: waited, Floor: floor}
		}
	}
	return &WaitError{Err: ErrNoFreshPolicy, Waited: waited, Floor: floor}
}

// handOutLocked is the hand-out of a policy without a lease (round
// robin). Caller must hold mu.
func (st *State) handOutLocked(rt *policyRuntime) Decision {
	rt.selected.Add(1)
	return Decision{Policy: rt.policy, Node: rt.node, Version: rt.version.Load(), WeightLabel: rt.weightVersion}
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
		// Waiting may help a policy that is available, or that awaits the
		// answer of its first probe (none sent yet).
		if out := rt.outState(); out != "" && (out != StateUnknown || rt.probes.Load() != 0) {
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

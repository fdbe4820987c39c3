package routing

import (
	"time"

	"github.com/policyrouter/policyrouter/prefix"
)

// endWaitersLocked ends every wait with ErrReset. Caller must hold mu.
func (st *State) endWaitersLocked() {
	for st.waiters.head != nil {
		w := st.waiters.head
		st.unwaitLocked(w)
		w.err = ErrReset
		close(w.ch)
	}
}

// unwaitLocked takes w out of the waiter lists. Caller must hold mu.
func (st *State) unwaitLocked(w *waiter) {
	st.waiters.remove(w)
	if w.home != nil {
		w.home.homeWaiters.remove(w)
		st.stickyLoadLocked(w.home)
	}
}

func (st *State) nodeListLocked(node string) *slotList {
	l := st.byNode[node]
	if l == nil {
		l = &slotList{kind: nodeList}
		st.byNode[node] = l
	}
	return l
}

func (st *State) unlistLocked(s *slot) {
	if !s.listed {
		return
	}
	st.global.remove(s)
	st.nodeListLocked(s.rt.node).remove(s)
	s.listed = false
	s.rt.occ.listed--
}

// endLeaseLocked ends the lease of a leased slot (released, freed by a
// probe, expired, aborted or its policy removed), and counts how.
// unfinished says that its work may still run (occupancy.go): its holder
// gave up on it, or no holder said. Caller must hold mu.
func (st *State) endLeaseLocked(s *slot, how EndHow, unfinished bool) {
	delete(st.leases, s.lease)
	st.forgetAdoptedLocked(s)
	if how != EndRelease {
		st.ended.add(s.lease, how)
	}
	st.endedN[how].Add(1)
	s.lease = 0
	now := st.opts.Now()
	subtract := !unfinished && how != EndProbe
	s.ended = lastEnd{at: now, leasedAt: s.leasedAt, subtract: subtract}
	s.rt.endedLocked(s.leasedAt, now, subtract, unfinished)
	if s.expiry != nil {
		s.expiry.Stop()
		s.expiry = nil
	}
}

// offerLocked makes an unleased, unlisted slot idle if its policy has
// room for it (occupancy.go): handed straight to the oldest waiter if
// there is one, else put in the idle deques (at the back, or the front
// when front is set). Otherwise the slot stays parked. Caller must hold
// mu.
func (st *State) offerLocked(s *slot, front bool) {
	if s.listed || s.lease != 0 || s.retired || s.rt.room() <= 0 {
		return
	}
	if w := st.waiterForLocked(s.rt); w != nil {
		st.unwaitLocked(w)
		w.granted = s
		w.sel = st.leaseLocked(s, w.ttl, w.mode)
		if len(w.hashes) > 0 {
			// Waiters are served in arrival order: the hand-off is not
			// scored, but its prefix is recorded and its match reported.
			outcome, confirmed := st.judgeLocked(s.rt, &w.q, w.hashes)
			st.notePrefixLocked(&w.sel, w.hashes, outcome, confirmed)
		}
		close(w.ch)
		return
	}
	nl := st.nodeListLocked(s.rt.node)
	switch {
	case front:
		st.global.pushFront(s)
		nl.pushFront(s)
	case s.initial:
		insertInitial(&st.global, s)
		insertInitial(nl, s)
	default:
		st.global.pushBack(s)
		nl.pushBack(s)
	}
	s.listed = true
	s.rt.occ.listed++
}

// waiterForLocked returns the waiter a freed slot of rt goes to: the
// longest waiter whose home rt is; else the longest waiter not waiting for
// its home alone (a session within its sticky wait waits for its home, as
// it would for an idle slot elsewhere when it arrived), unless a younger
// one among the next prefixBypassScan rates rt (wantsLocked: it holds a
// prompt rt has cached, the rest of a GRPO group or the next turn of an
// episode, or a scorer rates rt for it), which may go ahead of it, at most
// maxPrefixBypass times; each only if rt passes its filters. So no waiter
// starves for want of a cached prefix. nil when none. Caller must hold mu.
func (st *State) waiterForLocked(rt *policyRuntime) *waiter {
	for w := rt.homeWaiters.head; w != nil; w = w.links[homeWaiters].next {
		if w.q.ok(rt) {
			return w
		}
	}
	var first *waiter
	for w := st.waiters.head; w != nil; w = w.links[allWaiters].next {
		if !w.homeOnly && w.q.ok(rt) {
			first = w
			break
		}
	}
	if first == nil || first.bypassed >= maxPrefixBypass || st.wantsLocked(first, rt) {
		return first
	}
	n := 0
	for w := first.links[allWaiters].next; w != nil && n < prefixBypassScan; w = w.links[allWaiters].next {
		n++
		if !w.homeOnly && w.q.ok(rt) && st.wantsLocked(w, rt) {
			first.bypassed++
			return w
		}
	}
	return first
}

// wantsLocked reports whether waiter w rates rt (filter.go): the prefix
// index holds the first step of its prompt for rt, or the scorers rate rt
// for its query. Caller must hold mu.
func (st *State) wantsLocked(w *waiter, rt *policyRuntime) bool {
	return (len(w.hashes) > 0 && st.holdsLocked(rt, w.hashes)) || rateLocked(&w.q, rt) > 0
}

// holdsLocked reports whether the prefix index holds the first step of
// hashes for rt, pending or confirmed. Caller must hold mu.
func (st *State) holdsLocked(rt *policyRuntime, hashes []prefix.Hash) bool {
	sc := &st.prefixScratch
	sc.ids = append(sc.ids[:0], rt.policy.ID)
	sc.matches = st.prefix.Match(hashes[:min(len(hashes), st.prefix.Stride())], sc.ids, sc.matches)
	return sc.matches[0].Pending > 0
}

// releaseLocked ends a slot's lease and offers it; unfinished as for
// endLeaseLocked. Caller must hold mu.
func (st *State) releaseLocked(s *slot, how EndHow, unfinished bool) {
	st.endLeaseLocked(s, how, unfinished)
	st.offerLocked(s, false)
	if s.rt.room() > 0 {
		// The slot itself may be retired, or the end made more room than
		// one slot (a shrunk capacity): offer the others.
		st.fitLocked(s.rt)
	}
}

// leaseLocked hands out an idle, unlisted slot, for ttl when positive.
// Caller must hold mu.
func (st *State) leaseLocked(s *slot, ttl time.Duration, mode ReleaseMode) Decision {
	st.nextLease++
	lease := st.nextLease
	now := st.opts.Now()
	s.lease = lease
	s.leasedAt = now
	s.onIdle = mode == ReleaseOnIdle
	s.seenWorking = false
	s.initial = false
	st.leases[lease] = s
	s.rt.handedOutLocked(now)
	if ttl > 0 {
		s.expiry = time.AfterFunc(ttl, func() { st.expire(s, lease) })
	}
	d := st.handOutLocked(s.rt)
	d.Lease, d.LeaseID = lease, st.LeaseID(lease)
	return d
}

// expire ends lease, if it is still out on s, like a release.
func (st *State) expire(s *slot, lease uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if s.lease != lease {
		return
	}
	s.expiry = nil // fired: nothing to stop
	s.rt.expired.Add(1)
	st.releaseLocked(s, EndTTL, true) // the holder never said its work ended
}

// The bound of the prefix bypass of waiterForLocked: how many younger
// waiters it looks at, and how many times the longest waiter may be
// passed over.
const (
	prefixBypassScan = 64
	maxPrefixBypass  = 16
)

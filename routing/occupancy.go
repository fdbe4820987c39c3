package routing

import (
	"slices"
	"time"
)

// Occupancy is how much of a policy's capacity is taken, from the two
// sources the router has: what it handed out itself (leases, which
// include proxied requests in flight) and what the engine reports (its
// load: running plus waiting requests, or its whole capacity when it
// answers busy without a figure). Neither alone is the truth:
//
//   - a lease whose holder has not sent its request yet (an env worker
//     stepping its environment) takes a slot the engine does not see;
//   - a holder that sends several requests, and traffic that did not come
//     through the router, take slots only the engine sees.
//
// So
//
//	occupancy = max(engine load, outside load + leases out)
//
// where the outside load is the engine's load last seen while the router
// had nothing out on the policy (0 until seen). Outside traffic that starts
// while leases are out is seen only through the engine's load. A policy is
// handed out only while its occupancy is below its capacity: its listed
// (idle) slots are at most capacity - occupancy.
//
// The engine's figure is as old as the probe that carried it, so the
// ledger brings it forward: leases handed out after that probe was sent
// are added to it (their work is not in it yet), and leases handed out
// before it and ended by their holder since are taken from it (their
// holder says their work is over). An engine's count never ends a lease:
// it cannot say which lease is done.
//
// A lease can end while its work may still run: its holder gave up on
// the answer (a proxied request whose client left, or whose answer was
// cut, ReleaseUnfinished), or its TTL ran out. The engine goes on with
// such work until it notices, if it ever does, so the end frees nothing
// by itself: the work stays in the engine's figure (it is not taken from
// it), or, when the lease was handed out after the figure's probe was
// sent, is added to it, until a probe sent after the hand-out reports
// what the engine still runs. A policy with no engine figure (never
// probed) counts its leases alone: there is no figure to wait for.
//
// occupancyState is a policy's part of it. Guarded by State.mu.
type occupancyState struct {
	// engineLoad is the engine's figure from the last good probe, sent at
	// engineAt; engineKnown is false until a probe answered.
	engineLoad  int64
	engineAt    time.Time
	engineKnown bool
	// endedBefore counts the leases handed out by engineAt that ended
	// since, other than by a probe; outAfter the leases handed out after
	// engineAt that are still out. (A lease handed out at the very instant
	// the probe was sent counts as one the probe may have seen.)
	endedBefore int64
	outAfter    int64
	// unseen holds when each lease was handed out that ended unfinished
	// (its work may still run) and was handed out after engineAt: work
	// the engine's figure cannot hold yet. At most one per slot: more
	// would only say again that the policy is full.
	unseen []time.Time
	// outside is the engine's load last seen with nothing out.
	outside int64
	// changedAt is when a lease of the policy was last handed out or
	// ended: a probe sent before it may have seen that lease's work.
	changedAt time.Time
	// listed counts the policy's slots in the idle deques.
	listed int
}

// engineNow is the engine's figure brought forward to now. Caller must
// hold State.mu.
func (rt *policyRuntime) engineNow() int64 {
	if !rt.occ.engineKnown {
		return 0
	}
	return max(rt.occ.engineLoad-rt.occ.endedBefore, 0) + rt.occ.outAfter + int64(len(rt.occ.unseen))
}

// occupancy is max(engine load, outside load + leases out). Caller must
// hold State.mu.
func (rt *policyRuntime) occupancy() int64 {
	return max(rt.engineNow(), rt.occ.outside+int64(rt.inflight))
}

// room is how many more of rt's slots may be listed now: capacity minus
// occupancy minus the slots listed already; while the policy is
// unavailable, minus the slots listed. Caller must hold State.mu.
func (rt *policyRuntime) room() int {
	if rt.removed || !rt.available() {
		return -rt.occ.listed
	}
	return int(max(int64(len(rt.slots))-rt.occupancy(), 0)) - rt.occ.listed
}

// observeEngineLocked takes a good probe's figure: the engine's load, or
// its capacity when it answered busy (busy is full), and, when nothing was
// out on the policy from before the probe was sent until now, that figure
// as the outside load. Caller must hold State.mu.
func (st *State) observeEngineLocked(rt *policyRuntime, p Probe) {
	var load int64
	if p.HasLoad {
		load = min(max(p.Load, 0), MaxLoad)
	}
	if !p.Idle {
		load = max(load, int64(len(rt.slots)))
	}
	o := &rt.occ
	o.engineLoad, o.engineAt, o.engineKnown = load, p.SentAt, true
	o.endedBefore, o.outAfter = 0, 0
	for _, s := range rt.slots {
		switch {
		case s.lease != 0 && s.leasedAt.After(p.SentAt):
			o.outAfter++
		case s.lease == 0 && s.ended.at.After(p.SentAt) && !s.ended.leasedAt.After(p.SentAt) && s.ended.subtract:
			// Ended since the probe was sent, its work over: newer news
			// than its figure.
			o.endedBefore++
		}
	}
	// Unfinished work handed out before the probe was sent is in its
	// figure if it still runs; the rest is not.
	o.unseen = slices.DeleteFunc(o.unseen, func(at time.Time) bool { return !at.After(p.SentAt) })
	if rt.inflight == 0 && o.changedAt.Before(p.SentAt) {
		o.outside = load
	}
}

// lastEnd is when a slot's last lease ended, when that lease was handed
// out, and whether the end takes the lease's work out of a figure from a
// probe sent before it (subtract): only when its holder said the work is
// over. A lease that a probe ended is not in the figure (that is why it
// ended); one that ended unfinished may still run.
type lastEnd struct {
	at, leasedAt time.Time
	subtract     bool
}

// handedOutLocked counts a lease of s handed out now. Caller must hold
// State.mu.
func (rt *policyRuntime) handedOutLocked(now time.Time) {
	rt.inflight++
	if now.After(rt.occ.engineAt) {
		rt.occ.outAfter++
	}
	rt.occ.changedAt = now
}

// endedLocked counts the end of a lease of rt, handed out at leasedAt,
// ended now: subtract as lastEnd has it, unfinished when its work may
// still run. Only work that is over is taken from the engine's figure;
// unfinished work handed out after the figure stays added to it
// (unseen). Caller must hold State.mu.
func (rt *policyRuntime) endedLocked(leasedAt, now time.Time, subtract, unfinished bool) {
	rt.inflight--
	rt.occ.changedAt = now
	switch {
	case leasedAt.After(rt.occ.engineAt):
		rt.occ.outAfter = max(rt.occ.outAfter-1, 0)
		if unfinished {
			o := &rt.occ
			if len(o.unseen) >= max(len(rt.slots), 1) {
				o.unseen = slices.Delete(o.unseen, 0, 1)
			}
			o.unseen = append(o.unseen, leasedAt)
		}
	case subtract:
		rt.occ.endedBefore++
	}
}

// fitLocked brings rt's listed slots to its room after its occupancy or
// availability changed: the surplus leaves the idle deques, and while
// there is room its unleased slots are offered (to waiters first). Every
// change of a policy's availability comes through here, so it also moves
// the policy's part of the sticky rings' loads. Caller must hold State.mu.
func (st *State) fitLocked(rt *policyRuntime) {
	st.stickyLoadLocked(rt)
	for i := len(rt.slots) - 1; i >= 0 && rt.room() < 0; i-- {
		if s := rt.slots[i]; s.listed {
			st.unlistLocked(s)
		}
	}
	for _, s := range rt.slots {
		if rt.room() <= 0 {
			return
		}
		if !s.listed && s.lease == 0 {
			st.offerLocked(s, false)
		}
	}
}

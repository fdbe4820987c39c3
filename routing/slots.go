package routing

import (
	"time"

	"github.com/policyrouter/policyrouter/prefix"
)

// A slot is one unit of a policy's capacity. An idle slot sits at once in
// the global idle deque and in its node's idle deque (intrusive lists, so a
// pop from either is O(1) and allocates nothing); a leased slot is in
// neither; a parked slot is unleased but not listed: its policy is
// unavailable (unhealthy, draining, not heard from) or has no room for it
// (occupancy.go). All fields are guarded by State.mu.
type slot struct {
	rt     *policyRuntime
	links  [2]listLink[slot] // by list kind: global, node
	listed bool
	// initial marks the first slot of a newly registered policy until its
	// first lease: it enters the idle deques in index order among the
	// other initial slots, whatever order the first probes answer in, as
	// the seed's deque(eval_policies) starts (insertInitial).
	initial  bool
	retired  bool // capacity shrank while leased: dropped on release
	lease    uint64
	leasedAt time.Time
	// onIdle marks a lease of ReleaseOnIdle: a probe may end it
	// (settleLeasesLocked). Explicit leases end only by their holder,
	// their TTL or their policy's removal.
	onIdle bool
	// seenWorking is set when a probe sent after the hand-out found the
	// lease's work running (settleLeasesLocked).
	seenWorking bool
	expiry      *time.Timer // ends the lease at its TTL; nil without one
	// ended describes the slot's last lease that ended (occupancy.go).
	ended lastEnd
	// adoptedID and holder are an adopted lease's id and holder (Adopt);
	// "" for a lease of this router's.
	adoptedID, holder string
}

const (
	globalList = 0
	nodeList   = 1
)

// slotList is a FIFO of idle slots threaded through slot.links[kind].
type slotList = list[slot, *slot]

func (s *slot) link(kind int) *listLink[slot] { return &s.links[kind] }

// insertInitial puts an initial slot among the initial slots at the head
// of l, in index order: before the first slot that is not initial or has
// a higher index. Initial slots are at most one per policy and leave the
// head at their first lease, so the walk is short but for the first probe
// round of a large registration (O(policies) each).
func insertInitial(l *slotList, s *slot) {
	at := l.head
	for at != nil && at.initial && at.rt.policy.Index < s.rt.policy.Index {
		at = at.links[l.kind].next
	}
	l.insertBefore(s, at)
}

// A waiter is a /select caller blocked until a slot is handed to it. The
// slot is handed over under State.mu and ch is closed after; a waiter that
// gives up takes State.mu and either finds a slot (and gives it back) or
// unlinks itself, so nothing is lost either way.
//
// Every waiter is in State.waiters, in arrival order; one with a preferred
// policy (its session's home) is also in that policy's homeWaiters. A
// freed slot goes to the longest waiter whose home it is, else to the
// longest waiter not in its home-only phase (offerLocked).
type waiter struct {
	links [2]listLink[waiter] // by list kind: all waiters, a home's waiters
	ch    chan struct{}
	ttl   time.Duration // of the lease it will get
	mode  ReleaseMode   // of the lease it will get
	q     Query         // what its policy must pass
	// home is the preferred policy, nil for none; homeOnly is set while
	// the waiter waits for its home alone (sticky_wait_ms).
	home     *policyRuntime
	homeOnly bool
	// hashes are the request's prompt block hashes (score_prefix.go),
	// nil without.
	hashes []prefix.Hash
	// bypassed counts the waiters served before this one, while it was
	// the longest, for the prefix their prompts had cached (waiterForLocked).
	bypassed int
	sel      Decision
	granted  *slot
	err      error // why the wait was ended without a slot (ErrReset)
}

const (
	allWaiters  = 0
	homeWaiters = 1
)

// waiterList is a FIFO of waiters threaded through waiter.links[kind].
type waiterList = list[waiter, *waiter]

func (w *waiter) link(kind int) *listLink[waiter] { return &w.links[kind] }

package routing

import "time"

// A slot is one unit of a policy's capacity. An idle slot sits at once in
// the global idle deque and in its node's idle deque (intrusive lists, so a
// pop from either is O(1) and allocates nothing); a leased slot is in
// neither; a parked slot is unleased but not listable: its policy is
// unavailable (unhealthy, draining, not heard from) or answered busy after
// the slot was freed. All fields are guarded by State.mu.
type slot struct {
	rt     *policyRuntime
	links  [2]link // by list kind: global, node
	listed bool
	// initial marks the first slot of a newly registered policy until its
	// first lease: it enters the idle deques in index order among the
	// other initial slots, whatever order the first probes answer in, as
	// the seed's deque(eval_policies) starts (slotList.insertInitial).
	initial  bool
	retired  bool // capacity shrank while leased: dropped on release
	lease    uint64
	leasedAt time.Time
	// seenWorking is set when a probe sent after the hand-out found the
	// lease's work running (settleLeasesLocked).
	seenWorking bool
	expiry      *time.Timer // ends the lease at its TTL; nil without one
	// freedAt is when the last lease ended; held is set when the policy
	// answered busy to a probe sent after that, and cleared by an idle
	// answer or the end of a later lease.
	freedAt time.Time
	held    bool
}

type link struct{ prev, next *slot }

const (
	globalList = 0
	nodeList   = 1
)

// slotList is a FIFO of idle slots threaded through slot.links[kind].
type slotList struct {
	kind       int
	head, tail *slot
	len        int
}

func (l *slotList) pushBack(s *slot) {
	lk := &s.links[l.kind]
	lk.prev, lk.next = l.tail, nil
	if l.tail != nil {
		l.tail.links[l.kind].next = s
	} else {
		l.head = s
	}
	l.tail = s
	l.len++
}

func (l *slotList) pushFront(s *slot) { l.insertBefore(s, l.head) }

// insertBefore puts s before at, or at the tail when at is nil.
func (l *slotList) insertBefore(s, at *slot) {
	if at == nil {
		l.pushBack(s)
		return
	}
	lk, ak := &s.links[l.kind], &at.links[l.kind]
	lk.prev, lk.next = ak.prev, at
	if ak.prev != nil {
		ak.prev.links[l.kind].next = s
	} else {
		l.head = s
	}
	ak.prev = s
	l.len++
}

// insertInitial puts an initial slot among the initial slots at the head
// of the list, in index order: before the first slot that is not initial
// or has a higher index. Initial slots are at most one per policy and
// leave the head at their first lease, so the walk is short but for the
// first probe round of a large registration (O(policies) each).
func (l *slotList) insertInitial(s *slot) {
	at := l.head
	for at != nil && at.initial && at.rt.policy.Index < s.rt.policy.Index {
		at = at.links[l.kind].next
	}
	l.insertBefore(s, at)
}

func (l *slotList) remove(s *slot) {
	lk := &s.links[l.kind]
	if lk.prev != nil {
		lk.prev.links[l.kind].next = lk.next
	} else {
		l.head = lk.next
	}
	if lk.next != nil {
		lk.next.links[l.kind].prev = lk.prev
	} else {
		l.tail = lk.prev
	}
	lk.prev, lk.next = nil, nil
	l.len--
}

// A waiter is a /select caller blocked until a slot is handed to it. The
// slot is handed over under State.mu and ch is closed after; a waiter that
// gives up takes State.mu and either finds a slot (and gives it back) or
// unlinks itself, so nothing is lost either way.
type waiter struct {
	prev, next *waiter
	ch         chan struct{}
	ttl        time.Duration   // of the lease it will get
	filter     candidateFilter // what its policy must pass
	sel        Decision
	granted    *slot
	err        error // why the wait was ended without a slot (ErrReset)
}

type waiterList struct {
	head, tail *waiter
	len        int
}

func (l *waiterList) pushBack(w *waiter) {
	w.prev, w.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	l.len++
}

func (l *waiterList) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next = nil, nil
	l.len--
}

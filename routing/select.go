package routing

import (
	"context"
	"fmt"
)

// SelectKind names a sync router.
type SelectKind int

const (
	// SelectIdle is the seed's SyncSimpleRouter: one FIFO deque of idle
	// policies; a selected policy is busy until released or seen idle.
	SelectIdle SelectKind = iota
	// SelectRoundRobin is the seed's SyncNodeAffinityRouter: per-node round
	// robin over the env worker's node's eval policies, else global round
	// robin. Like the seed it does not track busy policies and issues no
	// lease.
	SelectRoundRobin
	// SelectIdleAffinity uses per-node idle deques: an idle policy on the env
	// worker's node if there is one, else the oldest idle policy anywhere.
	SelectIdleAffinity
)

// Selection is the answer of Select.
type Selection struct {
	Policy Policy
	// Node is the policy's effective node.
	Node string
	// Lease identifies the hand-out for Release; 0 for round robin.
	Lease uint64
}

// Select picks a policy for one sync request. SelectIdle and
// SelectIdleAffinity take an idle slot; when there is none they wait, in
// FIFO order with other waiters, until one is released, seen idle or
// registered, or until ctx is done (returning ctx.Err(); a waiter that gives
// up consumes nothing). A ctx that is already done makes Select a
// non-blocking try: it returns ctx.Err() at once when nothing is idle.
// SelectRoundRobin never waits. ErrNoPolicies means no
// policy is registered (idle kinds) or available (round robin).
func (st *State) Select(ctx context.Context, kind SelectKind, envID string) (Selection, error) {
	snap := st.snap.Load()
	switch kind {
	case SelectRoundRobin:
		return st.selectRoundRobin(snap, envID)
	case SelectIdle, SelectIdleAffinity:
	default:
		return Selection{}, fmt.Errorf("select: unknown kind %d", kind)
	}
	node := ""
	if kind == SelectIdleAffinity {
		node = snap.EnvNode(envID)
	}

	st.mu.Lock()
	if s := st.popIdleLocked(node); s != nil {
		sel := st.leaseLocked(s)
		st.mu.Unlock()
		return sel, nil
	}
	if len(st.runtimes) == 0 {
		st.mu.Unlock()
		return Selection{}, ErrNoPolicies
	}
	if err := ctx.Err(); err != nil {
		st.mu.Unlock()
		return Selection{}, err
	}
	w := &waiter{ch: make(chan struct{})}
	st.waiters.pushBack(w)
	st.mu.Unlock()

	select {
	case <-w.ch:
		return w.sel, nil
	case <-ctx.Done():
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if w.granted == nil {
		st.waiters.remove(w)
		return Selection{}, ctx.Err()
	}
	// Granted while giving up: put the slot back where it was, at the head.
	if w.granted.lease == w.sel.Lease {
		st.freeLocked(w.granted, true)
	}
	return Selection{}, ctx.Err()
}

// popIdleLocked takes the oldest idle slot on node, else the oldest idle
// slot anywhere, or returns nil. Caller must hold mu.
func (st *State) popIdleLocked(node string) *slot {
	var s *slot
	if node != "" {
		if l := st.byNode[node]; l != nil {
			s = l.head
		}
	}
	if s == nil {
		s = st.global.head
	}
	if s != nil {
		st.unlistLocked(s)
	}
	return s
}

// selectRoundRobin is the seed's SyncNodeAffinityRouter.select_policy,
// skipping unavailable policies (with all available it gives the seed's
// sequence exactly).
func (st *State) selectRoundRobin(snap *Snapshot, envID string) (Selection, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if node, ok := snap.evalNode(envID); ok {
		ps := snap.evalPos[node]
		for range ps {
			pos := ps[st.rr[node]%uint64(len(ps))]
			st.rr[node]++
			if sel, ok := st.pickLocked(snap, pos); ok {
				return sel, nil
			}
		}
	}
	n := uint64(len(snap.policies))
	for range n {
		pos := int(st.grr % n)
		st.grr++
		if sel, ok := st.pickLocked(snap, pos); ok {
			return sel, nil
		}
	}
	return Selection{}, ErrNoPolicies
}

func (st *State) pickLocked(snap *Snapshot, pos int) (Selection, bool) {
	rt := snap.rts[pos]
	if !rt.available() {
		return Selection{}, false
	}
	rt.selected.Add(1)
	return Selection{Policy: rt.policy, Node: rt.node}, true
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
	st.freeLocked(s, false)
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
	st.freeLocked(oldest, false)
	return sel, nil
}

// LeaseValid reports whether lease is out.
func (st *State) LeaseValid(lease uint64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.leases[lease] != nil
}

package routing

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

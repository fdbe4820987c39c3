package routing

// queueBoundLocked is the most sessions that may wait for one home of
// ring: ⌈c · (waiting + 1) / available⌉ over the ring's available
// policies. Caller must hold mu.
func (st *State) queueBoundLocked(r *hashRing, c float64) int64 {
	rl := st.ringLoadLocked(r)
	return loadBound(c, rl.total, max(rl.n, 1))
}

// idleSlotLocked returns an idle (listed) slot of rt, or nil when it has
// none. Caller must hold State.mu.
func idleSlotLocked(rt *policyRuntime) *slot {
	for _, s := range rt.slots {
		if s.listed {
			return s
		}
	}
	return nil
}

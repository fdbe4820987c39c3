package routing

// The sticky stage's load bound for /select, ⌈c · (total + 1) /
// available⌉, needs the total load and the number of available policies of
// the ring it walks: of all policies, or of one node's. Summing them per
// request costs a pass over every policy (5 µs at 1,024), so the ledger
// keeps them up to date instead: every change of a policy's leases, tracked
// load or availability calls stickyLoadLocked, which moves the policy's
// contribution. Calling it when nothing changed is harmless. Until the
// first /select that names a session the ledger keeps nothing, so that
// deployments without sessions pay one branch per change.

// ringLoad is the total load and the number of available policies of one
// ring.
type ringLoad struct {
	total int64
	n     int
}

// stickyContribution is what one policy adds to its rings' ringLoads.
type stickyContribution struct {
	on   bool   // counted: registered and available
	load int64  // leases out plus tracked load, when on
	node string // the node ring it is counted in, when on
}

// stickyLoadLocked brings rt's contribution to the ledger's ring loads up
// to date. Caller must hold State.mu.
func (st *State) stickyLoadLocked(rt *policyRuntime) {
	if !st.stickyTracked {
		return
	}
	was := rt.stickyIn
	now := stickyContribution{on: !rt.removed && rt.available()}
	if now.on {
		now.load = int64(rt.inflight) + rt.load
		now.node = rt.node
	}
	if was == now {
		return
	}
	// Add first, then take away, so that a node's entry that stays is
	// never deleted and made again.
	if now.on {
		st.stickyAll.total += now.load
		st.stickyAll.n++
		if now.node != "" {
			nl := st.stickyNode[now.node]
			if nl == nil {
				nl = &ringLoad{}
				st.stickyNode[now.node] = nl
			}
			nl.total += now.load
			nl.n++
		}
	}
	if was.on {
		st.stickyAll.total -= was.load
		st.stickyAll.n--
		if was.node != "" {
			nl := st.stickyNode[was.node]
			nl.total -= was.load
			nl.n--
			if nl.n == 0 {
				delete(st.stickyNode, was.node)
			}
		}
	}
	rt.stickyIn = now
}

// ringLoadLocked returns the load of ring r as the ledger keeps it,
// starting to keep the ring loads on first use. Caller must hold State.mu.
func (st *State) ringLoadLocked(r *hashRing) ringLoad {
	if !st.stickyTracked {
		st.stickyTracked = true
		for _, rt := range st.ledger.snap.rts {
			st.stickyLoadLocked(rt)
		}
	}
	if r.node == "" {
		return st.stickyAll
	}
	if nl := st.stickyNode[r.node]; nl != nil {
		return *nl
	}
	return ringLoad{}
}

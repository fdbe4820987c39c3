package routing

// roundRobin is /select's "node_affinity": round robin over the eval
// policies of the env worker's node in topology order, one position per
// node, else round robin over all policies (the seed's
// SyncNodeAffinityRouter). Like the seed it hands policies out blind to
// whether they are busy and issues no lease; it only skips policies that
// fail the availability filter or the weight-version floor, so that with
// every policy available the sequence is the seed's exactly.
type roundRobin struct{}

var _ Selector = roundRobin{}

// roundRobinState is the router's own state in one routing state: the
// next position on each node and over all policies. It outlives
// registrations, as the seed's counters outlive calls.
type roundRobinState struct {
	byNode map[string]uint64
	all    uint64
}

func (roundRobin) newState() any { return &roundRobinState{byNode: make(map[string]uint64)} }

func (roundRobin) pick(c candidates, envNode string) (pick, bool) {
	rr := c.own.(*roundRobinState)
	snap := c.snap
	if ps, ok := snap.evalPos[envNode]; ok && envNode != "" {
		for range ps {
			pos := ps[rr.byNode[envNode]%uint64(len(ps))]
			rr.byNode[envNode]++
			if rt := snap.rts[pos]; rt.available() && c.filter.ok(rt) {
				return pick{pos: pos}, true
			}
		}
	}
	n := uint64(len(snap.policies))
	for range n {
		pos := int(rr.all % n)
		rr.all++
		if rt := snap.rts[pos]; rt.available() && c.filter.ok(rt) {
			return pick{pos: pos}, true
		}
	}
	return pick{}, false
}

func (roundRobin) leases() bool { return false }

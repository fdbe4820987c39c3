package routing

// roundRobin is /select's "node_affinity": round robin over the eval
// policies of the env worker's node in topology order, one position per
// node, else round robin over all policies (the seed's
// SyncNodeAffinityRouter). Like the seed it hands policies out blind to
// whether they are busy and issues no lease; it only skips policies that
// fail the availability filter or the weight-version floor, so that with
// every policy available the sequence is the seed's exactly.
type roundRobin struct {
	// The next position on each node and over all policies. They outlive
	// registrations, as the seed's counters outlive calls; guarded by the
	// routing state's lock, as every pick is.
	byNode map[string]uint64
	all    uint64
}

var _ Selector = (*roundRobin)(nil)

func newRoundRobin() Selector { return &roundRobin{byNode: make(map[string]uint64)} }

func (rr *roundRobin) pick(v View) (Choice, bool) {
	node := v.EnvNode()
	if ps, ok := v.Eval(node); ok {
		for range ps {
			pos := ps[rr.byNode[node]%uint64(len(ps))]
			rr.byNode[node]++
			if _, ok := v.Eligible(pos); ok {
				return HandOut(pos), true
			}
		}
	}
	n := uint64(v.Len())
	for range n {
		pos := int(rr.all % n)
		rr.all++
		if _, ok := v.Eligible(pos); ok {
			return HandOut(pos), true
		}
	}
	return Choice{}, false
}

func (*roundRobin) leases() bool { return false }

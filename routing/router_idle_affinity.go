package routing

// idleAffinity is /select's "idle_affinity": the oldest idle slot on the
// env worker's node, else the oldest idle slot anywhere. It is the seed's
// per-node idle deques, which the seed kept but stopped using.
type idleAffinity struct{}

var _ Selector = idleAffinity{}

func (idleAffinity) pick(c candidates, envNode string) (pick, bool) {
	var s *slot
	if envNode != "" {
		if nl := c.byNode[envNode]; nl != nil {
			s = c.filter.first(nl.head, nodeList)
		}
	}
	if s == nil {
		s = c.filter.first(c.global.head, globalList)
	}
	return pick{slot: s}, s != nil
}

func (idleAffinity) leases() bool { return true }

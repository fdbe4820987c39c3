package routing

// idleAffinity is /select's "idle_affinity": the oldest idle slot on the
// env worker's node, else the oldest idle slot anywhere. It is the seed's
// per-node idle deques, which the seed kept but stopped using.
type idleAffinity struct{}

var _ Selector = idleAffinity{}

func (idleAffinity) pick(l *ledger, envID string) (pick, bool) {
	var s *slot
	if node := l.snap.EnvNode(envID); node != "" {
		if nl := l.byNode[node]; nl != nil {
			s = nl.head
		}
	}
	if s == nil {
		s = l.global.head
	}
	return pick{slot: s}, s != nil
}

func (idleAffinity) leases() bool { return true }

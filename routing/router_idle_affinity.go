package routing

// idleAffinity is /select's "idle_affinity": the oldest idle slot on the
// env worker's node, else the oldest idle slot anywhere. It is the seed's
// per-node idle deques, which the seed kept but stopped using.
type idleAffinity struct{}

var _ Selector = idleAffinity{}

func (idleAffinity) pick(v View) (Choice, bool) {
	if node := v.EnvNode(); node != "" {
		if i, ok := v.Oldest(node); ok {
			return Lease(i), true
		}
	}
	i, ok := v.Oldest("")
	return Lease(i), ok
}

func (idleAffinity) leases() bool { return true }

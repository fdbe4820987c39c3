package routing

// idleDeque is /select's "simple": the oldest idle slot of one FIFO deque
// (the seed's SyncSimpleRouter). A selected slot is leased until released,
// seen idle by a probe (on_idle leases), or expired.
type idleDeque struct{}

var _ Selector = idleDeque{}

func (idleDeque) pick(v View) (Choice, bool) {
	i, ok := v.Oldest("")
	return Lease(i), ok
}

func (idleDeque) leases() bool { return true }

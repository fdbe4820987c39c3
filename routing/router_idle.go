package routing

// idleDeque is /select's "simple": the oldest idle slot of one FIFO deque
// (the seed's SyncSimpleRouter). A selected slot is leased until released,
// seen idle by a probe, or expired.
type idleDeque struct{}

var _ Selector = idleDeque{}

func (idleDeque) pick(c candidates, _ string) (pick, bool) {
	s := c.filter.first(c.global.head, globalList)
	return pick{slot: s}, s != nil
}

func (idleDeque) leases() bool { return true }

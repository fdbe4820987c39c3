package routing

// View is what a router sees of one decision, read-only: the env worker's
// node, the idle capacity that passes the decision's filters in the order
// it freed (the seed's deques), and the registered policies by position.
// It is valid only for the duration of the pick that received it, under
// the routing state's lock. A router answers with a Choice made from it;
// Select leases or hands out what it chose.
type View struct {
	envNode string
	snap    *Snapshot
	global  *slotList
	byNode  map[string]*slotList
	q       Query
}

// Idle is one idle unit of a policy's capacity, as a View yields it.
type Idle struct {
	Candidate
	s *slot
}

// Choice is a router's answer: an idle unit to lease, or a policy handed
// out without a lease (round robin).
type Choice struct {
	s   *slot
	pos int
}

// Lease chooses an idle unit: the decision leases it.
func Lease(i Idle) Choice { return Choice{s: i.s} }

// HandOut chooses the policy at pos without a lease.
func HandOut(pos int) Choice { return Choice{pos: pos} }

// EnvNode is the env worker's node, "" when its env id maps to none.
func (v *View) EnvNode() string { return v.envNode }

// Oldest returns the idle unit that freed first among the policies on node
// ("" for every node) that pass the filters: the head of the seed's deque.
func (v *View) Oldest(node string) (Idle, bool) {
	l, kind := v.global, globalList
	if node != "" {
		if l = v.byNode[node]; l == nil {
			return Idle{}, false
		}
		kind = nodeList
	}
	s := v.q.first(l.head, kind)
	if s == nil {
		return Idle{}, false
	}
	return Idle{Candidate{s.rt}, s}, true
}

// EachIdle calls yield with one idle unit of each policy that has one and
// passes the filters, in index order, until yield returns false.
func (v *View) EachIdle(yield func(Idle) bool) {
	for _, rt := range v.snap.rts {
		s := idleSlotLocked(rt)
		if s == nil || !v.q.ok(rt) {
			continue
		}
		if !yield(Idle{Candidate{rt}, s}) {
			return
		}
	}
}

// Len is the number of registered policies; positions are 0..Len()-1 in
// index order.
func (v *View) Len() int { return len(v.snap.rts) }

// Eval returns the positions of node's eval policies in topology order, and
// false when the topology gives the node none.
func (v *View) Eval(node string) ([]int, bool) {
	ps, ok := v.snap.evalPos[node]
	return ps, ok && node != ""
}

// Eligible returns the policy at pos and whether it may serve the
// decision: available and passing the filters, busy or not.
func (v *View) Eligible(pos int) (Candidate, bool) {
	rt := v.snap.rts[pos]
	return Candidate{rt}, rt.available() && v.q.ok(rt)
}

package routing

import (
	"time"

	"github.com/policyrouter/policyrouter/prefix"
)

// AssignRequest is one /assign call.
type AssignRequest struct {
	// Kind is the router; AssignLeastLoaded when nil.
	Kind     Assigner
	NumTasks int
	// Loads, when non-nil, is the seed's stateless mode: the caller's load
	// per policy index 0..len(Loads)-1. Nil means the tracked loads of the
	// registered policies, which the assignment then raises.
	Loads []int64
	// EnvIDs, when given, name one env id per task (node affinity).
	EnvIDs []string
	// MinVersion, when set, is the weight-version floor of this request
	// instead of the State's (SetMinVersion).
	MinVersion *int64
	// Sessions, when given, name one session key per task ("" for none):
	// the sticky stage homes those tasks before the router spreads the
	// others (see assignSessions).
	Sessions []string
	// LoadFactor is c of the homes' load bound; 0 means Options.LoadFactor.
	LoadFactor float64
	// TTL is how long the tracked tasks count in their policies' loads
	// unless completed first; 0 means Options.AssignTTL.
	TTL time.Duration
	// Prefix, when given, is the block hashes of the prompt the tasks
	// share: a tracked assignment keeps them together where it is cached
	// (assign_score.go).
	Prefix []prefix.Hash
}

// Assignment is the answer of Assign.
type Assignment struct {
	// Indices holds one policy index per task.
	Indices []int
	// Sticky says, per task, where the sticky stage sent it; nil when no
	// task named a session.
	Sticky []Sticky
	// Snapshot is the registration the answer was computed on, to resolve
	// indices to policies.
	Snapshot *Snapshot
}

// Assign spreads tasks over policies the way the seed's async routers do.
// Policies that fail the availability filter (unhealthy, draining, not yet
// heard from) are left out; with every policy
// available the answer is the seed's exactly. Registered policies are not
// needed in stateless mode: an index with no registration is routed to like
// the seed does. It returns ErrNoPolicies when no policy is registered (or
// current_loads is empty), ErrAllUnavailable when policies are but none is
// available, and an *InputError for bad input.
func (st *State) Assign(req AssignRequest) (Assignment, error) {
	if req.EnvIDs != nil && len(req.EnvIDs) != req.NumTasks {
		return Assignment{}, inputErr("env_ids", "has %d entries, num_tasks is %d", len(req.EnvIDs), req.NumTasks)
	}
	if req.Sessions != nil && len(req.Sessions) != req.NumTasks {
		return Assignment{}, inputErr("session_ids", "has %d entries, num_tasks is %d", len(req.Sessions), req.NumTasks)
	}
	snap := st.snap.Load()
	floor := st.minVersionOf(req.MinVersion)
	if req.Loads != nil {
		in, stale := stateless(snap, req.Loads, floor)
		if len(in.Indices) == 0 && stale > 0 {
			return Assignment{Snapshot: snap}, ErrNoFreshPolicy
		}
		if len(in.Indices) == 0 && len(req.Loads) > 0 {
			return Assignment{Snapshot: snap}, ErrAllUnavailable
		}
		out, sticky, err := st.assignSessions(snap, req, in, nil)
		if err != nil {
			return Assignment{Snapshot: snap}, err
		}
		for i, pos := range out {
			out[i] = in.Indices[pos]
		}
		return Assignment{Indices: out, Sticky: sticky, Snapshot: snap}, nil
	}

	if req.Sessions != nil {
		snap.rings() // built on first use: outside the lock
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	snap = st.ledger.snap // no removed policy gets load
	in, rts := st.assignBuf.reset()
	defer func() { st.assignBuf.keep(in, rts) }()
	n := len(snap.rts)
	stale := 0
	q := Query{floor: floor}
	for pos, rt := range snap.rts {
		switch {
		case !rt.available():
		case !rt.fresh(floor):
			stale++
		case q.ok(rt): // /select's filters, of which the floor's is one
			in.Indices = append(in.Indices, rt.policy.Index)
			in.Loads = append(in.Loads, min(max(rt.load, -MaxLoad), MaxLoad))
			in.Nodes = append(in.Nodes, snap.nodes[pos])
			rts = append(rts, rt)
		}
	}
	if len(in.Indices) == 0 && stale > 0 {
		return Assignment{Snapshot: snap}, ErrNoFreshPolicy
	}
	if len(in.Indices) == 0 && n > 0 {
		return Assignment{Snapshot: snap}, ErrAllUnavailable
	}
	out, sticky, err := st.assignSessions(snap, req, in, func(pos int) int64 { return int64(rts[pos].inflight) })
	if err != nil {
		return Assignment{}, err
	}
	if len(req.Prefix) > 0 || len(scorers) > 0 {
		var homed func(int) bool
		if req.Sessions != nil {
			homed = func(task int) bool { return req.Sessions[task] != "" }
		}
		st.assignScoreLocked(&q, req.Prefix, out, homed, rts, in.Loads)
	}
	ttl := req.TTL
	if ttl <= 0 {
		ttl = st.opts.AssignTTL
	}
	// Raise each chosen policy's load once by its number of tasks.
	counts := st.assignBuf.countsFor(len(rts))
	for i, pos := range out {
		counts[pos]++
		out[i] = in.Indices[pos]
	}
	for pos, c := range counts {
		if c > 0 {
			rt := rts[pos]
			rt.load = min(rt.load+c, MaxLoad)
			rt.assigned.Add(uint64(c))
			st.addBatchLocked(rt, c, ttl)
		}
	}
	return Assignment{Indices: out, Sticky: sticky, Snapshot: snap}, nil
}

// assignLists are a tracked Assign's candidate lists, kept between calls
// (under State.mu) so that an /assign of one task does not allocate five
// lists the size of the fleet. The routers only read them during the call.
type assignLists struct {
	in     AffinityInput
	rts    []*policyRuntime
	counts []int64
}

// reset returns the lists emptied. Caller must hold mu.
func (l *assignLists) reset() (AffinityInput, []*policyRuntime) {
	return AffinityInput{Indices: l.in.Indices[:0], Loads: l.in.Loads[:0], Nodes: l.in.Nodes[:0]}, l.rts[:0]
}

// keep stores the lists, grown, for the next call; it drops what they
// point to, so that removed policies are not kept alive. Caller must hold
// mu.
func (l *assignLists) keep(in AffinityInput, rts []*policyRuntime) {
	clear(in.Nodes)
	clear(rts)
	l.in, l.rts = AffinityInput{Indices: in.Indices, Loads: in.Loads, Nodes: in.Nodes}, rts
}

// countsFor returns n zero counts. Caller must hold mu.
func (l *assignLists) countsFor(n int) []int64 {
	if cap(l.counts) < n {
		l.counts = make([]int64, n)
	}
	l.counts = l.counts[:n]
	clear(l.counts)
	return l.counts
}

// stateless returns the candidates of a stateless assignment: every index
// of loads but those of registered policies that are unavailable or below
// the weight-version floor, and how many were left out for the floor
// alone. An index with no registration has no version and is kept.
func stateless(snap *Snapshot, loads []int64, floor int64) (in AffinityInput, stale int) {
	in = AffinityInput{Indices: make([]int, 0, len(loads)), Loads: make([]int64, 0, len(loads)), Nodes: make([]string, 0, len(loads))}
	for i, l := range loads {
		node := ""
		if pos, ok := snap.ByIndex(i); ok {
			rt := snap.rts[pos]
			if !rt.available() {
				continue
			}
			if !rt.fresh(floor) {
				stale++
				continue
			}
			node = snap.nodes[pos]
		}
		in.Indices = append(in.Indices, i)
		in.Loads = append(in.Loads, l)
		in.Nodes = append(in.Nodes, node)
	}
	return in, stale
}

// assignOver answers req over the candidates in, as positions in in.
func (st *State) assignOver(snap *Snapshot, req AssignRequest, in AffinityInput) ([]int, error) {
	r := req.Kind
	if r == nil {
		r = AssignLeastLoaded
	}
	in.EnvNode = snap.envNode
	return r.assign(in, req.NumTasks, req.EnvIDs)
}

// leastLoadedPositions is LeastLoaded: positions in loads are the seed's
// policy indices.
func leastLoadedPositions(loads []int64, n int) ([]int, error) {
	if err := checkAssignInput(loads, n); err != nil {
		return nil, err
	}
	s := getScratch(len(loads))
	defer putScratch(s)
	for pos, l := range loads {
		s.keys[pos] = packKey(l, pos)
	}
	return leastLoaded(s, make([]int, 0, n), s.keys, n), nil
}

package routing

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Errors returned by State. Handlers map them to HTTP statuses.
var (
	// ErrUnknownPolicy: no registered policy has the given id or index.
	ErrUnknownPolicy = errors.New("unknown policy")
	// ErrUnknownLease: the lease was never issued (or, for ReleaseIndex,
	// the policy has no lease out).
	ErrUnknownLease = errors.New("unknown lease")
	// ErrLeaseEnded: the lease was issued but is no longer out: released
	// already, freed by an idle probe, or its policy removed.
	ErrLeaseEnded = errors.New("lease already ended")
)

// Options configure a State. Zero fields take the defaults.
type Options struct {
	// Grace is how long after a selection an idle probe answer is not
	// trusted to free the selected policy: the work may not have reached it
	// yet. Default 250ms.
	Grace time.Duration
	// FailThreshold consecutive failed probes make a policy unhealthy.
	// Default 3.
	FailThreshold int
	// PassThreshold consecutive good probes make an unhealthy policy healthy
	// again. Default 2.
	PassThreshold int
	// Now is the clock; default time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Grace <= 0 {
		o.Grace = 250 * time.Millisecond
	}
	if o.FailThreshold <= 0 {
		o.FailThreshold = 3
	}
	if o.PassThreshold <= 0 {
		o.PassThreshold = 2
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// policyRuntime is the live state of one registered policy. It outlives
// snapshots: a re-registration that keeps the id and index keeps the
// runtime, its load, leases and counters.
type policyRuntime struct {
	// Guarded by State.mu.
	policy     Policy
	node       string
	slots      []*slot
	inflight   int
	load       int64
	failStreak int
	passStreak int
	removed    bool

	// Written under State.mu, read without it.
	healthy  atomic.Bool
	draining atomic.Bool

	// Counters for stats, updated without State.mu where possible.
	selected      atomic.Uint64
	assigned      atomic.Uint64
	completed     atomic.Uint64
	probes        atomic.Uint64
	probeFailures atomic.Uint64
	lastProbe     atomic.Int64 // unix nanoseconds the last probe was sent
	lastLatency   atomic.Int64 // nanoseconds
	lastIdle      atomic.Bool
}

// available is caddy's Available without the capacity part (capacity is in
// the slots): healthy and not draining.
func (r *policyRuntime) available() bool { return r.healthy.Load() && !r.draining.Load() }

// State is the live routing state: the current snapshot of policies and
// topology, tracked loads, idle deques, leases, round-robin counters and
// /select waiters. All methods are safe for concurrent use.
type State struct {
	opts Options
	snap atomic.Pointer[Snapshot]

	mu        sync.Mutex
	runtimes  map[string]*policyRuntime // by policy id
	global    slotList
	byNode    map[string]*slotList
	waiters   waiterList
	leases    map[uint64]*slot
	nextLease uint64
	rr        map[string]uint64 // per-node round-robin positions
	grr       uint64            // global round-robin position
}

// New returns a State with no policies and an empty topology.
func New(opts Options) *State {
	st := &State{
		opts:     opts.withDefaults(),
		runtimes: make(map[string]*policyRuntime),
		global:   slotList{kind: globalList},
		byNode:   make(map[string]*slotList),
		leases:   make(map[uint64]*slot),
		rr:       make(map[string]uint64),
	}
	empty, _ := newSnapshot(nil, Topology{})
	st.snap.Store(empty)
	return st
}

// Snapshot returns the current snapshot. It never returns nil.
func (st *State) Snapshot() *Snapshot { return st.snap.Load() }

// Check reports whether Update would accept policies and topo, without
// changing anything.
func (st *State) Check(policies []Policy, topo Topology) error {
	_, err := newSnapshot(policies, topo)
	return err
}

// Update replaces the registered policies and the topology at once. It
// returns an *InputError and changes nothing when they are invalid. Policies
// that keep their id and index keep their live state (load, leases, health,
// drain, counters); removed policies' leases end; new policies start healthy
// and idle, their capacity appended to the idle deques in index order.
func (st *State) Update(policies []Policy, topo Topology) error {
	snap, err := newSnapshot(policies, topo)
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()

	// Idle slots in deque order, to be put back in that order.
	var requeue []*slot
	for s := st.global.head; s != nil; s = s.links[globalList].next {
		requeue = append(requeue, s)
	}
	for _, s := range requeue {
		st.unlistLocked(s)
	}

	old := st.runtimes
	st.runtimes = make(map[string]*policyRuntime, len(snap.policies))
	snap.rts = make([]*policyRuntime, len(snap.policies))
	var fresh [][]*slot
	for pos, p := range snap.policies {
		rt := old[p.ID]
		if rt == nil || rt.policy.Index != p.Index {
			rt = &policyRuntime{}
			rt.healthy.Store(true)
		} else {
			delete(old, p.ID)
		}
		rt.policy = p
		rt.node = snap.nodes[pos]
		fresh = append(fresh, rt.resize(p.capacity()))
		st.runtimes[p.ID] = rt
		snap.rts[pos] = rt
	}
	for _, rt := range old {
		rt.removed = true
		for _, s := range rt.slots {
			if s.lease != 0 {
				delete(st.leases, s.lease)
			}
		}
		rt.slots = nil
	}
	st.byNode = make(map[string]*slotList)
	st.snap.Store(snap)

	for _, s := range requeue {
		if !s.retired && !s.rt.removed {
			st.freeLocked(s, false)
		}
	}
	// New capacity in rounds (every policy's first slot, then every second
	// slot, ...) so that capacity spreads work before doubling up.
	for round := 0; ; round++ {
		any := false
		for _, slots := range fresh {
			if round < len(slots) {
				st.freeLocked(slots[round], false)
				any = true
			}
		}
		if !any {
			break
		}
	}
	return nil
}

// resize sets the number of slots to n and returns the slots it created.
// Idle slots go first when shrinking; leased ones are retired and dropped
// when released. Caller must hold mu.
func (rt *policyRuntime) resize(n int) []*slot {
	var created []*slot
	for len(rt.slots) < n {
		s := &slot{rt: rt}
		rt.slots = append(rt.slots, s)
		created = append(created, s)
	}
	for len(rt.slots) > n {
		victim := len(rt.slots) - 1
		for i, s := range rt.slots {
			if s.lease == 0 {
				victim = i
				break
			}
		}
		rt.slots[victim].retired = true
		rt.slots = append(rt.slots[:victim], rt.slots[victim+1:]...)
	}
	return created
}

func (st *State) nodeListLocked(node string) *slotList {
	l := st.byNode[node]
	if l == nil {
		l = &slotList{kind: nodeList}
		st.byNode[node] = l
	}
	return l
}

func (st *State) unlistLocked(s *slot) {
	if !s.listed {
		return
	}
	st.global.remove(s)
	st.nodeListLocked(s.rt.node).remove(s)
	s.listed = false
}

// freeLocked makes a slot idle: handed straight to the oldest waiter if
// there is one, else put in the idle deques (at the back, or the front when
// front is set), or parked while its policy is unavailable. Caller must hold
// mu.
func (st *State) freeLocked(s *slot, front bool) {
	if s.lease != 0 {
		delete(st.leases, s.lease)
		s.lease = 0
		s.rt.inflight--
	}
	if s.retired || s.rt.removed || !s.rt.available() {
		return
	}
	if w := st.waiters.head; w != nil {
		st.waiters.remove(w)
		w.granted = s
		w.sel = st.leaseLocked(s)
		close(w.ch)
		return
	}
	nl := st.nodeListLocked(s.rt.node)
	if front {
		st.global.pushFront(s)
		nl.pushFront(s)
	} else {
		st.global.pushBack(s)
		nl.pushBack(s)
	}
	s.listed = true
}

// leaseLocked hands out an idle, unlisted slot. Caller must hold mu.
func (st *State) leaseLocked(s *slot) Selection {
	st.nextLease++
	s.lease = st.nextLease
	s.leasedAt = st.opts.Now()
	st.leases[s.lease] = s
	s.rt.inflight++
	s.rt.selected.Add(1)
	return Selection{Policy: s.rt.policy, Node: s.rt.node, Lease: s.lease}
}

// setAvailableLocked parks or unparks a policy's idle slots after its
// health or drain flag changed. Caller must hold mu.
func (st *State) setAvailableLocked(rt *policyRuntime) {
	for _, s := range rt.slots {
		if s.lease != 0 {
			continue
		}
		if rt.available() {
			if !s.listed {
				st.freeLocked(s, false)
			}
		} else {
			st.unlistLocked(s)
		}
	}
}

// SetDraining stops (or resumes) new work to the policy with the given id
// without removing it. Leases already out can still be released. It returns
// ErrUnknownPolicy for an unknown id.
func (st *State) SetDraining(id string, draining bool) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	rt := st.runtimes[id]
	if rt == nil {
		return ErrUnknownPolicy
	}
	if rt.draining.Swap(draining) != draining {
		st.setAvailableLocked(rt)
	}
	return nil
}

// Complete lowers the tracked load of the policy with the given index by
// count (not below zero), for work that /assign handed it and that has
// finished, and returns the new load. It returns ErrUnknownPolicy for an
// unknown index.
func (st *State) Complete(index int, count int64) (int64, error) {
	if count < 0 {
		return 0, inputErr("count", "must be >= 0")
	}
	snap := st.snap.Load()
	pos, ok := snap.ByIndex(index)
	if !ok {
		return 0, ErrUnknownPolicy
	}
	rt := snap.rts[pos]
	rt.completed.Add(uint64(count))
	st.mu.Lock()
	defer st.mu.Unlock()
	rt.load = max(rt.load-count, 0)
	return rt.load, nil
}

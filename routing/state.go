package routing

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/policyrouter/policyrouter/prefix"
)

// Errors returned by State. Handlers map them to HTTP statuses.
var (
	// ErrUnknownPolicy: no registered policy has the given id or index.
	ErrUnknownPolicy = errors.New("unknown policy")
	// ErrUnknownLease: the lease was never issued (or, for ReleaseIndex,
	// the policy has no lease out).
	ErrUnknownLease = errors.New("unknown lease")
	// ErrLeaseEnded: the lease was issued but is no longer out: released
	// already, freed by an idle probe, expired, or its policy removed.
	ErrLeaseEnded = errors.New("lease already ended")
	// ErrOverloaded: Select would have to wait, and Options.MaxWaiters
	// calls are waiting already.
	ErrOverloaded = errors.New("too many /select calls waiting")
	// ErrReset: Reset ended the wait of a Select (the router stopped
	// leading, or took over).
	ErrReset = errors.New("routing state reset while waiting")
	// ErrNoIdlePolicy: a Select's wait ran out with no idle policy (in a
	// *WaitError).
	ErrNoIdlePolicy = errors.New("no idle policy")
	// ErrShuttingDown: the Select's Stop channel closed while it waited.
	ErrShuttingDown = errors.New("shutting down")
)

// DefaultMaxWaiters is the default of Options.MaxWaiters.
const DefaultMaxWaiters = 10000

// Defaults of Options.
const (
	// DefaultGrace is longer than an env worker plausibly steps its
	// environment between a /select and its request.
	DefaultGrace         = 5 * time.Second
	DefaultFailThreshold = 3
	DefaultPassThreshold = 2
)

// Options configure a State. Zero fields take the defaults.
type Options struct {
	// Grace is how long after a hand-out an idle answer is not trusted to
	// free a lease that no probe has seen working: its work may not have
	// reached the policy yet. A lease seen working is freed by the next
	// idle answer whatever its age (settleLeasesLocked). Default
	// DefaultGrace.
	Grace time.Duration
	// FailThreshold consecutive failed probes make a policy unhealthy.
	// Default 3.
	FailThreshold int
	// PassThreshold consecutive good probes make an unhealthy policy healthy
	// again. Default 2.
	PassThreshold int
	// Polled says that a poller reports probes (ObserveProbe). A policy is
	// then unknown, and gets no work, from its registration (or the
	// router's start) until a probe answers. Without a poller policies are
	// trusted idle from registration and freed only by Release or expiry.
	Polled bool
	// LeaseTTL is the lifetime of a lease whose Select names none; 0 means
	// leases do not expire.
	LeaseTTL time.Duration
	// AssignTTL is how long tracked /assign tasks count in their policy's
	// load unless /complete reports them first, for an Assign that names
	// none; 0 means they count until completed (assign_ttl.go).
	AssignTTL time.Duration
	// MaxWaiters bounds the Select calls waiting at once for an idle
	// policy; one more gets ErrOverloaded at once. Each waiter holds a
	// goroutine and a connection. Default DefaultMaxWaiters.
	MaxWaiters int
	// LoadFactor is c of the sticky stage's load bound for requests that
	// name none; default DefaultLoadFactor.
	LoadFactor float64
	// Serves reports whether a policy's engine serves a route (e.g.
	// "/generate"), for requests that name one (SelectRequest.Route); nil
	// means every policy serves every route.
	Serves func(p *Policy, route string) bool
	// Now is the clock; default time.Now.
	Now func() time.Time
	// PrefixIndexTokens is each policy's budget in the prefix index, in
	// tokens, while its engine reports no KV size (--prefix-index-tokens);
	// 0 means prefix.DefaultPolicyTokens.
	PrefixIndexTokens int
}

func (o Options) withDefaults() Options {
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.FailThreshold <= 0 {
		o.FailThreshold = DefaultFailThreshold
	}
	if o.PassThreshold <= 0 {
		o.PassThreshold = DefaultPassThreshold
	}
	if o.LeaseTTL < 0 {
		o.LeaseTTL = 0
	}
	if o.MaxWaiters <= 0 {
		o.MaxWaiters = DefaultMaxWaiters
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LoadFactor < MinLoadFactor {
		o.LoadFactor = DefaultLoadFactor
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
	// busy is the policy's last answer: not idle (shown in stats; its
	// effect is in occ).
	busy bool
	// occ is what takes the policy's capacity besides its leases
	// (occupancy.go).
	occ occupancyState
	// lastError is why the last probe failed, kept while the policy fails
	// or is unhealthy; failingSince is when the current failure streak
	// began, unhealthySince when the one that made it unhealthy began
	// (zero while healthy), lastOK when the last good probe was sent.
	lastError      string
	failingSince   time.Time
	unhealthySince time.Time
	lastOK         time.Time
	// models are the model ids the engine last reported (Probe.Models).
	models []string
	// lastErrKind is the cause kind of lastError (errkind.go); "" for a
	// failure recorded without one.
	lastErrKind string

	// Written under State.mu, read without it.
	healthy  atomic.Bool
	draining atomic.Bool
	heard    atomic.Bool // a probe answered (always true without a poller)
	// paused and asleep are the engine's own states (Probe.Paused,
	// Probe.Asleep): out of routing, not failing.
	paused, asleep atomic.Bool
	// version is the policy's weight version: the registered one, then the
	// last one its /idle answers reported (a registration with a higher
	// version raises it).
	version atomic.Int64
	// reportsVersion is set once an /idle answer carried a version.
	reportsVersion atomic.Bool
	// hold is the policy's own weight-version floor: set for a policy
	// registered while a rolling update runs (SetJoinFloor), so that it gets
	// no work below the update's version. 0: none.
	hold atomic.Int64
	// weightVersion is the version string of the last answer that carried
	// one. Guarded by State.mu.
	weightVersion string

	// homeWaiters are /select callers that prefer this policy, their
	// session's home: a freed slot goes to them before the other waiters.
	homeWaiters waiterList
	// stickyIn is what the policy adds to the sticky rings' loads.
	stickyIn stickyContribution

	// batches are the tracked /assign tasks on the policy that expire,
	// oldest first (assign_ttl.go).
	batches []*assignBatch

	// Counters for stats, updated without State.mu where possible.
	selected      atomic.Uint64
	assigned      atomic.Uint64
	completed     atomic.Uint64
	expired       atomic.Uint64
	expiredTasks  atomic.Uint64
	probes        atomic.Uint64
	probeFailures atomic.Uint64
	lastProbe     atomic.Int64 // unix nanoseconds the last probe was sent
	lastLatency   atomic.Int64 // nanoseconds
	lastIdle      atomic.Bool
}

// available is the one availability filter every router applies: the
// policy is healthy, not draining, and has been heard from (caddy's
// Available, with capacity and the policy's busy answers kept in its slots).
func (r *policyRuntime) available() bool {
	return r.healthy.Load() && !r.draining.Load() && r.heard.Load() && !r.paused.Load() && !r.asleep.Load()
}

// ledger is the live routing state behind State.mu: what selectors read and
// change. Every field is guarded by State.mu.
type ledger struct {
	snap      *Snapshot // the published snapshot
	runtimes  map[string]*policyRuntime
	global    slotList
	byNode    map[string]*slotList
	waiters   waiterList
	leases    map[uint64]*slot
	nextLease uint64
	// stickyAll and stickyNode are the loads of the sticky rings of all
	// policies and of each node's (sticky.go).
	stickyAll  ringLoad
	stickyNode map[string]*ringLoad
	// stickyTracked is set by the first /select that names a session: the
	// ring loads are kept from then on.
	stickyTracked bool
	// firstProbe is closed, and replaced, whenever a policy gets its
	// first probe report.
	firstProbe chan struct{}
	// batches holds the expiring /assign batches by deadline; batchTimer
	// fires at the first.
	batches    batchHeap
	batchTimer *time.Timer
	// joinFloor is the hold of policies registered from now on
	// (SetJoinFloor); ended says how the leases that were not released
	// ended (lease_end.go).
	joinFloor int64
	ended     endedLeases
	// adopted maps the ids of the adopted leases out to their leases
	// (adopt.go).
	adopted map[string]uint64
}

// fresh reports whether the policy's version meets floor and its own hold.
func (r *policyRuntime) fresh(floor int64) bool {
	return r.version.Load() >= max(floor, r.hold.Load())
}

// State is the live routing state: the current snapshot of policies and
// topology, tracked loads, idle deques, leases, routers' own state and
// /select waiters. All methods are safe for concurrent use.
type State struct {
	opts  Options
	snap  atomic.Pointer[Snapshot]
	codec leaseCodec
	// floor is the weight-version floor of decisions whose request names
	// none (SetMinVersion): policies below it get no work.
	floor atomic.Int64
	// adoptedN is len(ledger.adopted), written under mu, read without it.
	adoptedN atomic.Int64
	sticky   stickyCounters
	endedN   endCounters
	// selectors maps each router of the table with state of its own to
	// this State's instance (Router.NewSelect). Read-only after New.
	selectors map[Selector]Selector
	// prefix is the score stage's index of what each policy's engine is
	// expected to cache (score_prefix.go); prefixN its counts.
	prefix  *prefix.Index
	prefixN prefixCounters
	// returns are the policies the router took out and expects back
	// (returning.go).
	returns returns

	mu sync.Mutex
	ledger
	assignBuf     assignLists   // guarded by mu
	prefixScratch prefixScratch // guarded by mu
}

// New returns a State with no policies and an empty topology.
func New(opts Options) *State {
	st := &State{
		opts:   opts.withDefaults(),
		codec:  newLeaseCodec(),
		prefix: prefix.NewIndex(prefix.Options{DefaultTokens: opts.PrefixIndexTokens}),
		ledger: ledger{
			runtimes:   make(map[string]*policyRuntime),
			global:     slotList{kind: globalList},
			waiters:    waiterList{kind: allWaiters},
			byNode:     make(map[string]*slotList),
			leases:     make(map[uint64]*slot),
			firstProbe: make(chan struct{}),
			stickyNode: make(map[string]*ringLoad),
		},
	}
	st.selectors = make(map[Selector]Selector)
	for _, r := range routers {
		if r.NewSelect != nil {
			st.selectors[r.Select] = r.NewSelect()
		}
	}
	empty, _ := newSnapshot(nil, Topology{})
	st.ledger.snap = empty
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
// drain, what they last answered, counters); removed policies' leases end;
// new policies start healthy with their capacity appended to the idle deques
// in index order, unknown (no work) until a probe answers when Options.Polled
// is set. Each policy's drain flag is set from Policy.Draining.
func (st *State) Update(policies []Policy, topo Topology) error {
	snap, err := newSnapshot(policies, topo)
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.updateLocked(snap, false)
	return nil
}

// Reset forgets what the router knew of every policy, as if it had just
// started: every lease ends, and every policy is unknown (no work) until
// a probe answers when Options.Polled is set. A replica that becomes the
// leader resets, so that it hands out no policy the old leader handed out
// until the policy itself says it is idle; one that stops leading resets
// so that it holds no leases.
func (st *State) Reset() {
	st.mu.Lock()
	defer st.mu.Unlock()
	// Under mu, so that no Update comes between reading the published
	// snapshot and replacing it. Resets are rare: the snapshot's rings are
	// built under the lock.
	prev := st.ledger.snap
	snap, err := newSnapshot(prev.policies, prev.topology)
	if err != nil {
		panic("routing: published snapshot rejected: " + err.Error())
	}
	st.updateLocked(snap, true)
}

// updateLocked publishes snap; with reset, no policy keeps its live state
// and every waiting Select ends with ErrReset. Caller must hold mu.
func (st *State) updateLocked(snap *Snapshot, reset bool) {
	if reset {
		st.endWaitersLocked()
	}

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
	var redrained []*policyRuntime
	for pos, p := range snap.policies {
		rt := old[p.ID]
		if rt == nil || rt.policy.Index != p.Index || reset {
			if rt != nil && rt.policy.Index != p.Index {
				st.prefix.Clear(p.ID) // another policy under the same id
			}
			rt = &policyRuntime{homeWaiters: waiterList{kind: homeWaiters}}
			rt.healthy.Store(true)
			// Nothing to probe without a URL: such a policy is taken as it is.
			rt.heard.Store(!st.opts.Polled || p.URL == "")
			rt.draining.Store(p.Draining)
			rt.version.Store(p.Version)
			if old[p.ID] == nil && !reset {
				rt.hold.Store(st.joinFloor) // registered while an update runs
			}
		} else {
			delete(old, p.ID)
			if rt.draining.Swap(p.Draining) != p.Draining {
				redrained = append(redrained, rt)
			}
			if p.Version > rt.version.Load() {
				rt.version.Store(p.Version)
				st.clearPrefixLocked(rt)
			}
		}
		rt.policy = p
		rt.node = snap.nodes[pos]
		fresh = append(fresh, rt.resize(p.capacity()))
		st.runtimes[p.ID] = rt
		snap.rts[pos] = rt
	}
	for _, rt := range old {
		rt.removed = true
		st.prefix.Remove(rt.policy.ID)
		for _, s := range rt.slots {
			if s.lease != 0 {
				st.endLeaseLocked(s, EndRemoved, false)
			}
		}
		rt.slots = nil
		st.stickyLoadLocked(rt)
	}
	// Leases out on retired slots (a capacity that shrank, an adoption
	// beyond capacity) are in no policy's slots.
	for _, s := range st.leases {
		if s.rt.removed {
			st.endLeaseLocked(s, EndRemoved, false)
		}
	}
	for _, rt := range snap.rts {
		st.stickyLoadLocked(rt)
	}
	st.byNode = make(map[string]*slotList)
	prev := st.ledger.snap
	st.ledger.snap = snap
	st.snap.Store(snap)
	close(prev.replaced)

	for _, s := range requeue {
		st.offerLocked(s, false)
	}
	for _, rt := range redrained {
		st.fitLocked(rt)
	}
	// New capacity in rounds (every policy's first slot, then every second
	// slot, ...) so that capacity spreads work before doubling up.
	for round := 0; ; round++ {
		any := false
		for _, slots := range fresh {
			if round < len(slots) {
				st.offerLocked(slots[round], false)
				any = true
			}
		}
		if !any {
			break
		}
	}
}

// endWaitersLocked ends every wait with ErrReset. Caller must hold mu.
func (st *State) endWaitersLocked() {
	for st.waiters.head != nil {
		w := st.waiters.head
		st.unwaitLocked(w)
		w.err = ErrReset
		close(w.ch)
	}
}

// unwaitLocked takes w out of the waiter lists. Caller must hold mu.
func (st *State) unwaitLocked(w *waiter) {
	st.waiters.remove(w)
	if w.home != nil {
		w.home.homeWaiters.remove(w)
		st.stickyLoadLocked(w.home)
	}
}

// resize sets the number of slots to n and returns the slots it created.
// Idle slots go first when shrinking; leased ones are retired and dropped
// when released. Caller must hold mu.
func (rt *policyRuntime) resize(n int) []*slot {
	var created []*slot
	for len(rt.slots) < n {
		s := &slot{rt: rt, initial: len(rt.slots) == 0}
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
	s.rt.occ.listed--
}

// endLeaseLocked ends the lease of a leased slot (released, freed by a
// probe, expired, aborted or its policy removed), and counts how.
// unfinished says that its work may still run (occupancy.go): its holder
// gave up on it, or no holder said. Caller must hold mu.
func (st *State) endLeaseLocked(s *slot, how EndHow, unfinished bool) {
	delete(st.leases, s.lease)
	st.forgetAdoptedLocked(s)
	if how != EndRelease {
		st.ended.add(s.lease, how)
	}
	st.endedN[how].Add(1)
	s.lease = 0
	now := st.opts.Now()
	subtract := !unfinished && how != EndProbe
	s.ended = lastEnd{at: now, leasedAt: s.leasedAt, subtract: subtract}
	s.rt.endedLocked(s.leasedAt, now, subtract, unfinished)
	if s.expiry != nil {
		s.expiry.Stop()
		s.expiry = nil
	}
}

// offerLocked makes an unleased, unlisted slot idle if its policy has
// room for it (occupancy.go): handed straight to the oldest waiter if
// there is one, else put in the idle deques (at the back, or the front
// when front is set). Otherwise the slot stays parked. Caller must hold
// mu.
func (st *State) offerLocked(s *slot, front bool) {
	if s.listed || s.lease != 0 || s.retired || s.rt.room() <= 0 {
		return
	}
	if w := st.waiterForLocked(s.rt); w != nil {
		st.unwaitLocked(w)
		w.granted = s
		w.sel = st.leaseLocked(s, w.ttl, w.mode)
		if len(w.hashes) > 0 {
			// Waiters are served in arrival order: the hand-off is not
			// scored, but its prefix is recorded and its match reported.
			outcome, confirmed := st.judgeLocked(s.rt, &w.q, w.hashes)
			st.notePrefixLocked(&w.sel, w.hashes, outcome, confirmed)
		}
		close(w.ch)
		return
	}
	nl := st.nodeListLocked(s.rt.node)
	switch {
	case front:
		st.global.pushFront(s)
		nl.pushFront(s)
	case s.initial:
		st.global.insertInitial(s)
		nl.insertInitial(s)
	default:
		st.global.pushBack(s)
		nl.pushBack(s)
	}
	s.listed = true
	s.rt.occ.listed++
}

// waiterForLocked returns the waiter a freed slot of rt goes to: the
// longest waiter whose home rt is; else the longest waiter not waiting for
// its home alone (a session within its sticky wait waits for its home, as
// it would for an idle slot elsewhere when it arrived), unless a younger
// one among the next prefixBypassScan holds a prompt rt has cached (the
// first block of its chain: the rest of a GRPO group, the next turn of an
// episode), which may go ahead of it, at most maxPrefixBypass times; each
// only if rt passes its filters. So no waiter starves for want of a
// cached prefix. nil when none. Caller must hold mu.
func (st *State) waiterForLocked(rt *policyRuntime) *waiter {
	for w := rt.homeWaiters.head; w != nil; w = w.links[homeWaiters].next {
		if w.q.ok(rt) {
			return w
		}
	}
	var first *waiter
	for w := st.waiters.head; w != nil; w = w.links[allWaiters].next {
		if !w.homeOnly && w.q.ok(rt) {
			first = w
			break
		}
	}
	if first == nil || first.bypassed >= maxPrefixBypass || (len(first.hashes) > 0 && st.holdsLocked(rt, first.hashes)) {
		return first
	}
	n := 0
	for w := first.links[allWaiters].next; w != nil && n < prefixBypassScan; w = w.links[allWaiters].next {
		n++
		if !w.homeOnly && len(w.hashes) > 0 && w.q.ok(rt) && st.holdsLocked(rt, w.hashes) {
			first.bypassed++
			return w
		}
	}
	return first
}

// The bound of the prefix bypass of waiterForLocked: how many younger
// waiters it looks at, and how many times the longest waiter may be
// passed over.
const (
	prefixBypassScan = 64
	maxPrefixBypass  = 16
)

// holdsLocked reports whether the prefix index holds the first block of
// hashes for rt, pending or confirmed. Caller must hold mu.
func (st *State) holdsLocked(rt *policyRuntime, hashes []prefix.Hash) bool {
	sc := &st.prefixScratch
	sc.ids = append(sc.ids[:0], rt.policy.ID)
	sc.matches = st.prefix.Match(hashes[:1], sc.ids, sc.matches)
	return sc.matches[0].Pending > 0
}

// releaseLocked ends a slot's lease and offers it; unfinished as for
// endLeaseLocked. Caller must hold mu.
func (st *State) releaseLocked(s *slot, how EndHow, unfinished bool) {
	st.endLeaseLocked(s, how, unfinished)
	st.offerLocked(s, false)
	if s.rt.room() > 0 {
		// The slot itself may be retired, or the end made more room than
		// one slot (a shrunk capacity): offer the others.
		st.fitLocked(s.rt)
	}
}

// leaseLocked hands out an idle, unlisted slot, for ttl when positive.
// Caller must hold mu.
func (st *State) leaseLocked(s *slot, ttl time.Duration, mode ReleaseMode) Decision {
	st.nextLease++
	lease := st.nextLease
	now := st.opts.Now()
	s.lease = lease
	s.leasedAt = now
	s.onIdle = mode == ReleaseOnIdle
	s.seenWorking = false
	s.initial = false
	st.leases[lease] = s
	s.rt.handedOutLocked(now)
	if ttl > 0 {
		s.expiry = time.AfterFunc(ttl, func() { st.expire(s, lease) })
	}
	d := st.handOutLocked(s.rt)
	d.Lease, d.LeaseID = lease, st.LeaseID(lease)
	return d
}

// expire ends lease, if it is still out on s, like a release.
func (st *State) expire(s *slot, lease uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if s.lease != lease {
		return
	}
	s.expiry = nil // fired: nothing to stop
	s.rt.expired.Add(1)
	st.releaseLocked(s, EndTTL, true) // the holder never said its work ended
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
		st.fitLocked(rt)
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
	completeBatchesLocked(rt, count)
	return rt.load, nil
}

// WaitProbed returns once every policy with one of the given ids that is
// still registered has had a probe reported (answered or failed), or when
// ctx is done (returning ctx.Err()). Registration calls it so that a
// trainer that registers and then routes at once finds its policies known.
func (st *State) WaitProbed(ctx context.Context, ids []string) error {
	for {
		st.mu.Lock()
		waiting := false
		for _, id := range ids {
			if rt := st.runtimes[id]; rt != nil && rt.probes.Load() == 0 && rt.policy.URL != "" {
				waiting = true
				break
			}
		}
		ch := st.firstProbe
		st.mu.Unlock()
		if !waiting {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// SetMinVersion sets the weight-version floor of every decision whose
// request names none: policies whose version is below it get no work from
// any router. 0 means no floor. Waiting requests that named none follow
// it at once: a lower floor hands them the idle slots it admits.
func (st *State) SetMinVersion(v int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if old := st.floor.Swap(max(v, 0)); v < old && st.waiters.len > 0 {
		for _, rt := range st.ledger.snap.rts {
			st.reofferLocked(rt)
		}
	}
}

// SetVersion records the weight version of the policy with the given id,
// for a policy whose /idle answers carry none (the rolling update that
// updated it knows it). It returns ErrUnknownPolicy for an unknown id.
func (st *State) SetVersion(id string, v int64) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	rt := st.runtimes[id]
	if rt == nil {
		return ErrUnknownPolicy
	}
	if rt.version.Swap(max(v, 0)) != max(v, 0) {
		st.clearPrefixLocked(rt)
	}
	return nil
}

// LeaseTTL returns the lifetime of leases whose Select names none
// (Options.LeaseTTL); 0 means they do not expire.
func (st *State) LeaseTTL() time.Duration { return st.opts.LeaseTTL }

// MinVersion returns the floor SetMinVersion set.
func (st *State) MinVersion() int64 { return st.floor.Load() }

// minVersionOf is a request's floor: its own when it names one, else the
// State's.
func (st *State) minVersionOf(v *int64) int64 {
	if v != nil {
		return max(*v, 0)
	}
	return st.floor.Load()
}

// Unprobed returns how many registered policies have had no probe reported
// yet (answered or failed), out of total. With Options.Polled, a router
// that has just started routes to none of them.
func (st *State) Unprobed() (n, total int) {
	snap := st.snap.Load()
	for pos, rt := range snap.rts {
		if rt.probes.Load() == 0 && snap.policies[pos].URL != "" {
			n++
		}
	}
	return n, len(snap.rts)
}

package routing

import (
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

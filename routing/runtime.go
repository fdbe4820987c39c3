package routing

import (
	"sync/atomic"
	"time"
)

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

// outState is the one judgement of availability: "" when the policy may
// get work (healthy, not draining, heard from, neither asleep nor paused:
// caddy's Available, with capacity and the policy's busy answers kept in
// its slots), else the first state of States that keeps it out. The
// deques (room), the waiters, /assign, the errors that explain a 503
// (availabilityLocked, waitErrorLocked) and /stats all read it. It reads
// atomics written under State.mu.
func (r *policyRuntime) outState() string {
	switch {
	case !r.healthy.Load():
		return StateUnhealthy
	case r.draining.Load():
		return StateDraining
	case !r.heard.Load():
		return StateUnknown
	case r.asleep.Load():
		return StateAsleep
	case r.paused.Load():
		return StatePaused
	}
	return ""
}

// available is the availability filter every router applies: outState
// keeps nothing out.
func (r *policyRuntime) available() bool { return r.outState() == "" }

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

package routing

import "time"

// Policy states as shown by Stats.
const (
	StateIdle      = "idle"
	StateBusy      = "busy"
	StateUnhealthy = "unhealthy"
	StateDraining  = "draining"
	// StateUnknown: not heard from since registration or the router's
	// start; it gets no work until a probe answers.
	StateUnknown = "unknown"
	// StateAsleep and StatePaused: the engine says it is asleep (weights
	// released) or paused; it gets no work until it says otherwise, and
	// is not failing.
	StateAsleep = "asleep"
	StatePaused = "paused"
)

// States lists every policy state, in the order Stats decides them.
var States = []string{StateUnhealthy, StateDraining, StateUnknown, StateAsleep, StatePaused, StateBusy, StateIdle}

// PolicyStats is the live state of one policy.
type PolicyStats struct {
	Policy   Policy
	Node     string
	State    string // one of States
	Load     int64  // tracked load
	Inflight int    // leases out (proxied requests in flight included)
	Capacity int
	// EngineLoad is the engine's own load as last reported and brought
	// forward (occupancy.go); EngineLoadKnown is false before any report.
	// OutsideLoad is the engine's load last seen with nothing out, and
	// Occupancy max(EngineLoad, OutsideLoad + Inflight).
	EngineLoad      int64
	EngineLoadKnown bool
	OutsideLoad     int64
	Occupancy       int64
	Selected        uint64 // hand-outs by /select
	Assigned        uint64 // tasks by /assign
	// Completed counts tasks reported done by /complete.
	Completed uint64
	// Expired counts leases ended by their TTL, ExpiredTasks /assign tasks
	// that expired before /complete reported them.
	Expired       uint64
	ExpiredTasks  uint64
	Probes        uint64
	ProbeFailures uint64
	// LastProbe is when the last probe was sent; zero if never.
	LastProbe   time.Time
	LastLatency time.Duration
	FailStreak  int
	// LastError is why the last probe failed, while the policy fails or is
	// unhealthy; "" otherwise.
	LastError string
	// LastErrorKind is the cause kind of LastError (Probe.ErrKind;
	// ErrKindOther when it was recorded without one); "" without one.
	LastErrorKind string
	// UnhealthySince is when the failures that made the policy unhealthy
	// began; zero while healthy. LastOK is when the last good probe was
	// sent; zero if none.
	UnhealthySince time.Time
	LastOK         time.Time
	// Version is the policy's weight version (registered, or reported by
	// its /idle answers; 0 when neither named one).
	Version int64
	// ReportsVersion is set once the policy's /idle answers carried a
	// version.
	ReportsVersion bool
	// WeightVersion is the version string the policy's server last
	// reported ("" before any): the engine's own form of Version.
	WeightVersion string
	LastIdle      bool
	Healthy       bool
	Draining      bool
	Heard         bool // a probe answered (always, without a poller)
	// Paused and Asleep are the engine's own states from its last answer.
	Paused, Asleep bool
	// Models are the model ids the policy serves: registered, else
	// reported by its engine; nil when neither is known (any model).
	Models []string
	// Available is the availability filter every router applies: healthy,
	// not draining, heard from. Callers outside routing ask it rather than
	// derive it.
	Available    bool
	ReportedBusy bool // the last answer was busy
	// Held: the policy joined during a rolling update and gets no work
	// until it reaches the update's version (State.Held).
	Held         bool
	IdleCapacity int // slots that could be selected now
}

// Stats is a consistent picture of the routing state.
type Stats struct {
	Policies []PolicyStats // index order
	Waiters  int           // /select callers waiting for an idle policy (or their session's home)
	Leases   int           // leases out
	Idle     int           // idle slots in the global deque
	// Sticky counts the requests and tasks that named a session.
	Sticky StickyStats
	// LeasesEnded counts the leases that ended, by how (EndHow's names).
	LeasesEnded map[string]uint64
	// OldestLease is the age of the oldest lease out, OldestTask of the
	// oldest tracked /assign task not completed nor expired (of those
	// that expire); zero when there is none.
	OldestLease, OldestTask time.Duration
}

// PolicyStats returns the live state of the policy with the given id, and
// false when no policy has it.
func (st *State) PolicyStats(id string) (PolicyStats, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	rt := st.runtimes[id]
	if rt == nil {
		return PolicyStats{}, false
	}
	return statsLocked(rt), true
}

// Stats returns the live state of every policy. It holds the state's lock
// for one pass over the policies, allocating one slice.
func (st *State) Stats() Stats {
	st.mu.Lock()
	defer st.mu.Unlock()
	snap := st.ledger.snap
	out := Stats{Policies: make([]PolicyStats, len(snap.rts))}
	out.Waiters = st.waiters.len
	out.Leases = len(st.leases)
	out.Idle = st.global.len
	out.Sticky = st.sticky.stats()
	out.LeasesEnded = st.LeasesEnded()
	out.OldestLease, out.OldestTask, _, _ = st.oldestAgesLocked(st.opts.Now())
	for i, rt := range snap.rts {
		ps := statsLocked(rt)
		out.Policies[i] = ps
	}
	return out
}

// statsLocked is the live state of one policy. Caller must hold State.mu.
func statsLocked(rt *policyRuntime) PolicyStats {
	ps := PolicyStats{
		Policy:         rt.policy,
		Node:           rt.node,
		Load:           rt.load,
		Inflight:       rt.inflight,
		EngineLoad:     rt.engineNow(),
		OutsideLoad:    rt.occ.outside,
		Occupancy:      rt.occupancy(),
		Capacity:       len(rt.slots),
		Selected:       rt.selected.Load(),
		Assigned:       rt.assigned.Load(),
		Completed:      rt.completed.Load(),
		Expired:        rt.expired.Load(),
		ExpiredTasks:   rt.expiredTasks.Load(),
		Probes:         rt.probes.Load(),
		ProbeFailures:  rt.probeFailures.Load(),
		LastLatency:    time.Duration(rt.lastLatency.Load()),
		FailStreak:     rt.failStreak,
		LastError:      rt.lastError,
		LastErrorKind:  errKindLocked(rt),
		UnhealthySince: rt.unhealthySince,
		LastOK:         rt.lastOK,
		Version:        rt.version.Load(),
		ReportsVersion: rt.reportsVersion.Load(),
		WeightVersion:  rt.weightVersion,
		LastIdle:       rt.lastIdle.Load(),
		Healthy:        rt.healthy.Load(),
		Draining:       rt.draining.Load(),
		Heard:          rt.heard.Load(),
		Paused:         rt.paused.Load(),
		Asleep:         rt.asleep.Load(),
		Models:         Candidate{rt}.Models(),
		Available:      rt.available(),
		ReportedBusy:   rt.busy,
	}
	_, ps.Held = rt.held()
	ps.EngineLoadKnown = rt.occ.engineKnown
	if ns := rt.lastProbe.Load(); ns != 0 {
		ps.LastProbe = time.Unix(0, ns)
	}
	for _, s := range rt.slots {
		if s.listed {
			ps.IdleCapacity++
		}
	}
	switch ps.State = rt.outState(); {
	case ps.State != "":
	case ps.IdleCapacity == 0:
		ps.State = StateBusy
	default:
		ps.State = StateIdle
	}
	return ps
}

package routing

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Probe is the outcome of one GET {url}/idle. The poller sends probes and
// reports them here; the routing state decides what they mean.
type Probe struct {
	// SentAt is when the probe was sent (not when the answer came).
	SentAt time.Time
	// Latency is how long the answer took.
	Latency time.Duration
	// OK is false for a failed probe: transport error, timeout, non-2xx or
	// an unreadable body.
	OK bool
	// Idle is the policy's answer when OK.
	Idle bool
	// Load, when HasLoad, is the policy's own load figure; it replaces the
	// tracked estimate.
	Load    int64
	HasLoad bool
	// Version, when HasVersion, is the policy's weight version.
	Version    int64
	HasVersion bool
	// WeightVersion is the version as the policy's server wrote it (an
	// engine's string such as "step-42"), shown beside Version; kept only
	// when HasVersion.
	WeightVersion string
	// Paused and Asleep, on a good probe, say that the engine is paused
	// (generation stopped by someone, outside any update of ours) or asleep
	// (its weights released, e.g. while a colocated trainer steps). Either
	// takes the policy out of routing until an answer says otherwise; it is
	// a state, not a failure: no failure streak, no last error.
	Paused, Asleep bool
	// Models, when HasModels, are the model ids the engine says it serves
	// (GET /v1/models); a policy registered with models keeps those.
	Models    []string
	HasModels bool
	// KVTokens, when positive, is the engine's KV cache size in tokens:
	// the policy's budget in the prefix index.
	KVTokens int64
	// Err says why a failed probe failed (shown as the policy's last
	// error); it must not hold secrets such as a URL's password.
	Err string
	// ErrKind is the cause kind of a failed probe: one of the ErrKind
	// constants (errkind.go), or ErrKindStatus of a non-2xx answer.
	ErrKind string
}

// Transition is a change of a policy's health caused by a probe.
type Transition int

// Transitions returned by ObserveProbe.
const (
	NoTransition Transition = iota
	BecameUnhealthy
	BecameHealthy
)

// ObserveProbe records a probe of the policy with the given id and returns
// the health transition it caused, if any, so that the caller logs each
// transition once. The policy's answers are the truth the routers act on:
//   - FailThreshold failures in a row make a policy unhealthy (it gets no
//     work from any router); PassThreshold passes in a row make it healthy
//     again.
//   - The first answer makes a policy known (Options.Polled): until then it
//     gets no work.
//   - A good answer's load (its capacity when it answered busy) counts
//     against the policy's capacity (occupancy.go): the policy is handed
//     out only while max(engine load, outside load + leases) is below it.
//   - An idle answer ends those of the policy's on_idle leases whose work it
//     proves finished (settleLeasesLocked). It never ends an explicit lease.
//
// Probes of unknown (e.g. just deleted) policies are ignored.
func (st *State) ObserveProbe(id string, p Probe) Transition {
	st.mu.Lock()
	defer st.mu.Unlock()
	rt := st.runtimes[id]
	if rt == nil {
		return NoTransition
	}
	if rt.probes.Add(1) == 1 {
		// First news of this policy: wake WaitProbed callers.
		close(st.firstProbe)
		st.firstProbe = make(chan struct{})
	}
	rt.lastProbe.Store(p.SentAt.UnixNano())
	rt.lastLatency.Store(int64(p.Latency))
	if !p.OK {
		rt.probeFailures.Add(1)
		return st.failLocked(rt, p.SentAt, p.Err, p.ErrKind)
	}

	rt.lastOK = p.SentAt
	rt.failStreak = 0
	rt.passStreak++
	rt.lastIdle.Store(p.Idle)
	rt.busy = !p.Idle
	rt.paused.Store(p.Paused)
	if wasAsleep := rt.asleep.Swap(p.Asleep); wasAsleep && !p.Asleep {
		// Awake: back from a sleep the router made; an abort from now on
		// is not the sleep's.
		st.ExpectReturn(time.Time{}, rt.policy.ID)
	} else if !wasAsleep && p.Asleep {
		st.clearPrefixLocked(rt) // its memory, KV cache included, is released
	}
	if p.HasModels {
		rt.models = p.Models
	}
	if p.KVTokens > 0 {
		st.prefix.SetCapacity(rt.policy.ID, int(min(p.KVTokens, math.MaxInt32)))
	}
	if p.HasLoad {
		rt.load = min(max(p.Load, 0), MaxLoad)
	}
	if p.HasVersion {
		rt.reportsVersion.Store(true)
		rt.weightVersion = p.WeightVersion
		old := rt.version.Swap(max(p.Version, 0))
		if old != max(p.Version, 0) {
			st.clearPrefixLocked(rt) // new weights: the cache computed with the old ones is no use
		}
		if p.Version > old && st.waiters.len > 0 {
			// Waiters with a floor the old version missed may take its
			// idle slots now.
			st.reofferLocked(rt)
		}
	}
	tr := NoTransition
	if !rt.healthy.Load() && rt.passStreak >= st.opts.PassThreshold {
		rt.healthy.Store(true)
		rt.unhealthySince = time.Time{}
		tr = BecameHealthy
		// Down for FailThreshold probes and back: most likely restarted,
		// with an empty cache.
		st.clearPrefixLocked(rt)
	}
	if rt.healthy.Load() {
		rt.lastError = ""
	}
	rt.heard.Store(true)
	st.settleLeasesLocked(rt, p)
	st.observeEngineLocked(rt, p)
	st.fitLocked(rt)
	return tr
}

// reofferLocked offers rt's idle slots again, to waiters first: after a
// change that may let a waiter take what it could not (a higher version,
// a lower floor, a lifted hold). Caller must hold State.mu.
func (st *State) reofferLocked(rt *policyRuntime) {
	for _, s := range rt.slots {
		if s.listed {
			st.unlistLocked(s)
			st.offerLocked(s, false)
		}
	}
}

// settleLeasesLocked applies a good probe to rt's on_idle leases. An idle
// answer must never free a lease whose work has not started yet: the env
// worker may step its environment for seconds between the hand-out and
// its request. So the rule is:
//
//   - A lease is seen working once a probe sent after its hand-out finds
//     the policy busy (or, when the answer carries a load, counts it among
//     the running requests: the oldest leases are counted first).
//   - An idle answer frees, among the on_idle leases handed out before it
//     was sent, those seen working by an earlier probe (their work began
//     and is over) and those never seen working that were handed out at
//     least Options.Grace before it was sent (work too short for the
//     poller to see, or never sent: the seed adapter, which never
//     releases, gets its policies back this way).
//   - With a load figure, an idle answer frees no more leases than exceed
//     the load (counting every lease out, explicit ones too), oldest first:
//     a batching policy that is idle below its capacity still runs load
//     requests, which hold their leases.
//
// Explicit leases are never freed here: their holder says when.
// Caller must hold State.mu.
func (st *State) settleLeasesLocked(rt *policyRuntime, p Probe) {
	var buf [8]*slot
	before := buf[:0] // leases handed out before the probe was sent, oldest first
	onIdle := false
	for _, s := range rt.slots {
		if s.lease != 0 && s.leasedAt.Before(p.SentAt) {
			before = append(before, s)
			onIdle = onIdle || s.onIdle
		}
	}
	if !onIdle {
		return
	}
	slices.SortFunc(before, func(a, b *slot) int { return cmp.Compare(a.lease, b.lease) })
	running := len(before)
	switch {
	case p.HasLoad:
		running = int(min(max(p.Load, 0), int64(len(before))))
	case p.Idle:
		running = 0
	}
	if p.Idle {
		cutoff := p.SentAt.Add(-st.opts.Grace)
		excess := len(before) - running
		kept := before[:0]
		for _, s := range before {
			if excess > 0 && s.onIdle && (s.seenWorking || !s.leasedAt.After(cutoff)) {
				excess--
				st.endLeaseLocked(s, EndProbe, false)
				continue
			}
			kept = append(kept, s)
		}
		before = kept
	}
	for i, s := range before {
		if i < running {
			s.seenWorking = true
		}
	}
}

// ObserveFailure records a failure of the policy with the given id seen
// outside the probes (a proxied request that could not connect, or whose
// answer broke off), at the time it began: it counts toward
// FailThreshold like a failed probe, and a good probe still restores the
// policy. It returns the health transition, if any.
func (st *State) ObserveFailure(id string, at time.Time, reason string) Transition {
	st.mu.Lock()
	defer st.mu.Unlock()
	rt := st.runtimes[id]
	if rt == nil {
		return NoTransition
	}
	return st.failLocked(rt, at, reason, "")
}

// failLocked counts one failure of rt that began at. Caller must hold
// State.mu.
func (st *State) failLocked(rt *policyRuntime, at time.Time, reason, kind string) Transition {
	rt.passStreak = 0
	if rt.failStreak == 0 {
		rt.failingSince = at
	}
	rt.failStreak++
	rt.lastError, rt.lastErrKind = reason, kind
	if rt.lastError == "" {
		rt.lastError = "probe failed"
	}
	if rt.failStreak >= st.opts.FailThreshold && rt.healthy.Load() {
		rt.healthy.Store(false)
		rt.unhealthySince = rt.failingSince
		st.fitLocked(rt)
		return BecameUnhealthy
	}
	return NoTransition
}

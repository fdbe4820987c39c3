package routing

import (
	"context"
	"time"
)

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

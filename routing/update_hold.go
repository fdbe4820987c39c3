package routing

import "fmt"

// What a rolling weight update asks of the routing state: that its
// engines' aborts end their leases at once, and that policies registered
// while it runs get no work until they are at its version.

// ErrLeaseAborted: the lease was ended by AbortLeases (its policy's engine
// aborted the work in flight for a weight update). It is an ErrLeaseEnded.
var ErrLeaseAborted = fmt.Errorf("%w: aborted by a weight update", ErrLeaseEnded)

// AbortLeases ends every lease out on the policy with the given id at once,
// as its engine aborts the requests in flight; a later Release of one of
// them returns ErrLeaseAborted. The policy's slots are offered again if it
// is available. It returns how many leases ended, and ErrUnknownPolicy for
// an unknown id.
func (st *State) AbortLeases(id string) (int, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	rt := st.runtimes[id]
	if rt == nil {
		return 0, ErrUnknownPolicy
	}
	n := 0
	for _, s := range rt.slots {
		if s.lease == 0 {
			continue
		}
		st.releaseLocked(s, EndAborted, false) // the engine aborted the work
		n++
	}
	return n, nil
}

// SetJoinFloor makes every policy registered from now on (a new id) get no
// work until its version reaches v, whatever the request's floor: a rolling
// update to v sets it when it starts. SetJoinFloor(0) ends that, and lifts
// the hold of every policy registered meanwhile (the update ended).
func (st *State) SetJoinFloor(v int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.joinFloor = max(v, 0)
	if v > 0 {
		return
	}
	for _, rt := range st.runtimes {
		if rt.hold.Swap(0) != 0 {
			st.reofferLocked(rt) // its idle slots may serve waiters now
		}
	}
}

// Hold holds the policy with the given id below version v, as
// SetJoinFloor holds the policies registered during an update: a new
// leader restores the holds of the update it continues. SetJoinFloor(0)
// lifts it. It returns ErrUnknownPolicy for an unknown id.
func (st *State) Hold(id string, v int64) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	rt := st.runtimes[id]
	if rt == nil {
		return ErrUnknownPolicy
	}
	rt.hold.Store(max(v, 0))
	return nil
}

// Held reports whether the policy with the given id is held below a
// rolling update's version (SetJoinFloor) and the version it must reach.
func (st *State) Held(id string) (int64, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	rt := st.runtimes[id]
	if rt == nil {
		return 0, false
	}
	return rt.held()
}

// held is the hold of Held: the version rt must reach, and whether it is
// below it.
func (rt *policyRuntime) held() (int64, bool) {
	h := rt.hold.Load()
	return h, h > 0 && rt.version.Load() < h
}

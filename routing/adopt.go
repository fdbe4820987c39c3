package routing

import (
	"errors"
	"time"
)

// Adoption: a lease another router handed out, whose work still runs, is
// taken over by this one. Replicas of one router on a shared store proxy
// generate traffic each, under leases the leader hands out; when the
// leader changes, the new leader starts from nothing (Reset), and the
// replicas whose requests are still streaming hand their leases to it so
// that it counts them against its policies' capacity. An adopted lease is
// an explicit lease like any other (it ends by Release, its TTL or its
// policy's removal) but keeps the id its first router gave it, and names
// its holder.

// ErrAdoptConflict: Adopt was given a lease id that is out already with
// another holder or policy.
var ErrAdoptConflict = errors.New("lease id already adopted for another holder or policy")

// AdoptRequest is a lease handed out by another router.
type AdoptRequest struct {
	// ID is the lease id the other router issued; Release and
	// ParseLeaseID know the lease by it from now on.
	ID string
	// Holder names who holds the lease (a replica's advertise URL).
	Holder string
	// PolicyID is the policy the lease is on.
	PolicyID string
	// TTL, when positive, ends the lease as a /select lease's does.
	TTL time.Duration
}

// Adopt counts a lease another router handed out against its policy's
// occupancy, under the lease's own id, until it is released: the work it
// stands for is running, so it takes a slot whatever the policy's
// availability, and, when every slot is out already (this router handed
// them out before the holder came back), one beyond the policy's
// capacity, so that nothing more goes there until enough leases end.
//
// Adopting an id that is out already (adopted for the same holder, or
// one of this router's own leases) on the same policy returns that lease:
// a holder retries after a lost answer, or comes back to a leader it
// took for gone. Errors: an *InputError for an empty ID, Holder or
// PolicyID; ErrUnknownPolicy; ErrAdoptConflict for an id out with
// another holder or on another policy.
func (st *State) Adopt(req AdoptRequest) (Decision, error) {
	switch {
	case req.ID == "":
		return Decision{}, inputErr("lease_id", "must not be empty")
	case req.Holder == "":
		return Decision{}, inputErr("holder", "must not be empty")
	case req.PolicyID == "":
		return Decision{}, inputErr("policy_id", "must not be empty")
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if lease, ok := st.parseLeaseIDLocked(req.ID); ok {
		if s := st.leases[lease]; s != nil {
			// Out already: adopted before (the holder retries after a lost
			// answer), or one of this router's own.
			if s.holder != req.Holder && s.adoptedID != "" || s.rt.policy.ID != req.PolicyID {
				return Decision{}, ErrAdoptConflict
			}
			return Decision{Policy: s.rt.policy, Node: s.rt.node, Version: s.rt.version.Load(), WeightLabel: s.rt.weightVersion, Lease: lease, LeaseID: req.ID}, nil
		}
	}
	rt := st.runtimes[req.PolicyID]
	if rt == nil || rt.removed {
		return Decision{}, ErrUnknownPolicy
	}
	s := freeSlot(rt)
	if s == nil {
		// Beyond capacity: retired, so that it is dropped when released.
		s = &slot{rt: rt, retired: true}
	}
	st.unlistLocked(s)
	d := st.leaseLocked(s, req.TTL, ReleaseExplicit)
	rt.selected.Add(^uint64(0)) // not a decision of this router's
	s.holder, s.adoptedID = req.Holder, req.ID
	if st.adopted == nil {
		st.adopted = make(map[string]uint64)
	}
	st.adopted[req.ID] = d.Lease
	st.adoptedN.Store(int64(len(st.adopted)))
	// The lease may have taken a listed slot or gone beyond capacity:
	// bring the idle slots to the room left.
	st.fitLocked(rt)
	d.LeaseID = req.ID
	return d, nil
}

// freeSlot returns an unleased slot of rt, preferring one that is not in
// the idle deques; nil when every slot is out. Caller must hold
// State.mu.
func freeSlot(rt *policyRuntime) *slot {
	var listed *slot
	for _, s := range rt.slots {
		switch {
		case s.lease != 0 || s.retired:
		case !s.listed:
			return s
		case listed == nil:
			listed = s
		}
	}
	return listed
}

// forgetAdoptedLocked drops the id of an adopted lease that ended on s.
// Caller must hold State.mu.
func (st *State) forgetAdoptedLocked(s *slot) {
	if s.adoptedID != "" {
		delete(st.adopted, s.adoptedID)
		st.adoptedN.Store(int64(len(st.adopted)))
		s.adoptedID, s.holder = "", ""
	}
}

package routing

import (
	"errors"
	"sync/atomic"
)

// ReleaseMode says what may end a /select lease besides its TTL and its
// policy's removal.
type ReleaseMode uint8

// Release modes of SelectRequest.Release.
const (
	// ReleaseExplicit (the default): only the holder ends the lease
	// (Release). No probe does, whatever the engine answers: an engine's
	// count cannot say which lease is done.
	ReleaseExplicit ReleaseMode = iota
	// ReleaseOnIdle is the seed's contract, for clients that never
	// release: an idle answer ends the lease once a probe saw it working,
	// or past Options.Grace after the hand-out (settleLeasesLocked).
	ReleaseOnIdle
)

// Wire names of the release modes.
const (
	ReleaseExplicitName = "explicit"
	ReleaseOnIdleName   = "on_idle"
)

// ReleaseModeNames lists the wire names, the default first.
var ReleaseModeNames = []string{ReleaseExplicitName, ReleaseOnIdleName}

// ParseReleaseMode returns the mode of a wire name ("" is the default), or
// an *InputError naming field.
func ParseReleaseMode(field, name string) (ReleaseMode, error) {
	switch name {
	case "", ReleaseExplicitName:
		return ReleaseExplicit, nil
	case ReleaseOnIdleName:
		return ReleaseOnIdle, nil
	}
	return 0, inputErr(field, "must be %s", NameList(ReleaseModeNames))
}

// EndHow is how a lease ended.
type EndHow uint8

// How leases end. Their String is the label of the leases-ended metric.
const (
	EndRelease EndHow = iota // its holder released it
	EndTTL                   // its TTL ran out
	EndProbe                 // an idle answer ended an on_idle lease
	EndRemoved               // its policy was removed (or the state reset)
	EndAborted               // a weight update's abort ended its work
	numEndHows
)

var endHowNames = [numEndHows]string{"release", "ttl", "probe", "removed", "aborted"}

func (h EndHow) String() string { return endHowNames[h] }

// EndHows lists every EndHow, in metric label order.
func EndHows() []EndHow { return []EndHow{EndRelease, EndTTL, EndProbe, EndRemoved, EndAborted} }

// LeaseEndedError is Release's answer for a lease that had ended already:
// it says how. It is an ErrLeaseEnded; one AbortLeases ended is also an
// ErrLeaseAborted.
type LeaseEndedError struct{ How EndHow }

func (e *LeaseEndedError) Error() string { return "lease already ended (" + e.How.String() + ")" }

// Is makes a LeaseEndedError an ErrLeaseEnded, and an aborted one an
// ErrLeaseAborted.
func (e *LeaseEndedError) Is(target error) bool {
	return target == ErrLeaseEnded || (target == ErrLeaseAborted && e.How == EndAborted)
}

// HowEnded returns how a lease Release found ended, when err says so.
func HowEnded(err error) (EndHow, bool) {
	var le *LeaseEndedError
	if errors.As(err, &le) {
		return le.How, true
	}
	return 0, false
}

// maxEndedLeases bounds how many ended leases are remembered with how they
// ended; older ones then read as released.
const maxEndedLeases = 1 << 16

// endedLeases remembers how the leases that did not end by Release ended
// (released ones are the rule and are not stored: the hot path stays free
// of map writes), the oldest forgotten first. Guarded by State.mu.
type endedLeases struct {
	how   map[uint64]EndHow
	order []uint64
}

func (e *endedLeases) add(lease uint64, how EndHow) {
	if e.how == nil {
		e.how = make(map[uint64]EndHow)
	}
	if len(e.order) >= maxEndedLeases {
		delete(e.how, e.order[0])
		e.order = e.order[1:]
	}
	e.how[lease] = how
	e.order = append(e.order, lease)
}

// of returns how a lease that is no longer out ended.
func (e *endedLeases) of(lease uint64) EndHow {
	if how, ok := e.how[lease]; ok {
		return how
	}
	return EndRelease
}

// endCounters count the leases ended, by how. Updated under State.mu,
// read without it.
type endCounters [numEndHows]atomic.Uint64

// LeasesEnded returns how many leases ended, by how.
func (st *State) LeasesEnded() map[string]uint64 {
	out := make(map[string]uint64, numEndHows)
	for h := range numEndHows {
		out[h.String()] = st.endedN[h].Load()
	}
	return out
}

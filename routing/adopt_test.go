package routing

import (
	"errors"
	"testing"

	"github.com/policyrouter/policyrouter/internal/fakeclock"
)

const foreignID = "0190f5c2-7a3b-8c4d-9e5f-0123456789ab" // another router's lease id

func mustAdopt(tb testing.TB, st *State, req AdoptRequest) Decision {
	tb.Helper()
	d, err := st.Adopt(req)
	if err != nil {
		tb.Fatalf("Adopt(%+v): %v", req, err)
	}
	return d
}

// An adopted lease takes its policy's slot until it is released by its
// own id, like a lease this router handed out.
func TestAdoptCountsAgainstCapacity(t *testing.T) {
	st := newState(t, Options{}, densePolicies(2), Topology{})
	d := mustAdopt(t, st, AdoptRequest{ID: foreignID, Holder: "http://replica-b", PolicyID: "p1"})
	if d.Policy.ID != "p1" || d.LeaseID != foreignID || d.Lease == 0 {
		t.Fatalf("Adopt = %+v; want policy p1 under lease id %s", d, foreignID)
	}
	if got := policyStats(t, st, 1); got.Occupancy != 1 || got.Inflight != 1 {
		t.Errorf("p1 occupancy %d, leases %d; want 1, 1", got.Occupancy, got.Inflight)
	}
	// Only p0 is left.
	if got := mustSelect(t, st, SelectIdle, ""); got.Policy.ID != "p0" {
		t.Fatalf("Select = %s; want p0, p1 being adopted", got.Policy.ID)
	}
	wantNoIdle(t, st, SelectIdle, "")

	lease, ok := st.ParseLeaseID(foreignID)
	if !ok || lease != d.Lease {
		t.Fatalf("ParseLeaseID(adopted id) = %d, %t; want %d, true", lease, ok, d.Lease)
	}
	mustRelease(t, st, lease)
	if got := mustSelect(t, st, SelectIdle, ""); got.Policy.ID != "p1" {
		t.Fatalf("Select after the release = %s; want p1", got.Policy.ID)
	}
	if _, ok := st.ParseLeaseID(foreignID); ok {
		t.Error("an adopted lease's id is still known after its release")
	}
}

// A new leader adopts before it has heard from the policy: the adopted
// lease's slot is not handed out when the first probe says idle.
func TestAdoptBeforeFirstProbe(t *testing.T) {
	clock := fakeclock.New()
	st := newState(t, Options{Now: clock.Now, Polled: true}, densePolicies(1), Topology{})
	mustAdopt(t, st, AdoptRequest{ID: foreignID, Holder: "h", PolicyID: "p0"})
	clock.Advance(DefaultGrace)
	st.ObserveProbe("p0", Probe{SentAt: clock.Now(), OK: true, Idle: true})
	wantNoIdle(t, st, SelectIdle, "")
}

// Every slot out already: the adopted lease goes beyond capacity, and
// the policy takes nothing more until the leases are back below it.
func TestAdoptBeyondCapacity(t *testing.T) {
	st := newState(t, Options{}, withCapacity(densePolicies(1), 2), Topology{})
	a := mustSelect(t, st, SelectIdle, "")
	b := mustSelect(t, st, SelectIdle, "")
	adopted := mustAdopt(t, st, AdoptRequest{ID: foreignID, Holder: "h", PolicyID: "p0"})
	if got := policyStats(t, st, 0); got.Occupancy != 3 {
		t.Fatalf("occupancy %d; want 3 (2 leases and the adopted one)", got.Occupancy)
	}
	mustRelease(t, st, a.Lease)
	wantNoIdle(t, st, SelectIdle, "") // 2 out of 2 still
	mustRelease(t, st, adopted.Lease)
	mustSelect(t, st, SelectIdle, "")
	wantNoIdle(t, st, SelectIdle, "")
	mustRelease(t, st, b.Lease)
	if got := policyStats(t, st, 0); got.Occupancy != 1 || got.Inflight != 1 {
		t.Errorf("after the releases: occupancy %d, leases %d; want 1, 1", got.Occupancy, got.Inflight)
	}
}

func TestAdoptAgain(t *testing.T) {
	st := newState(t, Options{}, densePolicies(2), Topology{})
	req := AdoptRequest{ID: foreignID, Holder: "h", PolicyID: "p0"}
	first := mustAdopt(t, st, req)
	again := mustAdopt(t, st, req)
	if again.Lease != first.Lease || again.LeaseID != foreignID {
		t.Errorf("adopting again = lease %d %q; want the same lease %d", again.Lease, again.LeaseID, first.Lease)
	}
	if got := policyStats(t, st, 0); got.Inflight != 1 {
		t.Errorf("leases %d after adopting twice; want 1", got.Inflight)
	}
	for _, bad := range []AdoptRequest{
		{ID: foreignID, Holder: "other", PolicyID: "p0"},
		{ID: foreignID, Holder: "h", PolicyID: "p1"},
	} {
		if _, err := st.Adopt(bad); !errors.Is(err, ErrAdoptConflict) {
			t.Errorf("Adopt(%+v) = %v; want ErrAdoptConflict", bad, err)
		}
	}

	// One of this router's own leases, handed back to it: the same lease.
	own := mustSelect(t, st, SelectIdle, "")
	back := mustAdopt(t, st, AdoptRequest{ID: own.LeaseID, Holder: "h", PolicyID: own.Policy.ID})
	if back.Lease != own.Lease {
		t.Errorf("adopting an own lease = %d; want %d", back.Lease, own.Lease)
	}
}

func TestAdoptErrors(t *testing.T) {
	st := newState(t, Options{}, densePolicies(1), Topology{})
	if _, err := st.Adopt(AdoptRequest{ID: foreignID, Holder: "h", PolicyID: "nope"}); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("unknown policy: %v; want ErrUnknownPolicy", err)
	}
	for field, req := range map[string]AdoptRequest{
		"lease_id":  {Holder: "h", PolicyID: "p0"},
		"holder":    {ID: foreignID, PolicyID: "p0"},
		"policy_id": {ID: foreignID, Holder: "h"},
	} {
		_, err := st.Adopt(req)
		wantInputError(t, err, field)
	}
}

// A reset (a leader's term ends) ends the adopted leases, those beyond
// capacity included, and forgets their ids.
func TestResetEndsAdoptedLeases(t *testing.T) {
	st := newState(t, Options{}, densePolicies(1), Topology{})
	mustSelect(t, st, SelectIdle, "")
	beyond := mustAdopt(t, st, AdoptRequest{ID: foreignID, Holder: "h", PolicyID: "p0"})
	st.Reset()
	if st.LeaseValid(beyond.Lease) || st.Stats().Leases != 0 {
		t.Errorf("after Reset: adopted lease out %t, leases %d; want none", st.LeaseValid(beyond.Lease), st.Stats().Leases)
	}
	if _, ok := st.ParseLeaseID(foreignID); ok {
		t.Error("an adopted id is still known after Reset")
	}
	mustSelect(t, st, SelectIdle, "")
}

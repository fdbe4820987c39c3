package routing

import (
	"errors"
	"testing"
)

// AbortLeases ends a policy's leases at once; releasing one of them then
// says it was aborted (and is still an ended lease), while a lease
// released normally reads merely ended.
func TestAbortLeasesReadAborted(t *testing.T) {
	st := newState(t, Options{}, withCapacity(densePolicies(2), 2), Topology{})
	a := mustSelect(t, st, SelectIdle, "")
	b := mustSelect(t, st, SelectIdle, "")
	c := mustSelect(t, st, SelectIdle, "")
	var onP0 []Decision
	other := Decision{}
	for _, d := range []Decision{a, b, c} {
		if d.Policy.ID == "p0" {
			onP0 = append(onP0, d)
		} else {
			other = d
		}
	}
	if len(onP0) == 0 || other.Lease == 0 {
		t.Fatalf("leases %v %v %v: want some on p0 and one elsewhere", a.Policy.ID, b.Policy.ID, c.Policy.ID)
	}
	n, err := st.AbortLeases("p0")
	if err != nil || n != len(onP0) {
		t.Fatalf("AbortLeases = %d, %v; want %d", n, err, len(onP0))
	}
	for _, d := range onP0 {
		if st.LeaseValid(d.Lease) {
			t.Errorf("lease %d still out after the abort", d.Lease)
		}
		_, err := st.Release(d.Lease)
		if !errors.Is(err, ErrLeaseAborted) || !errors.Is(err, ErrLeaseEnded) {
			t.Errorf("Release of an aborted lease = %v; want ErrLeaseAborted, an ErrLeaseEnded", err)
		}
	}
	mustRelease(t, st, other.Lease)
	if _, err := st.Release(other.Lease); !errors.Is(err, ErrLeaseEnded) || errors.Is(err, ErrLeaseAborted) {
		t.Errorf("second Release of a normal lease = %v; want ended, not aborted", err)
	}
	if _, err := st.AbortLeases("nope"); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("AbortLeases(unknown) = %v", err)
	}
}

// A policy registered while the join floor is set gets no work until its
// version reaches it; the policies registered before are not held, and
// lifting the floor frees it.
func TestJoinFloorHoldsNewPolicies(t *testing.T) {
	ps := densePolicies(1)
	st := newState(t, Options{}, ps, Topology{})
	st.SetJoinFloor(9)
	ps = append(ps, Policy{ID: "p1", Index: 1, Version: 8})
	if err := st.Update(ps, Topology{}); err != nil {
		t.Fatal(err)
	}
	if v, held := st.Held("p1"); !held || v != 9 {
		t.Errorf("Held(p1) = %d, %v; want 9, true", v, held)
	}
	if _, held := st.Held("p0"); held {
		t.Error("p0, registered before the update, is held")
	}
	got := selectIndices(t, st, SelectRoundRobin, "", "", "")
	for _, i := range got {
		if i == 1 {
			t.Fatalf("round robin handed out the held policy: %v", got)
		}
	}
	if err := st.SetVersion("p1", 9); err != nil {
		t.Fatal(err)
	}
	if _, held := st.Held("p1"); held {
		t.Error("p1 at the update's version is still held")
	}
	if err := st.SetVersion("p1", 8); err != nil {
		t.Fatal(err)
	}
	st.SetJoinFloor(0)
	if _, held := st.Held("p1"); held {
		t.Error("p1 held after the floor was lifted")
	}
	got = selectIndices(t, st, SelectRoundRobin, "", "")
	if got[0] == got[1] {
		t.Errorf("round robin after the floor was lifted: %v; want both policies", got)
	}
}

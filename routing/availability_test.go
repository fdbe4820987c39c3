package routing

import (
	"maps"
	"testing"
	"time"
)

func TestAvailability(t *testing.T) {
	now := time.Now()
	st := newState(t, Options{Polled: true, FailThreshold: 1}, densePolicies(6), Topology{})
	if got := st.Availability(); got.Policies != 6 || got.Available != 0 || got.ByState[StateUnknown] != 6 || got.LastError != "" {
		t.Fatalf("before any probe: %+v", got)
	}
	st.ObserveProbe("p0", Probe{SentAt: now, OK: true, Idle: true})
	st.ObserveProbe("p1", Probe{SentAt: now, OK: true, Idle: false})
	st.ObserveFailure("p2", now, "connection refused")
	st.ObserveFailure("p3", now, "timeout")
	st.ObserveFailure("p4", now, "timeout")
	if err := st.SetDraining("p5", true); err != nil {
		t.Fatal(err)
	}
	got := st.Availability()
	wantStates := map[string]int{StateIdle: 1, StateBusy: 1, StateUnhealthy: 3, StateDraining: 1}
	if got.Policies != 6 || got.Available != 2 || !maps.Equal(got.ByState, wantStates) {
		t.Errorf("got %+v, want 6 policies, 2 available, states %v", got, wantStates)
	}
	if got.LastError != "timeout" || got.LastErrorCount != 2 {
		t.Errorf("last error %q x%d, want \"timeout\" x2", got.LastError, got.LastErrorCount)
	}
	if got := New(Options{}).Availability(); got.Policies != 0 || got.Available != 0 {
		t.Errorf("no policies: %+v", got)
	}
}

func TestAtVersion(t *testing.T) {
	ps := densePolicies(3)
	ps[0].Version, ps[1].Version, ps[2].Version = 3, 5, 5
	st := newState(t, Options{}, ps, Topology{})
	for _, c := range []struct {
		floor    int64
		n, total int
	}{{0, 3, 3}, {4, 2, 3}, {5, 2, 3}, {6, 0, 3}} {
		n, total, highest := st.AtVersion(c.floor)
		if n != c.n || total != c.total || highest != 5 {
			t.Errorf("AtVersion(%d) = %d of %d, highest %d; want %d of %d, highest 5", c.floor, n, total, highest, c.n, c.total)
		}
	}
}

package handlers

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

// TestReadyz: /readyz is 503 with a reason while no policy is routable,
// and /healthz stays 200 throughout.
func TestReadyz(t *testing.T) {
	st := routing.New(routing.Options{Polled: true, FailThreshold: 1})
	ts := newTestServer(t, Config{State: st})
	ready := func(t *testing.T, code, inMessage string) api.ErrorBody {
		t.Helper()
		want(t, ts.do(t, "GET", "/healthz", ""), http.StatusOK, nil)
		rec := ts.do(t, "GET", "/readyz", "")
		if code == "" {
			want(t, rec, http.StatusOK, nil)
			return api.ErrorBody{}
		}
		e := wantError(t, rec, http.StatusServiceUnavailable, code, "")
		if !strings.Contains(e.Message, inMessage) {
			t.Errorf("message %q lacks %q", e.Message, inMessage)
		}
		return e
	}

	t.Run("no policies", func(t *testing.T) {
		e := ready(t, api.CodeNoPolicies, "PUT /registration")
		if e.Details == nil || e.Details.Policies != 0 {
			t.Errorf("details %+v, want 0 policies", e.Details)
		}
	})
	ps := ts.register(t, 3)
	t.Run("all unknown", func(t *testing.T) {
		e := ready(t, api.CodeAllUnavailable, "3 unknown")
		if e.Details == nil || e.Details.Policies != 3 || e.Details.States[routing.StateUnknown] != 3 {
			t.Errorf("details %+v, want 3 unknown", e.Details)
		}
	})
	now := time.Now()
	st.ObserveFailure(ps[0].ID, now, "connection refused")
	st.ObserveFailure(ps[1].ID, now, "connection refused")
	if err := st.SetDraining(ps[2].ID, true); err != nil {
		t.Fatal(err)
	}
	t.Run("unhealthy and draining", func(t *testing.T) {
		e := ready(t, api.CodeAllUnavailable, "connection refused")
		d := e.Details
		if d == nil || d.States[routing.StateUnhealthy] != 2 || d.States[routing.StateDraining] != 1 ||
			d.LastError != "connection refused" || d.LastErrorCount != 2 {
			t.Errorf("details %+v, want 2 unhealthy, 1 draining, last error connection refused x2", d)
		}
	})
	st.ObserveProbe(ps[2].ID, routing.Probe{SentAt: now, OK: true, Idle: false})
	t.Run("draining though heard", func(t *testing.T) { ready(t, api.CodeAllUnavailable, "1 draining") })
	if err := st.SetDraining(ps[2].ID, false); err != nil {
		t.Fatal(err)
	}
	t.Run("one busy policy routes", func(t *testing.T) { ready(t, "", "") })
}

// TestAllUnavailableSaysWhy: the routing endpoints' all_unavailable
// carries the same counts and last error as /readyz.
func TestAllUnavailableSaysWhy(t *testing.T) {
	st := routing.New(routing.Options{Polled: true, FailThreshold: 1})
	ts := newTestServer(t, Config{State: st})
	e := wantError(t, ts.do(t, "POST", "/select", `{"timeout_ms": 0}`), http.StatusServiceUnavailable, api.CodeNoPolicies, "")
	if !strings.Contains(e.Message, "PUT /registration") {
		t.Errorf("no_policies message %q does not say how to register", e.Message)
	}
	ps := ts.register(t, 2)
	st.ObserveProbe(ps[0].ID, routing.Probe{SentAt: time.Now(), Err: "dial tcp 127.0.0.1:9: connection refused", ErrKind: routing.ErrKindConnectRefused})
	if err := st.SetDraining(ps[1].ID, true); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, body string }{
		{"/select", `{"timeout_ms": 0}`},
		{"/assign", `{"num_tasks": 1}`},
	} {
		e := wantError(t, ts.do(t, "POST", c.path, c.body), http.StatusServiceUnavailable, api.CodeAllUnavailable, "")
		for _, w := range []string{"of 2 policies", "1 unhealthy", "1 draining", "by cause: connect_refused (1 policy); e.g. dial tcp 127.0.0.1:9: connection refused"} {
			if !strings.Contains(e.Message, w) {
				t.Errorf("%s: message %q lacks %q", c.path, e.Message, w)
			}
		}
		wantCauses := []api.ErrorCause{{Kind: "connect_refused", Count: 1, Example: "dial tcp 127.0.0.1:9: connection refused"}}
		if d := e.Details; d == nil || d.Policies != 2 || d.LastErrorCount != 1 || !slices.Equal(d.Causes, wantCauses) {
			t.Errorf("%s: details %+v; want causes %+v", c.path, d, wantCauses)
		}
	}
}

// TestReadyzFloorUnmet: a weight-version floor that no routable policy
// meets makes /readyz 503 floor_unmet, naming the floor and the highest
// version present, and /stats says so; a drained policy above the floor
// does not count. Lowering the floor makes it ready again.
func TestReadyzFloorUnmet(t *testing.T) {
	st := routing.New(routing.Options{Polled: true, FailThreshold: 1})
	ts := newTestServer(t, Config{State: st})
	ps := ts.register(t, 3)
	now := time.Now()
	for i, v := range []int64{3, 5, 50} {
		st.ObserveProbe(ps[i].ID, routing.Probe{SentAt: now, OK: true, Idle: true, Version: v, HasVersion: true})
	}
	want(t, ts.do(t, "POST", "/policies/by-index/2/drain", ""), http.StatusOK, nil)
	floor := func(t *testing.T) api.FloorStats {
		t.Helper()
		var s api.Stats
		want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &s)
		if s.Floor == nil {
			t.Fatal("/stats has no floor")
		}
		return *s.Floor
	}
	if got := floor(t); !got.Met || got.Routable != 2 || got.Meeting != 2 || got.HighestVersion != 5 {
		t.Errorf("/stats floor without a floor = %+v; want met by 2 of 2, highest 5", got)
	}

	want(t, ts.do(t, "PUT", "/weights", `{"version": 45, "max_staleness": 0, "force": true}`), http.StatusOK, nil)
	e := wantError(t, ts.do(t, "GET", "/readyz", ""), http.StatusServiceUnavailable, api.CodeFloorUnmet, "")
	for _, w := range []string{"floor 45", "none of the 2 policies that can route meets it", "highest version present is 5", "PUT /weights"} {
		if !strings.Contains(e.Message, w) {
			t.Errorf("floor_unmet message %q lacks %q", e.Message, w)
		}
	}
	if d := e.Details; d == nil || d.Policies != 3 || d.MinVersion == nil || *d.MinVersion != 45 ||
		d.HighestVersion == nil || *d.HighestVersion != 5 || d.MeetingFloor == nil || *d.MeetingFloor != 0 {
		t.Errorf("floor_unmet details %+v; want 3 policies, floor 45, highest 5, 0 meeting", d)
	}
	if got, want := floor(t), (api.FloorStats{Met: false, Meeting: 0, Routable: 2, HighestVersion: 5}); got != want {
		t.Errorf("/stats floor = %+v; want %+v", got, want)
	}

	want(t, ts.do(t, "PUT", "/weights", `{"version": 5, "max_staleness": 0}`), http.StatusOK, nil)
	want(t, ts.do(t, "GET", "/readyz", ""), http.StatusOK, nil)
	if got, want := floor(t), (api.FloorStats{Met: true, Meeting: 1, Routable: 2, HighestVersion: 5}); got != want {
		t.Errorf("/stats floor after lowering it = %+v; want %+v", got, want)
	}
}

package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/routing"
)

// POST /fleet/sleep waits (drain, the default) for the generations in
// flight on its policies before it sends the sleep calls, and records
// that the policies are due back within resume_within_ms, which the
// proxy's Leaser reads (Returning) until a probe shows it awake again.
func TestFleetSleepDrainsAndExpectsReturn(t *testing.T) {
	ts, st := polledServer(t)
	f := fakeFleet(t, 1, fakepolicy.Options{Engine: engine.SGLang})
	zero := 0
	body, _ := json.Marshal(api.ReplacePoliciesRequest{Policies: []api.PolicyRequest{{URL: f.URL(0), Index: &zero, Engine: engine.SGLang}}})
	want(t, ts.do(t, "PUT", "/policies", string(body)), http.StatusOK, nil)
	poll.Until(t, "the policy idle", func() bool {
		ps := st.Stats().Policies
		return len(ps) == 1 && ps[0].State == routing.StateIdle
	})
	id := st.Stats().Policies[0].Policy.ID
	var sel api.SelectResponse
	want(t, ts.do(t, "POST", "/select", `{}`), http.StatusOK, &sel)

	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- ts.do(t, "POST", "/fleet/sleep", `{"resume_within_ms": 600000}`) }()
	poll.Until(t, "the policy out of routing", func() bool {
		ps, _ := st.PolicyStats(id)
		return ps.State == routing.StateAsleep
	})
	if slices.Contains(controlCalls(f.Policy(0)), "POST /release_memory_occupation") || f.Policy(0).Asleep() {
		t.Fatal("the sleep call was sent with a generation in flight; want it sent after the drain")
	}
	want(t, ts.do(t, "POST", "/release", `{"lease_id": "`+sel.LeaseID+`"}`), http.StatusOK, nil)
	if rec := <-done; rec.Code != http.StatusOK {
		t.Fatalf("sleep: %d %s", rec.Code, rec.Body)
	}
	if !f.Policy(0).Asleep() {
		t.Fatal("the engine is not asleep after the drain")
	}
	l := stateLeaser{ts.Server}
	if _, ok := l.Returning(context.Background(), id); !ok {
		t.Error("Returning after the sleep: false; want the policy due back")
	}
	want(t, ts.do(t, "POST", "/fleet/wake", `{}`), http.StatusOK, nil)
	// Due back until a probe shows it awake (a generation the sleep
	// aborted may reach the proxy after the wake), then not.
	poll.Until(t, "the policy idle after the wake", func() bool {
		ps, _ := st.PolicyStats(id)
		return ps.State == routing.StateIdle
	})
	if _, ok := l.Returning(context.Background(), id); ok {
		t.Error("Returning once the policy is back: true; want false")
	}
	// drain false sends the calls at once; resume_within_ms 0 expects
	// nothing back.
	want(t, ts.do(t, "POST", "/select", `{}`), http.StatusOK, &sel)
	want(t, ts.do(t, "POST", "/fleet/sleep", `{"drain": false, "resume_within_ms": 0}`), http.StatusOK, nil)
	if _, ok := l.Returning(context.Background(), id); ok || !f.Policy(0).Asleep() {
		t.Errorf("after a sleep without drain: returning %v, asleep %v; want false, true", ok, f.Policy(0).Asleep())
	}
}

// Bad drain and resume_within_ms values are 422 naming the field.
func TestFleetSleepFieldErrors(t *testing.T) {
	ts, _ := polledServer(t)
	for _, tt := range []struct{ body, field string }{
		{`{"drain": "yes"}`, "drain"},
		{`{"resume_within_ms": -1}`, "resume_within_ms"},
		{`{"resume_within_ms": 3600001}`, "resume_within_ms"},
		{`{"resume_within_ms": 1.5}`, "resume_within_ms"},
	} {
		wantError(t, ts.do(t, "POST", "/fleet/sleep", tt.body), http.StatusUnprocessableEntity, api.CodeValidationFailed, tt.field)
	}
}

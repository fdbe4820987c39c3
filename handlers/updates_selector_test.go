package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/updates"
)

// runUpdates runs the server's update manager until the test ends.
func runUpdates(tb testing.TB, ts *testServer) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ts.Updates.Run(ctx); close(done) }()
	tb.Cleanup(func() { cancel(); <-done })
}

// An update aimed at policy 0 holds policy 0's refit lock while it works
// on it: a fleet verb on policy 0 is 409 naming the update, one on policy
// 1 (not selected) is not held up; and an update aimed at a policy a
// fleet verb holds is 409 naming the verb.
func TestUpdateSelectorAndRefitLock(t *testing.T) {
	ts, _ := polledServer(t)
	runUpdates(t, ts)
	b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"idle": true, "version": 7})
	})
	for i := range 2 {
		body, _ := json.Marshal(api.PolicyRequest{URL: b.URL + "/p/" + string(rune('0'+i)), Index: &i})
		want(t, ts.do(t, "POST", "/policies", string(body)), http.StatusCreated, nil)
	}
	poll.Until(t, "both policies heard from", func() bool {
		var stats api.Stats
		want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &stats)
		return len(stats.Policies) == 2 && stats.Policies[0].State == "idle" && stats.Policies[1].State == "idle"
	})

	wantError(t, ts.do(t, "POST", "/updates", `{"version": 8, "selector": {"indices": [5]}}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "selector")

	var u api.Update
	want(t, ts.do(t, "POST", "/updates", `{"version": 8, "selector": {"indices": [0]}}`), http.StatusAccepted, &u)
	if u.Selector == nil || len(u.Selector.Indices) != 1 || len(u.Policies) != 1 || u.Policies[0].Index != 0 {
		t.Fatalf("update %+v; want the selector shown and policy 0 alone listed", u)
	}
	poll.Until(t, "policy 0 updating", func() bool {
		want(t, ts.do(t, "GET", "/updates/"+u.ID, ""), http.StatusOK, &u)
		return u.Policies[0].Phase == updates.PhaseUpdating
	})
	e := wantError(t, ts.do(t, "POST", "/fleet/engine/x", `{"exclusive": true, "selector": {"indices": [0]}}`), http.StatusConflict, api.CodeConflict, "")
	if !strings.Contains(e.Message, "update "+u.ID) {
		t.Errorf("409 message %q does not name the update %s", e.Message, u.ID)
	}
	if rec := ts.do(t, "POST", "/fleet/engine/x", `{"exclusive": true, "selector": {"indices": [1]}}`); rec.Code != http.StatusOK {
		t.Errorf("exclusive fan-out to policy 1, which the update does not take: %d %s", rec.Code, rec.Body)
	}
	var stats api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &stats)
	if p1 := stats.Policies[1]; p1.State != "idle" || p1.Version != 7 {
		t.Errorf("policy 1 during the update: %s at version %d; want idle at 7", p1.State, p1.Version)
	}
	want(t, ts.do(t, "POST", "/updates/"+u.ID+"/abort", ""), http.StatusOK, &u)

	// Vice versa: a fleet verb holds policy 1, an update aimed at it is 409.
	release, err := ts.fleetLocks.Acquire(ts.State.Snapshot().Policies()[1:], "POST /fleet/wake")
	if err != nil {
		t.Fatal(err)
	}
	e = wantError(t, ts.do(t, "POST", "/updates", `{"version": 8, "selector": {"indices": [1]}}`), http.StatusConflict, api.CodeConflict, "")
	if !strings.Contains(e.Message, "POST /fleet/wake") {
		t.Errorf("409 message %q does not name the fleet verb", e.Message)
	}
	release()
	// The abort released policy 0's lock.
	if rec := ts.do(t, "POST", "/fleet/engine/x", `{"exclusive": true, "selector": {"indices": [0]}}`); rec.Code != http.StatusOK {
		t.Errorf("fan-out to policy 0 after the update's abort: %d %s", rec.Code, rec.Body)
	}
}

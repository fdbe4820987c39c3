package handlers

import (
	"net/http"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/api"
)

// A /weights floor that every policy is below is refused unless forced,
// and the refusal says how many policies meet it.
func TestWeightsFloorExcludingEveryPolicy(t *testing.T) {
	ts := newTestServer(t, Config{})
	// With no policy registered there is nothing to exclude.
	want(t, ts.do(t, "PUT", "/weights", `{"version": 50, "max_staleness": 0}`), http.StatusOK, nil)
	want(t, ts.do(t, "PUT", "/weights", `{"version": 0}`), http.StatusOK, nil)
	want(t, ts.do(t, "PUT", "/registration", `{"policies":[{"url":"http://127.0.0.1:9/p0","index":0,"version":7},{"url":"http://127.0.0.1:9/p1","index":1,"version":8}],"topology":{}}`), http.StatusOK, nil)

	e := wantError(t, ts.do(t, "PUT", "/weights", `{"version": 12, "max_staleness": 2}`), http.StatusConflict, api.CodeConflict, "")
	for _, w := range []string{"floor 10", "0 of 2 policies", "highest is 8", `"force": true`} {
		if !strings.Contains(e.Message, w) {
			t.Errorf("message %q lacks %q", e.Message, w)
		}
	}
	if d := e.Details; d == nil || d.Policies != 2 || d.MeetingFloor == nil || *d.MeetingFloor != 0 {
		t.Errorf("details %+v, want 2 policies, meeting_floor 0", d)
	}
	var w api.Weights
	want(t, ts.do(t, "GET", "/weights", ""), http.StatusOK, &w)
	if w.MinVersion != 0 {
		t.Errorf("a refused floor is in force: %+v", w)
	}

	// One policy meets it: accepted. Forced: accepted.
	want(t, ts.do(t, "PUT", "/weights", `{"version": 9, "max_staleness": 1}`), http.StatusOK, &w)
	if w.MinVersion != 8 {
		t.Errorf("floor 8 not set: %+v", w)
	}
	want(t, ts.do(t, "PUT", "/weights", `{"version": 12, "max_staleness": 2, "force": true}`), http.StatusOK, &w)
	if w.MinVersion != 10 {
		t.Errorf("forced floor 10 not set: %+v", w)
	}
	// No max_staleness: no floor, nothing to refuse.
	want(t, ts.do(t, "PUT", "/weights", `{"version": 100}`), http.StatusOK, &w)
}

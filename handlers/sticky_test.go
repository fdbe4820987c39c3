package handlers

import (
	"net/http"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/api"
)

func TestSelectSession(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 8)
	var first api.SelectResponse
	want(t, ts.do(t, "POST", "/select", `{"session_id":"traj-7"}`), http.StatusOK, &first)
	for range 3 {
		want(t, ts.do(t, "POST", "/release", `{"lease_id":"`+first.LeaseID+`"}`), http.StatusOK, nil)
		var sel api.SelectResponse
		want(t, ts.do(t, "POST", "/select", `{"session_id":"traj-7","sticky_wait_ms":0,"load_factor":1.5}`), http.StatusOK, &sel)
		if sel.Index != first.Index {
			t.Fatalf("session went to %d, then %d; want the same policy", first.Index, sel.Index)
		}
		first = sel
	}
	// Busy home, no wait asked: the request spills to the router's pick.
	var spill api.SelectResponse
	want(t, ts.do(t, "POST", "/select", `{"session_id":"traj-7","timeout_ms":0}`), http.StatusOK, &spill)
	if spill.Index == first.Index {
		t.Errorf("spilled request got the busy home %d", first.Index)
	}
	var stats api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &stats)
	// The spilled request is the 5th; its home was over the bound
	// ⌈1.25 · 2 / 8⌉ = 1, so it was a miss, not a spill.
	if s := stats.Sticky; s.Hits != 4 || s.Hits+s.Spills+s.Misses != 5 || s.HitRate != 0.8 {
		t.Errorf("stats.sticky = %+v; want 4 hits of 5, hit rate 0.8", s)
	}
}

func TestAssignSessions(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 4)
	var a api.AssignResponse
	want(t, ts.do(t, "POST", "/assign", `{"num_tasks":4,"session_ids":["g",null,"g",""],"current_loads":[5,5,5,5]}`), http.StatusOK, &a)
	if a.Assignments[0] != a.Assignments[2] {
		t.Errorf("tasks of one session went to %d and %d; want one home while under the bound", a.Assignments[0], a.Assignments[2])
	}
	var stats api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &stats)
	if stats.Sticky.Hits != 2 {
		t.Errorf("stats.sticky = %+v; want 2 hits", stats.Sticky)
	}
}

func TestStickyErrors(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 2)
	long := strings.Repeat("é", 129) // 258 bytes, 129 runes
	tests := []struct{ name, path, body, field string }{
		{"session too long", "/select", `{"session_id":"` + long + `"}`, "session_id"},
		{"load factor below 1", "/select", `{"session_id":"s","load_factor":0.5}`, "load_factor"},
		{"load factor not a number", "/select", `{"load_factor":"x"}`, "load_factor"},
		{"negative sticky wait", "/select", `{"session_id":"s","sticky_wait_ms":-1}`, "sticky_wait_ms"},
		{"session_ids too short", "/assign", `{"num_tasks":2,"session_ids":["s"]}`, "session_ids"},
		{"session key too long", "/assign", `{"num_tasks":1,"session_ids":["` + long + `"]}`, "session_ids[0]"},
		{"session key not a string", "/assign", `{"num_tasks":1,"session_ids":[3]}`, "session_ids"},
		{"assign load factor too big", "/assign", `{"num_tasks":1,"session_ids":["s"],"load_factor":1e6}`, "load_factor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := ts.do(t, "POST", tt.path, tt.body)
			if rec.Code == http.StatusBadRequest {
				wantError(t, rec, http.StatusBadRequest, api.CodeBadRequest, "")
				return
			}
			wantError(t, rec, http.StatusUnprocessableEntity, api.CodeValidationFailed, tt.field)
		})
	}
}

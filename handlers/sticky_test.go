package handlers

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
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
	// The 5th found its home busy and asked no wait: a spill.
	if spill.Sticky != "spilled" {
		t.Errorf("spilled request: sticky %q; want spilled", spill.Sticky)
	}
	if s := stats.Sticky; s.Hits != 4 || s.Spills != 1 || s.Misses != 0 || s.HitRate != 0.8 {
		t.Errorf("stats.sticky = %+v; want 4 hits, 1 spill, hit rate 0.8", s)
	}
}

// A sticky wait never outlasts its request: four idle policies, a
// session's first /select gets policy 1, its second, with timeout_ms 1000
// under the server's 2 s sticky wait, finds policy 1 busy and takes one of
// the idle others (sticky "spilled") instead of answering 503
// no_idle_policy.
func TestSelectStickyWaitLeavesTimeToSpill(t *testing.T) {
	ts := newTestServer(t, Config{DefaultStickyWait: routing.DefaultStickyWait})
	ts.register(t, 4)
	// A session whose home is policy 1.
	var key string
	for i := range 1000 {
		var sel api.SelectResponse
		k := "episode-" + itoa(i)
		want(t, ts.do(t, "POST", "/select", `{"session_id":"`+k+`","timeout_ms":0}`), http.StatusOK, &sel)
		if sel.Index == 1 && sel.Sticky == "home" {
			key = k
			break
		}
		want(t, ts.do(t, "POST", "/release", `{"lease_id":"`+sel.LeaseID+`"}`), http.StatusOK, nil)
	}
	if key == "" {
		t.Fatal("no session of 1000 is homed at policy 1")
	}
	var sel api.SelectResponse
	want(t, ts.do(t, "POST", "/select", `{"session_id":"`+key+`","timeout_ms":1000}`), http.StatusOK, &sel)
	if sel.Index == 1 || sel.Sticky != "spilled" {
		t.Errorf("second select, policy 1 busy: policy %d (sticky %q); want an idle one (spilled)", sel.Index, sel.Sticky)
	}
}

func TestAssignSessions(t *testing.T) {
	ts := newTestServer(t, Config{})
	var reg api.ReplacePoliciesRequest
	for i := range 4 {
		idx, capacity := i, 4
		reg.Policies = append(reg.Policies, api.PolicyRequest{URL: "http://127.0.0.1:9/p" + itoa(i), Index: &idx, Capacity: &capacity})
	}
	body, _ := json.Marshal(reg)
	want(t, ts.do(t, "PUT", "/policies", string(body)), http.StatusOK, nil)

	// A group of 3 on capacity-4 policies lands on one, as a unit.
	var a api.AssignResponse
	want(t, ts.do(t, "POST", "/assign", `{"num_tasks":5,"session_ids":["g",null,"g","","g"],"current_loads":[5,5,5,5]}`), http.StatusOK, &a)
	if a.Assignments[0] != a.Assignments[2] || a.Assignments[0] != a.Assignments[4] {
		t.Errorf("tasks of one session went to %v; want one home", a.Assignments)
	}
	if len(a.Sticky) != 5 || a.Sticky[1] != nil || a.Sticky[3] != nil || a.Sticky[0] == nil || *a.Sticky[0] != "home" {
		t.Errorf("sticky = %v; want home for the group's tasks, null for the others", a.Sticky)
	}
	var stats api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &stats)
	if stats.Sticky.Hits != 3 {
		t.Errorf("stats.sticky = %+v; want 3 hits", stats.Sticky)
	}
	// Without sessions the answer has no sticky field.
	rec := ts.do(t, "POST", "/assign", `{"num_tasks":2}`)
	if strings.Contains(rec.Body.String(), "sticky") {
		t.Errorf("answer without sessions: %s", rec.Body)
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

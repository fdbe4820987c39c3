package handlers

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/api"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// seedSimple is the seed's SimpleRouter.assign re-stated naively: each task
// scans for the minimum (load, index).
func seedSimple(loads []int64, n int) []int {
	l := slices.Clone(loads)
	out := make([]int, 0, n)
	for range n {
		best := 0
		for i := range l {
			if l[i] < l[best] {
				best = i
			}
		}
		out = append(out, best)
		l[best]++
	}
	return out
}

// seedNodeAffinity is the seed's NodeAffinityRouter.assign re-stated:
// nodes[i] is policy i's node ("" for none); envNode maps a worker index to
// its node.
func seedNodeAffinity(loads []int64, nodes []string, envNode map[int]string, envIDs []string) []int {
	anyNode := slices.ContainsFunc(nodes, func(n string) bool { return n != "" })
	if !anyNode || len(envIDs) == 0 {
		return seedSimple(loads, len(envIDs))
	}
	l := slices.Clone(loads)
	var out []int
	for _, env := range envIDs {
		node := ""
		if i := strings.LastIndex(env, "-"); i >= 0 {
			if w, err := strconv.Atoi(env[i+1:]); err == nil {
				node = envNode[w]
			}
		} else if w, err := strconv.Atoi(env); err == nil {
			node = envNode[w]
		}
		best := -1
		for i := range l {
			if nodes[i] == node && (best < 0 || l[i] < l[best]) {
				best = i
			}
		}
		if best < 0 {
			best = 0
			for i := range l {
				if l[i] < l[best] {
					best = i
				}
			}
		}
		out = append(out, best)
		l[best]++
	}
	return out
}

func TestAssignMatchesSeed(t *testing.T) {
	ts := newTestServer(t, Config{})
	const nPolicies = 6
	nodes := []string{"n0", "n0", "n1", "n1", "n2", ""}
	ts.register(t, nPolicies, nodes...)
	want(t, ts.do(t, "PUT", "/topology",
		`{"n0":{"env":{"ids":[0,1,2]},"eval":{"ids":[0,1]}},"n1":{"env":{"ids":[3,4]},"eval":{"ids":[2,3]}},"n2":{"env":{"ids":[5]},"eval":{"ids":[4]}}}`),
		http.StatusOK, nil)
	envNode := map[int]string{0: "n0", 1: "n0", 2: "n0", 3: "n1", 4: "n1", 5: "n2"}

	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		loads := make([]int64, nPolicies)
		for j := range loads {
			loads[j] = int64(rng.IntN(5))
		}
		n := 1 + rng.IntN(20)
		envIDs := make([]string, n)
		for j := range envIDs {
			envIDs[j] = []string{"env-" + strconv.Itoa(rng.IntN(8)), "env-x", "env", "worker-env-" + strconv.Itoa(rng.IntN(6))}[rng.IntN(4)]
		}
		router := []string{"simple", "node_affinity"}[i%2]
		body, _ := json.Marshal(api.AssignRequest{NumTasks: &n, CurrentLoads: loads, EnvIDs: envIDs, Router: router})
		var got api.AssignResponse
		want(t, ts.do(t, "POST", "/assign", string(body)), http.StatusOK, &got)
		wantIdx := seedSimple(loads, n)
		if router == "node_affinity" {
			wantIdx = seedNodeAffinity(loads, nodes, envNode, envIDs)
		}
		if !slices.Equal(got.Assignments, wantIdx) {
			t.Fatalf("case %d %s loads=%v env=%v: got %v, want %v", i, router, loads, envIDs, got.Assignments, wantIdx)
		}
		for _, idx := range got.Assignments {
			if _, ok := got.Policies[strconv.Itoa(idx)]; !ok {
				t.Fatalf("index %d not resolved in policies: %v", idx, got.Policies)
			}
		}
	}
}

func TestAssignStatelessWithoutRegistration(t *testing.T) {
	ts := newTestServer(t, Config{})
	var got api.AssignResponse
	want(t, ts.do(t, "POST", "/assign", `{"num_tasks":5,"current_loads":[3,1,2]}`), http.StatusOK, &got)
	if !slices.Equal(got.Assignments, []int{1, 1, 2, 0, 1}) || len(got.Policies) != 0 {
		t.Errorf("got %+v, want the seed's [1 1 2 0 1] and no policies", got)
	}
}

func TestAssignErrors(t *testing.T) {
	ts := newTestServer(t, Config{})
	wantError(t, ts.do(t, "POST", "/assign", `{"num_tasks":2}`), http.StatusServiceUnavailable, api.CodeNoPolicies, "")
	ts.register(t, 2)
	tests := []struct{ name, body, field string }{
		{"negative tasks", `{"num_tasks":-1}`, "num_tasks"},
		{"missing num_tasks", `{}`, "num_tasks"},
		{"empty loads", `{"num_tasks":1,"current_loads":[]}`, "current_loads"},
		{"env_ids too short", `{"num_tasks":3,"env_ids":["env-0"]}`, "env_ids"},
		{"env_ids too long", `{"num_tasks":1,"env_ids":["env-0","env-1"]}`, "env_ids"},
		{"unknown router", `{"num_tasks":1,"router":"random"}`, "router"},
		{"float load", `{"num_tasks":1,"current_loads":[1e12]}`, "current_loads"},
		{"load out of range", `{"num_tasks":1,"current_loads":[0,600000000]}`, "current_loads"},
		{"negative load out of range", `{"num_tasks":1,"current_loads":[-600000000,0]}`, "current_loads"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, ts.do(t, "POST", "/assign", tt.body), http.StatusUnprocessableEntity, api.CodeValidationFailed, tt.field)
		})
	}
	rec := ts.do(t, "POST", "/assign", `{"num_tasks":1,"current_loads":[0,0]}`)
	want(t, rec, http.StatusOK, nil)
}

func TestTrackedLoadsAndComplete(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 3)
	var a api.AssignResponse
	want(t, ts.do(t, "POST", "/assign", `{"num_tasks":7}`), http.StatusOK, &a)
	if !slices.Equal(a.Assignments, []int{0, 1, 2, 0, 1, 2, 0}) {
		t.Errorf("first batch %v", a.Assignments)
	}
	// Loads are now 3,2,2: the next task goes to 1.
	want(t, ts.do(t, "POST", "/assign", `{"num_tasks":1}`), http.StatusOK, &a)
	if !slices.Equal(a.Assignments, []int{1}) {
		t.Errorf("second batch %v, want [1]", a.Assignments)
	}
	var c api.CompleteResponse
	want(t, ts.do(t, "POST", "/complete", `{"index":0,"count":3}`), http.StatusOK, &c)
	if c.Load != 0 {
		t.Errorf("load after complete = %d, want 0", c.Load)
	}
	want(t, ts.do(t, "POST", "/complete", `{"index":0,"count":5}`), http.StatusOK, &c)
	if c.Load != 0 {
		t.Errorf("load went below zero: %d", c.Load)
	}
	want(t, ts.do(t, "POST", "/assign", `{"num_tasks":1}`), http.StatusOK, &a)
	if !slices.Equal(a.Assignments, []int{0}) {
		t.Errorf("after complete %v, want [0]", a.Assignments)
	}
	wantError(t, ts.do(t, "POST", "/complete", `{"index":9}`), http.StatusNotFound, api.CodeNotFound, "")
	wantError(t, ts.do(t, "POST", "/complete", `{}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "index")
	wantError(t, ts.do(t, "POST", "/complete", `{"index":0,"count":0}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "count")
}

func TestSelectReleaseCycle(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 3)
	var got []int
	leases := map[int]string{}
	for range 3 {
		var sel api.SelectResponse
		want(t, ts.do(t, "POST", "/select", `{}`), http.StatusOK, &sel)
		got = append(got, sel.Index)
		leases[sel.Index] = sel.LeaseID
	}
	if !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("selected %v, want the idle deque's order 0 1 2", got)
	}
	rec := ts.do(t, "POST", "/select", `{"timeout_ms":20}`)
	wantError(t, rec, http.StatusServiceUnavailable, api.CodeNoIdlePolicy, "")
	if rec.Header().Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	// Released policies join the back of the deque, in release order.
	var rel api.ReleaseResponse
	want(t, ts.do(t, "POST", "/release", `{"lease_id":"`+leases[2]+`"}`), http.StatusOK, &rel)
	if rel.Index == nil || *rel.Index != 2 || !rel.Released || rel.LeaseID != leases[2] {
		t.Errorf("release = %+v", rel)
	}
	want(t, ts.do(t, "POST", "/release", `{"index":0}`), http.StatusOK, &rel)
	// Releasing an ended lease again is idempotent: 200, released false.
	var again api.ReleaseResponse
	want(t, ts.do(t, "POST", "/release", `{"lease_id":"`+leases[2]+`"}`), http.StatusOK, &again)
	if again.Released || again.LeaseID != leases[2] {
		t.Errorf("second release = %+v, want released false", again)
	}
	// A well-formed lease id this server never issued is unknown.
	forged := leases[2][:len(leases[2])-4] + "ffff"
	wantError(t, ts.do(t, "POST", "/release", `{"lease_id":"`+forged+`"}`), http.StatusNotFound, api.CodeNotFound, "")
	wantError(t, ts.do(t, "POST", "/release", `{"index":0}`), http.StatusNotFound, api.CodeNotFound, "")
	wantError(t, ts.do(t, "POST", "/release", `{"lease_id":"00000000-0000-4000-8000-000000000001"}`), http.StatusNotFound, api.CodeNotFound, "")
	wantError(t, ts.do(t, "POST", "/release", `{"lease_id":"nope"}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "lease_id")
	wantError(t, ts.do(t, "POST", "/release", `{}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "lease_id")
	got = got[:0]
	for range 2 {
		var sel api.SelectResponse
		want(t, ts.do(t, "POST", "/select", `{"timeout_ms":0}`), http.StatusOK, &sel)
		got = append(got, sel.Index)
	}
	if !slices.Equal(got, []int{2, 0}) {
		t.Errorf("after releases selected %v, want [2 0]", got)
	}
}

func TestSelectRoundRobinMatchesSeed(t *testing.T) {
	ts := newTestServer(t, Config{DefaultRouter: "node_affinity"})
	ts.register(t, 3)
	want(t, ts.do(t, "PUT", "/topology", `{"n0":{"env":{"ids":[0,1]},"eval":{"ids":[0,1]}},"n1":{"env":{"ids":[2]},"eval":{"ids":[2]}}}`), http.StatusOK, nil)
	var got []int
	for _, env := range []string{"env-0", "env-1", "env-2", "env-9", "env-0"} {
		var sel api.SelectResponse
		want(t, ts.do(t, "POST", "/select", fmt.Sprintf(`{"env_id":%q}`, env)), http.StatusOK, &sel)
		if sel.LeaseID != "" {
			t.Errorf("round robin issued lease %q", sel.LeaseID)
		}
		got = append(got, sel.Index)
	}
	// router_restored.py prints ['p0', 'p1', 'p2', 'p0', 'p0'] for this.
	if !slices.Equal(got, []int{0, 1, 2, 0, 0}) {
		t.Errorf("round robin %v, want the seed's [0 1 2 0 0]", got)
	}
}

func TestSelectIdleAffinity(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 3)
	want(t, ts.do(t, "PUT", "/topology", `{"n0":{"env":{"ids":[0,1]},"eval":{"ids":[0,1]}},"n1":{"env":{"ids":[2]},"eval":{"ids":[2]}}}`), http.StatusOK, nil)
	var got []int
	for _, env := range []string{"env-2", "env-2", "env-0"} {
		var sel api.SelectResponse
		want(t, ts.do(t, "POST", "/select", fmt.Sprintf(`{"env_id":%q,"router":"idle_affinity","timeout_ms":0}`, env)), http.StatusOK, &sel)
		got = append(got, sel.Index)
	}
	// env-2's node holds policy 2; once it is busy the oldest idle anywhere.
	if !slices.Equal(got, []int{2, 0, 1}) {
		t.Errorf("idle affinity %v, want [2 0 1]", got)
	}
}

func TestStats(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 2, "a", "b")
	want(t, ts.do(t, "POST", "/select", `{}`), http.StatusOK, nil)
	want(t, ts.do(t, "POST", "/assign", `{"num_tasks":3}`), http.StatusOK, nil)
	var st api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &st)
	if len(st.Policies) != 2 || st.Policies[0].State != "busy" || st.Policies[1].State != "idle" {
		t.Fatalf("policies: %+v", st.Policies)
	}
	if st.Totals.Policies != 2 || st.Totals.Busy != 1 || st.Totals.Idle != 1 || st.Totals.AssignedTotal != 3 || st.Totals.SelectedTotal != 1 {
		t.Errorf("totals: %+v", st.Totals)
	}
	if st.Nodes["a"].Busy != 1 || st.Nodes["b"].Idle != 1 || st.Leases != 1 {
		t.Errorf("nodes: %+v leases %d", st.Nodes, st.Leases)
	}
	if st.Policies[0].LastPoll != nil {
		t.Errorf("last_poll before any probe: %v", st.Policies[0].LastPoll)
	}
}

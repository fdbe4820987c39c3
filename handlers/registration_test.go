package handlers

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

// PUT /registration replaces policies and topology at once; GET returns
// both; a bad half changes neither.
func TestRegistration(t *testing.T) {
	ts := newTestServer(t, Config{})
	body := `{"policies":[{"url":"http://127.0.0.1:9/p0","index":0},{"url":"http://127.0.0.1:9/p1","index":1},{"url":"http://127.0.0.1:9/p2","index":2}],
		"topology":{"node-a":{"env":{"ids":[0]},"eval":{"ids":[0,1]}},"node-b":{"env":{"ids":[1]},"eval":{"ids":[2]}}}}`
	var reg api.Registration
	want(t, ts.do(t, "PUT", "/registration", body), http.StatusOK, &reg)
	if len(reg.Policies) != 3 || reg.Policies[2].NodeID != "node-b" || reg.Policies[0].State != "idle" {
		t.Errorf("registration answer %+v; want 3 idle policies, policy 2 on node-b", reg.Policies)
	}
	// Shrink to one node in one call.
	small := `{"policies":[{"url":"http://127.0.0.1:9/p0","index":0}],"topology":{"node-a":{"env":{"ids":[0]},"eval":{"ids":[0]}}}}`
	want(t, ts.do(t, "PUT", "/registration", small), http.StatusOK, nil)
	reg = api.Registration{}
	want(t, ts.do(t, "GET", "/registration", ""), http.StatusOK, &reg)
	if len(reg.Policies) != 1 || len(reg.Topology) != 1 || reg.Topology.Eval("node-a")[0] != 0 {
		t.Errorf("GET /registration = %+v; want the small registration", reg)
	}
	// A bad topology, or a bad policy, changes nothing.
	for _, tt := range []struct{ name, body, field string }{
		{"topology typo", `{"policies":[],"topology":{"n":{"evals":{"ids":[0]}}}}`, "topology.n.evals"},
		{"eval not registered", `{"policies":[],"topology":{"n":{"env":{"ids":[0]},"eval":{"ids":[0]}}}}`, "topology.n.eval.ids"},
		{"bad url", `{"policies":[{"url":"ftp://x"}],"topology":{}}`, "policies[0].url"},
		{"no topology", `{"policies":[]}`, "topology"},
		{"no policies", `{"topology":{}}`, "policies"},
		{"id by-index", `{"policies":[{"url":"http://a:1","id":"by-index"}],"topology":{}}`, "policies[0].id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, ts.do(t, "PUT", "/registration", tt.body), http.StatusUnprocessableEntity, api.CodeValidationFailed, tt.field)
		})
	}
	reg = api.Registration{}
	want(t, ts.do(t, "GET", "/registration", ""), http.StatusOK, &reg)
	if len(reg.Policies) != 1 || len(reg.Topology) != 1 {
		t.Errorf("failed calls changed the registration: %+v", reg)
	}
	// PUT /policies with a topology says where that goes.
	e0 := wantError(t, ts.do(t, "PUT", "/policies", `{"policies":[],"topology":{}}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "topology")
	if !strings.Contains(e0.Fields["topology"], "PUT /registration") {
		t.Errorf("PUT /policies with a topology says %q; want it to point to PUT /registration", e0.Fields["topology"])
	}
	// PUT /policies alone cannot remove what the topology names.
	e := wantError(t, ts.do(t, "PUT", "/policies", `{"policies":[]}`), http.StatusConflict, api.CodeConflict, "")
	if !strings.Contains(e.Message, "PUT /registration") {
		t.Errorf("409 message %q does not point to PUT /registration", e.Message)
	}
}

// One server, one policy: a URL that names the server of a registered
// policy (or of another entry of the same PUT), in any spelling, is 409
// naming that policy's id and index and the field; the same policy and
// body again stays 200; allow_shared_url still allows it; the stored URL
// is the one the client wrote.
func TestOneServerOnePolicy(t *testing.T) {
	ts := newTestServer(t, Config{})
	var p0 api.Policy
	want(t, ts.do(t, "POST", "/policies", `{"url":"http://127.0.0.1:9000/p/0","index":0,"id":"p0"}`), http.StatusCreated, &p0)

	t.Run("POST /policies", func(t *testing.T) {
		for _, url := range []string{
			"http://127.0.0.1:9000/p/0", "http://127.0.0.1:9000/p/0/", "http://localhost:9000/p/0",
			"HTTP://LOCALHOST:9000/p/0/", "http://[::1]:9000/p/0",
		} {
			e := wantError(t, ts.do(t, "POST", "/policies", `{"url":"`+url+`","index":1}`), http.StatusConflict, api.CodeConflict, "url")
			for _, w := range []string{`policy "p0" at index 0`, "allow_shared_url"} {
				if !strings.Contains(e.Message, w) {
					t.Errorf("%s: message %q lacks %q", url, e.Message, w)
				}
			}
		}
		// The same policy with the same body again is idempotent, by
		// index or by id.
		want(t, ts.do(t, "POST", "/policies", `{"url":"http://127.0.0.1:9000/p/0","index":0,"id":"p0"}`), http.StatusOK, nil)
		want(t, ts.do(t, "POST", "/policies", `{"url":"http://127.0.0.1:9000/p/0","id":"p0"}`), http.StatusOK, nil)
		// Another path or port is another server.
		want(t, ts.do(t, "POST", "/policies", `{"url":"http://localhost:9000/p/1","index":1}`), http.StatusCreated, nil)
		var shared api.Policy
		want(t, ts.do(t, "POST", "/policies", `{"url":"http://localhost:9000/p/0/","index":2,"allow_shared_url":true}`), http.StatusCreated, &shared)
		if shared.URL != "http://localhost:9000/p/0/" {
			t.Errorf("stored url %q; want it as written", shared.URL)
		}
	})

	for _, path := range []string{"/policies", "/registration"} {
		t.Run("PUT "+path, func(t *testing.T) {
			body := func(policies string) string {
				if path == "/registration" {
					return `{"policies":[` + policies + `],"topology":{}}`
				}
				return `{"policies":[` + policies + `]}`
			}
			e := wantError(t, ts.do(t, "PUT", path, body(`{"url":"http://127.0.0.1:9000/p/0","index":0,"id":"p0"},{"url":"http://a:1"},{"url":"http://localhost:9000/p/0/","index":5}`)),
				http.StatusConflict, api.CodeConflict, "policies[2].url")
			for _, w := range []string{`policies[0] (index 0, id "p0")`, `"http://localhost:9000/p/0/" is the same server as "http://127.0.0.1:9000/p/0"`} {
				if !strings.Contains(e.Message, w) {
					t.Errorf("message %q lacks %q", e.Message, w)
				}
			}
			e = wantError(t, ts.do(t, "PUT", path, body(`{"url":"http://a:80"},{"url":"http://A/"}`)), http.StatusConflict, api.CodeConflict, "policies[1].url")
			if !strings.Contains(e.Message, "policies[0] (index 0)") {
				t.Errorf("message %q does not name policies[0] and its index", e.Message)
			}
			var reg api.Registration
			want(t, ts.do(t, "PUT", path, body(`{"url":"http://127.0.0.1:9000/p/0/","index":0},{"url":"http://localhost:9000/p/0","index":1,"allow_shared_url":true}`)), http.StatusOK, &reg)
			if len(reg.Policies) != 2 || reg.Policies[0].URL != "http://127.0.0.1:9000/p/0/" || reg.Policies[1].URL != "http://localhost:9000/p/0" {
				t.Errorf("PUT %s with allow_shared_url = %+v; want both urls as written", path, reg.Policies)
			}
		})
	}
}

// One identity per engine: every spelling of a registered server's URL
// (empty or dot path segments, percent-encoded unreserved characters,
// another loopback name, the default port, upper case) is 409 naming the
// policy registered there, through every route that registers; the
// unspecified address, to which nothing can be sent, is 422 naming url
// (400 on the legacy route, which answers every failure 400).
func TestOneIdentityPerEngine(t *testing.T) {
	ts := newTestServer(t, Config{})
	const p0 = `{"url":"http://127.0.0.1:9000/p/0","index":0,"id":"p0"}`
	want(t, ts.do(t, "POST", "/policies", p0), http.StatusCreated, nil)
	for _, spelling := range []string{
		"http://127.0.0.1:9000//p/0",
		"http://127.0.0.1:9000/p/./0",
		"http://127.0.0.1:9000/p/x/../0",
		"http://127.0.0.1:9000/p/%30",
		"http://127.0.0.1:9000/%70/%2E/0/",
		"http://127.0.0.2:9000/p/0",
		"http://localhost:9000/p/0",
		"http://[::1]:9000/p/0",
		"HTTP://LOCALHOST:9000/p/0/",
	} {
		t.Run(spelling, func(t *testing.T) {
			for _, tt := range []struct{ method, path, body, field string }{
				{"POST", "/policies", `{"url":"` + spelling + `"}`, "url"},
				{"POST", "/workers", `{"url":"` + spelling + `"}`, "url"},
				{"PUT", "/policies", `{"policies":[` + p0 + `,{"url":"` + spelling + `"}]}`, "policies[1].url"},
				{"PUT", "/registration", `{"policies":[` + p0 + `,{"url":"` + spelling + `"}],"topology":{}}`, "policies[1].url"},
			} {
				e := wantError(t, ts.do(t, tt.method, tt.path, tt.body), http.StatusConflict, api.CodeConflict, tt.field)
				for _, w := range []string{`is the same server as "http://127.0.0.1:9000/p/0"`, `"p0"`, "allow_shared_url"} {
					if !strings.Contains(e.Message, w) {
						t.Errorf("%s %s: message %q lacks %q", tt.method, tt.path, e.Message, w)
					}
				}
			}
		})
	}
	for _, unspecified := range []string{"http://0.0.0.0:9000/p/0", "http://[::]:9000/p/0"} {
		t.Run(unspecified, func(t *testing.T) {
			for _, tt := range []struct{ method, path, body, field string }{
				{"POST", "/policies", `{"url":"` + unspecified + `"}`, "url"},
				{"POST", "/policies", `{"url":"` + unspecified + `","allow_shared_url":true}`, "url"},
				{"POST", "/workers", `{"url":"` + unspecified + `"}`, "url"},
				{"PUT", "/policies", `{"policies":[` + p0 + `,{"url":"` + unspecified + `"}]}`, "policies[1].url"},
				{"PUT", "/registration", `{"policies":[` + p0 + `,{"url":"` + unspecified + `"}],"topology":{}}`, "policies[1].url"},
			} {
				e := wantError(t, ts.do(t, tt.method, tt.path, tt.body), http.StatusUnprocessableEntity, api.CodeValidationFailed, tt.field)
				if !strings.Contains(e.Fields[tt.field], "unspecified address") {
					t.Errorf("%s %s: fields[%s] = %q; want it to say why", tt.method, tt.path, tt.field, e.Fields[tt.field])
				}
			}
			wantError(t, ts.do(t, "POST", "/add_worker?url="+url.QueryEscape(unspecified), ""), http.StatusBadRequest, api.CodeValidationFailed, "url")
		})
	}
	var list api.PolicyList
	want(t, ts.do(t, "GET", "/policies", ""), http.StatusOK, &list)
	if len(list.Policies) != 1 || list.Policies[0].ID != "p0" {
		t.Errorf("refused registrations changed the set: %+v", list.Policies)
	}
	// Another path is another server; allow_shared_url shares one on purpose.
	want(t, ts.do(t, "POST", "/policies", `{"url":"http://127.0.0.1:9000/p/1"}`), http.StatusCreated, nil)
	want(t, ts.do(t, "POST", "/policies", `{"url":"http://127.0.0.1:9000/p/%30","allow_shared_url":true}`), http.StatusCreated, nil)
}

// An operator who knows an index can get, drain, resume and delete that
// policy; an index used where an id goes says what to use.
func TestAdministrationByIndex(t *testing.T) {
	ts := newTestServer(t, Config{})
	ps := ts.register(t, 4)
	var p api.Policy
	want(t, ts.do(t, "GET", "/policies/by-index/3", ""), http.StatusOK, &p)
	if p.ID != ps[3].ID || p.State != routing.StateIdle {
		t.Errorf("GET by index 3 = %+v; want %s, idle", p, ps[3].ID)
	}
	want(t, ts.do(t, "POST", "/policies/by-index/3/drain", ""), http.StatusOK, &p)
	if !p.Draining || p.State != routing.StateDraining {
		t.Errorf("drain by index = %+v; want draining", p)
	}
	want(t, ts.do(t, "POST", "/policies/by-index/3/resume", ""), http.StatusOK, &p)
	if p.Draining {
		t.Errorf("resume by index = %+v", p)
	}
	if rec := ts.do(t, "DELETE", "/policies/by-index/3", ""); rec.Code != http.StatusNoContent {
		t.Fatalf("delete by index: %d %s", rec.Code, rec.Body)
	}
	e := wantError(t, ts.do(t, "GET", "/policies/by-index/3", ""), http.StatusNotFound, api.CodeNotFound, "")
	if !strings.Contains(e.Message, "index 3") {
		t.Errorf("404 %q does not name the index", e.Message)
	}
	wantError(t, ts.do(t, "POST", "/policies/by-index/x/drain", ""), http.StatusUnprocessableEntity, api.CodeValidationFailed, "index")
	e = wantError(t, ts.do(t, "POST", "/policies/2/drain", ""), http.StatusNotFound, api.CodeNotFound, "")
	if !strings.Contains(e.Message, "/policies/by-index/2") {
		t.Errorf("404 for an index used as an id %q does not say what to use", e.Message)
	}
}

// Each 503 says why; messages name JSON fields; zero tasks is the seed's [].
func TestErrorsYouCanActOn(t *testing.T) {
	ts := newTestServer(t, Config{})
	wantError(t, ts.do(t, "POST", "/select", `{"timeout_ms":0}`), http.StatusServiceUnavailable, api.CodeNoPolicies, "")
	ps := ts.register(t, 2)
	var a api.AssignResponse
	want(t, ts.do(t, "POST", "/assign", `{"num_tasks":0}`), http.StatusOK, &a)
	if a.Assignments == nil || len(a.Assignments) != 0 || a.Policies == nil {
		t.Errorf("num_tasks 0 = %+v; want empty assignments and policies", a)
	}
	wantError(t, ts.do(t, "POST", "/assign", `{}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "num_tasks")
	for _, p := range ps {
		want(t, ts.do(t, "POST", "/policies/"+p.ID+"/drain", ""), http.StatusOK, nil)
	}
	// Nothing to wait for: answered at once, though timeout_ms is long.
	rec := ts.do(t, "POST", "/select", `{"timeout_ms":600000}`)
	wantError(t, rec, http.StatusServiceUnavailable, api.CodeAllUnavailable, "")
	if rec.Header().Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	wantError(t, ts.do(t, "POST", "/assign", `{"num_tasks":1}`), http.StatusServiceUnavailable, api.CodeAllUnavailable, "")
	e := wantError(t, ts.do(t, "POST", "/release", `{}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "lease_id")
	if !strings.Contains(e.Fields["lease_id"], "when index is absent") {
		t.Errorf("release {} says %q; want JSON field names", e.Fields["lease_id"])
	}
}

// /stats counts decisions and /select waits for the live page's charts.
func TestStatsCountDecisions(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 1)
	want(t, ts.do(t, "POST", "/assign", `{"num_tasks":2}`), http.StatusOK, nil)
	want(t, ts.do(t, "POST", "/select", `{}`), http.StatusOK, nil)
	wantError(t, ts.do(t, "POST", "/select", `{"timeout_ms":30}`), http.StatusServiceUnavailable, api.CodeNoIdlePolicy, "")
	var s api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &s)
	d := s.Decisions
	if d.AssignTotal != 1 || d.SelectTotal != 2 {
		t.Errorf("decisions %d assign, %d select; want 1, 2", d.AssignTotal, d.SelectTotal)
	}
	if len(d.SelectWait.Counts) != len(d.SelectWait.BoundsMS)+1 {
		t.Fatalf("histogram has %d counts for %d bounds", len(d.SelectWait.Counts), len(d.SelectWait.BoundsMS))
	}
	var total, slow uint64
	for i, c := range d.SelectWait.Counts {
		total += c
		if i == len(d.SelectWait.BoundsMS) || d.SelectWait.BoundsMS[i] >= 30 {
			slow += c // in a bucket that can hold a 30 ms wait
		}
	}
	if total != 2 || slow != 1 {
		t.Errorf("wait histogram %v over %v: %d calls, %d in buckets reaching 30 ms; want 2 and 1 (the one that waited 30 ms)", d.SelectWait.Counts, d.SelectWait.BoundsMS, total, slow)
	}
}

// A registered version shows in GET /policies/{id} and /stats.
func TestRegisteredVersion(t *testing.T) {
	ts := newTestServer(t, Config{})
	var p api.Policy
	want(t, ts.do(t, "POST", "/policies", `{"url":"http://127.0.0.1:9/p0","version":6}`), http.StatusCreated, &p)
	if p.Version != 6 {
		t.Errorf("registered policy version %d; want 6", p.Version)
	}
	var s api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &s)
	if s.Policies[0].Version != 6 {
		t.Errorf("/stats version %d; want 6", s.Policies[0].Version)
	}
	wantError(t, ts.do(t, "POST", "/policies", `{"url":"http://127.0.0.1:9/p1","version":-1}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "version")
}

// PUT /weights sets a floor every router respects; a request's
// min_version overrides it; nothing fresh is a 503 that says so.
func TestWeightsFloor(t *testing.T) {
	ts := newTestServer(t, Config{})
	want(t, ts.do(t, "PUT", "/registration", `{"policies":[{"url":"http://127.0.0.1:9/p0","index":0,"version":7},{"url":"http://127.0.0.1:9/p1","index":1,"version":8}],"topology":{}}`), http.StatusOK, nil)
	var w api.Weights
	want(t, ts.do(t, "GET", "/weights", ""), http.StatusOK, &w)
	if w.Version != 0 || w.MaxStaleness != nil || w.MinVersion != 0 {
		t.Errorf("unset weights = %+v", w)
	}
	want(t, ts.do(t, "PUT", "/weights", `{"version":9,"max_staleness":1}`), http.StatusOK, &w)
	if w.Version != 9 || w.MaxStaleness == nil || *w.MaxStaleness != 1 || w.MinVersion != 8 {
		t.Errorf("weights = %+v; want version 9, max_staleness 1, min_version 8", w)
	}
	var a api.AssignResponse
	want(t, ts.do(t, "POST", "/assign", `{"num_tasks":3}`), http.StatusOK, &a)
	for _, idx := range a.Assignments {
		if idx != 1 {
			t.Errorf("assignments %v under floor 8; want only policy 1", a.Assignments)
		}
	}
	var sel api.SelectResponse
	want(t, ts.do(t, "POST", "/select", `{"timeout_ms":0}`), http.StatusOK, &sel)
	if sel.Index != 1 {
		t.Errorf("select under floor 8 = policy %d; want 1", sel.Index)
	}
	// Policy 0 is idle but stale, policy 1 fresh but busy: waiting ends in
	// no_idle_policy; with a floor no policy meets, in no_fresh_policy.
	wantError(t, ts.do(t, "POST", "/select", `{"timeout_ms":20}`), http.StatusServiceUnavailable, api.CodeNoIdlePolicy, "")
	e := wantError(t, ts.do(t, "POST", "/select", `{"timeout_ms":20,"min_version":20}`), http.StatusServiceUnavailable, api.CodeNoFreshPolicy, "")
	if !strings.Contains(e.Message, "at least 20") {
		t.Errorf("no_fresh_policy message %q does not name the floor", e.Message)
	}
	want(t, ts.do(t, "POST", "/select", `{"timeout_ms":0,"min_version":7}`), http.StatusOK, &sel)
	if sel.Index != 0 {
		t.Errorf("select with min_version 7 = policy %d; want 0", sel.Index)
	}
	wantError(t, ts.do(t, "POST", "/assign", `{"num_tasks":1,"min_version":9}`), http.StatusServiceUnavailable, api.CodeNoFreshPolicy, "")
	var s api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &s)
	if s.MinVersion != 8 {
		t.Errorf("/stats min_version %d; want 8", s.MinVersion)
	}
	wantError(t, ts.do(t, "PUT", "/weights", `{"max_staleness":1}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "version")
	wantError(t, ts.do(t, "PUT", "/weights", `{"version":1,"max_staleness":-1}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "max_staleness")
}

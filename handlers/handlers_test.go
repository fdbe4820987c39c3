package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter"
	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/fleet"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/registry"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
	"github.com/policyrouter/policyrouter/updates"
)

// testServer is a Server on an in-memory store with its routes.
type testServer struct {
	*Server
	h http.Handler
}

func newTestServer(tb testing.TB, cfg Config) *testServer {
	tb.Helper()
	if cfg.State == nil {
		cfg.State = routing.New(routing.Options{})
	}
	st := store.NewMemory()
	reg, err := registry.Open(context.Background(), st, cfg.State)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Registry = reg
	if cfg.FleetLocks == nil {
		cfg.FleetLocks = &fleet.Locks{}
	}
	if cfg.Updates == nil {
		cfg.Updates, err = updates.New(updates.Config{Registry: reg, State: cfg.State, Store: st, Logger: discardLogger(), Locks: cfg.FleetLocks}, nil)
		if err != nil {
			tb.Fatal(err)
		}
	}
	cfg.Logger = discardLogger()
	cfg.OpenAPI = policyrouter.OpenAPI
	s := New(cfg)
	tb.Cleanup(s.CloseIdleConnections) // after the test's servers close: cleanups run last first
	return &testServer{Server: s, h: s.Handler()}
}

// do sends one request through the real router, checks the response
// against openapi.yaml and returns it.
func (ts *testServer) do(tb testing.TB, method, path, body string) *httptest.ResponseRecorder {
	tb.Helper()
	return ts.doReq(tb, ts.request(method, path, body))
}

func (ts *testServer) request(method, path, body string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

func (ts *testServer) doReq(tb testing.TB, req *http.Request) *httptest.ResponseRecorder {
	tb.Helper()
	rec := httptest.NewRecorder()
	ts.h.ServeHTTP(rec, req)
	checkSpec(tb, req, rec.Code, rec.Header(), rec.Body.Bytes())
	return rec
}

// want checks the status and decodes the body into out (if non-nil).
func want(tb testing.TB, rec *httptest.ResponseRecorder, status int, out any) {
	tb.Helper()
	if rec.Code != status {
		tb.Fatalf("status = %d, want %d; body: %s", rec.Code, status, rec.Body)
	}
	if out != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			tb.Fatalf("decode %s: %v", rec.Body, err)
		}
	}
}

// wantError checks an error envelope: status, code, and (if field is not
// empty) that the field is named.
func wantError(tb testing.TB, rec *httptest.ResponseRecorder, status int, code, field string) api.ErrorBody {
	tb.Helper()
	var env api.ErrorResponse
	want(tb, rec, status, &env)
	if env.Error.Code != code {
		tb.Errorf("code = %q, want %q (%s)", env.Error.Code, code, rec.Body)
	}
	if env.Error.RequestID == "" || env.Error.RequestID != rec.Header().Get("X-Request-ID") {
		tb.Errorf("request_id %q does not match X-Request-ID %q", env.Error.RequestID, rec.Header().Get("X-Request-ID"))
	}
	if field != "" {
		if _, ok := env.Error.Fields[field]; !ok {
			tb.Errorf("fields = %v, want %q named", env.Error.Fields, field)
		}
	}
	return env.Error
}

// register puts n policies at indices 0..n-1 with the given nodes (may be
// shorter than n) and returns them.
func (ts *testServer) register(tb testing.TB, n int, nodes ...string) []api.Policy {
	tb.Helper()
	var req api.ReplacePoliciesRequest
	for i := range n {
		idx := i
		pr := api.PolicyRequest{URL: "http://127.0.0.1:9/p" + itoa(i), Index: &idx}
		if i < len(nodes) {
			pr.NodeID = nodes[i]
		}
		req.Policies = append(req.Policies, pr)
	}
	body, _ := json.Marshal(req)
	var out api.PolicyList
	want(tb, ts.do(tb, "PUT", "/policies", string(body)), http.StatusOK, &out)
	return out.Policies
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func TestHealthAndSpec(t *testing.T) {
	ts := newTestServer(t, Config{})
	want(t, ts.do(t, "GET", "/healthz", ""), http.StatusOK, nil)
	ts.register(t, 1)
	want(t, ts.do(t, "GET", "/readyz", ""), http.StatusOK, nil)
	rec := ts.do(t, "GET", "/openapi.yaml", "")
	want(t, rec, http.StatusOK, nil)
	if !strings.Contains(rec.Body.String(), "openapi:") {
		t.Errorf("/openapi.yaml does not look like an OpenAPI document: %.80s", rec.Body)
	}

	notReady := newTestServer(t, Config{Ready: func() error { return errors.New("waiting for the first probe of 2 of 4 policies") }})
	notReady.register(t, 1)
	rec = notReady.do(t, "GET", "/readyz", "")
	want(t, rec, http.StatusServiceUnavailable, nil)
	if !strings.Contains(rec.Body.String(), "first probe of 2 of 4") {
		t.Errorf("/readyz body %s does not say why it is not ready", rec.Body)
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	ts := newTestServer(t, Config{})
	// Not in the spec, by definition: sent without checkSpec.
	for _, tt := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/nope", http.StatusNotFound, api.CodeNotFound},
		{"DELETE", "/assign", http.StatusMethodNotAllowed, api.CodeMethodNotAllowed},
	} {
		rec := httptest.NewRecorder()
		ts.h.ServeHTTP(rec, ts.request(tt.method, tt.path, ""))
		wantError(t, rec, tt.status, tt.code, "")
	}
	rec := httptest.NewRecorder()
	ts.h.ServeHTTP(rec, ts.request("DELETE", "/topology", ""))
	if got := rec.Header().Get("Allow"); got != "GET, PUT" {
		t.Errorf("Allow = %q, want \"GET, PUT\"", got)
	}
}

func TestRequestIDEchoed(t *testing.T) {
	ts := newTestServer(t, Config{})
	req := ts.request("GET", "/healthz", "")
	req.Header.Set("X-Request-ID", "trainer-42")
	if got := ts.doReq(t, req).Header().Get("X-Request-ID"); got != "trainer-42" {
		t.Errorf("X-Request-ID = %q, want the caller's", got)
	}
	req = ts.request("GET", "/healthz", "")
	req.Header.Set("X-Request-ID", "bad id\twith spaces")
	if got := ts.doReq(t, req).Header().Get("X-Request-ID"); got == "" || strings.Contains(got, " ") {
		t.Errorf("X-Request-ID = %q, want a fresh id", got)
	}
}

func TestDecodeErrors(t *testing.T) {
	ts := newTestServer(t, Config{MaxBodyBytes: 1024})
	tests := []struct {
		name        string
		contentType string
		body        string
		status      int
		code        string
		field       string
	}{
		{"malformed", "application/json", `{"num_tasks":`, 400, api.CodeBadRequest, ""},
		{"syntax", "application/json", `{"num_tasks" 1}`, 400, api.CodeBadRequest, ""},
		{"empty body", "application/json", ``, 400, api.CodeBadRequest, ""},
		{"not an object", "application/json", `[1,2]`, 400, api.CodeBadRequest, ""},
		{"two values", "application/json", `{"num_tasks":1}{"num_tasks":2}`, 400, api.CodeBadRequest, ""},
		{"wrong type", "application/json", `{"num_tasks":"four"}`, 422, api.CodeValidationFailed, "num_tasks"},
		{"float", "application/json", `{"num_tasks":1.5}`, 422, api.CodeValidationFailed, "num_tasks"},
		{"unknown field", "application/json", `{"num_tasks":1,"tasks":2}`, 422, api.CodeValidationFailed, "tasks"},
		{"too large", "application/json", `{"num_tasks":1,"env_ids":["` + strings.Repeat("x", 20000) + `"]}`, 413, api.CodeTooLarge, ""},
		{"form content type", "application/x-www-form-urlencoded", `{"num_tasks":1}`, 415, api.CodeUnsupportedMedia, ""},
		{"no content type", "", `{"num_tasks":1}`, 415, api.CodeUnsupportedMedia, ""},
		{"nested field", "application/json", `{"num_tasks":1,"current_loads":[1,"x"]}`, 422, api.CodeValidationFailed, "current_loads"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "/assign", strings.NewReader(tt.body))
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			wantError(t, ts.doReq(t, req), tt.status, tt.code, tt.field)
		})
	}
}

func TestRegisterPolicy(t *testing.T) {
	ts := newTestServer(t, Config{})
	rec := ts.do(t, "POST", "/policies", `{"url":"http://127.0.0.1:9001","node_id":"node-a","labels":{"gpu":"a100"}}`)
	var p api.Policy
	want(t, rec, http.StatusCreated, &p)
	if p.Index != 0 || p.ID == "" || p.Capacity != 1 || p.NodeID != "node-a" || p.Labels["gpu"] != "a100" {
		t.Errorf("registered %+v", p)
	}
	if loc := rec.Header().Get("Location"); loc != "/policies/"+p.ID {
		t.Errorf("Location = %q", loc)
	}

	// The lowest free index is taken by default.
	var p2 api.Policy
	want(t, ts.do(t, "POST", "/policies", `{"url":"http://127.0.0.1:9002","index":2,"id":"two","capacity":3}`), http.StatusCreated, &p2)
	var p1 api.Policy
	want(t, ts.do(t, "POST", "/policies", `{"url":"http://127.0.0.1:9003"}`), http.StatusCreated, &p1)
	if p1.Index != 1 || p2.Index != 2 || p2.ID != "two" || p2.Capacity != 3 {
		t.Errorf("indices: got %d and %+v", p1.Index, p2)
	}

	// The same body again is idempotent; a different one conflicts.
	var again api.Policy
	want(t, ts.do(t, "POST", "/policies", `{"url":"http://127.0.0.1:9002","index":2,"id":"two","capacity":3}`), http.StatusOK, &again)
	if again.ID != "two" {
		t.Errorf("idempotent register returned %+v", again)
	}
	want(t, ts.do(t, "POST", "/policies", `{"url":"http://127.0.0.1:9002","index":2,"capacity":3}`), http.StatusOK, nil)
	wantError(t, ts.do(t, "POST", "/policies", `{"url":"http://127.0.0.1:9999","index":2}`), http.StatusConflict, api.CodeConflict, "")
	wantError(t, ts.do(t, "POST", "/policies", `{"url":"http://127.0.0.1:9002","id":"two","capacity":1}`), http.StatusConflict, api.CodeConflict, "")

	var list api.PolicyList
	want(t, ts.do(t, "GET", "/policies", ""), http.StatusOK, &list)
	if len(list.Policies) != 3 || list.Policies[0].Index != 0 || list.Policies[1].Index != 1 || list.Policies[2].Index != 2 {
		t.Errorf("list not in index order: %+v", list.Policies)
	}
	var got api.Policy
	want(t, ts.do(t, "GET", "/policies/two", ""), http.StatusOK, &got)
	if got.URL != "http://127.0.0.1:9002" {
		t.Errorf("get = %+v", got)
	}
	wantError(t, ts.do(t, "GET", "/policies/none", ""), http.StatusNotFound, api.CodeNotFound, "")

	// Ids are found however the client escaped them.
	want(t, ts.do(t, "POST", "/policies", `{"url":"http://127.0.0.1:9004","id":"a b:c"}`), http.StatusCreated, nil)
	for _, path := range []string{"/policies/a%20b:c", "/policies/a%20b%3Ac"} {
		want(t, ts.do(t, "GET", path, ""), http.StatusOK, &got)
		if got.ID != "a b:c" {
			t.Errorf("GET %s = %+v", path, got)
		}
	}
}

func TestRegisterPolicyInvalid(t *testing.T) {
	ts := newTestServer(t, Config{})
	tests := []struct {
		name, body, field string
	}{
		{"missing url", `{}`, "url"},
		{"ftp url", `{"url":"ftp://example.com"}`, "url"},
		{"relative url", `{"url":"/idle"}`, "url"},
		{"credentials", `{"url":"http://user:pw@127.0.0.1:9"}`, "url"},
		{"query", `{"url":"http://127.0.0.1:9/?a=b"}`, "url"},
		{"negative index", `{"url":"http://127.0.0.1:9","index":-1}`, "index"},
		{"huge index", `{"url":"http://127.0.0.1:9","index":99999999}`, "index"},
		{"zero capacity", `{"url":"http://127.0.0.1:9","capacity":0}`, "capacity"},
		{"id with slash", `{"url":"http://127.0.0.1:9","id":"a/b"}`, "id"},
		{"label value type", `{"url":"http://127.0.0.1:9","labels":{"a":1}}`, "labels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, ts.do(t, "POST", "/policies", tt.body), http.StatusUnprocessableEntity, api.CodeValidationFailed, tt.field)
		})
	}
}

func TestReplacePolicies(t *testing.T) {
	ts := newTestServer(t, Config{})
	first := ts.register(t, 3)
	// The same set again keeps the ids (and so the live state).
	again := ts.register(t, 3)
	for i := range first {
		if first[i].ID != again[i].ID {
			t.Errorf("policy %d: id changed from %s to %s", i, first[i].ID, again[i].ID)
		}
	}
	wantError(t, ts.do(t, "PUT", "/policies", `{"policies":[{"url":"http://a:1","index":1},{"url":"http://b:1","index":1}]}`),
		http.StatusUnprocessableEntity, api.CodeValidationFailed, "policies[1].index")
	wantError(t, ts.do(t, "PUT", "/policies", `{"policies":[{"url":"http://a:1"},{"url":"mailto:x"}]}`),
		http.StatusUnprocessableEntity, api.CodeValidationFailed, "policies[1].url")
	wantError(t, ts.do(t, "PUT", "/policies", `{}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "policies")

	var out api.PolicyList
	want(t, ts.do(t, "PUT", "/policies", `{"policies":[]}`), http.StatusOK, &out)
	if len(out.Policies) != 0 {
		t.Errorf("after replacing with none: %+v", out.Policies)
	}
}

func TestDeleteAndDrain(t *testing.T) {
	ts := newTestServer(t, Config{})
	ps := ts.register(t, 2)
	var p api.Policy
	want(t, ts.do(t, "POST", "/policies/"+ps[0].ID+"/drain", ""), http.StatusOK, &p)
	if !p.Draining {
		t.Errorf("drain returned %+v", p)
	}
	// A drained policy gets no work.
	for range 3 {
		var a api.AssignResponse
		want(t, ts.do(t, "POST", "/assign", `{"num_tasks":2}`), http.StatusOK, &a)
		for _, idx := range a.Assignments {
			if idx == 0 {
				t.Fatalf("drained policy 0 assigned: %v", a.Assignments)
			}
		}
	}
	var sel api.SelectResponse
	want(t, ts.do(t, "POST", "/select", `{"timeout_ms":0}`), http.StatusOK, &sel)
	if sel.Index != 1 {
		t.Errorf("selected %d, want the undrained 1", sel.Index)
	}
	wantError(t, ts.do(t, "POST", "/select", `{"timeout_ms":0}`), http.StatusServiceUnavailable, api.CodeNoIdlePolicy, "")
	want(t, ts.do(t, "POST", "/policies/"+ps[0].ID+"/resume", ""), http.StatusOK, &p)
	want(t, ts.do(t, "POST", "/select", `{"timeout_ms":0}`), http.StatusOK, &sel)
	if sel.Index != 0 {
		t.Errorf("selected %d after resume, want 0", sel.Index)
	}

	wantError(t, ts.do(t, "POST", "/policies/nope/drain", ""), http.StatusNotFound, api.CodeNotFound, "")
	rec := ts.do(t, "DELETE", "/policies/"+ps[1].ID, "")
	if rec.Code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	wantError(t, ts.do(t, "DELETE", "/policies/"+ps[1].ID, ""), http.StatusNotFound, api.CodeNotFound, "")
}

func TestTopology(t *testing.T) {
	ts := newTestServer(t, Config{})
	ps := ts.register(t, 3)
	body := `{"node-a":{"env":{"ids":[0,1]},"eval":{"ids":[0,1]}},"node-b":{"env":{"ids":[2]},"eval":{"ids":[2]}}}`
	want(t, ts.do(t, "PUT", "/topology", body), http.StatusOK, nil)
	var got routing.Topology
	want(t, ts.do(t, "GET", "/topology", ""), http.StatusOK, &got)
	if ids := got.Eval("node-b"); len(ids) != 1 || ids[0] != 2 {
		t.Errorf("topology not stored as sent: %+v", got)
	}
	// Policies registered without a node take the topology's.
	var p api.Policy
	want(t, ts.do(t, "GET", "/policies/"+ps[2].ID, ""), http.StatusOK, &p)
	if p.NodeID != "node-b" {
		t.Errorf("policy 2 node = %q, want node-b from the topology", p.NodeID)
	}
	// A policy the topology names cannot be deleted under it; the answer
	// says how to do it.
	e := wantError(t, ts.do(t, "DELETE", "/policies/"+ps[2].ID, ""), http.StatusConflict, api.CodeConflict, "")
	if !strings.Contains(e.Message, "PUT /registration") {
		t.Errorf("409 message %q does not point to PUT /registration", e.Message)
	}

	tests := []struct {
		name, body, field string
		mention           string // a word the message must hold
	}{
		{"env without eval", `{"node-a":{"env":{"ids":[0]}}}`, "topology.node-a.eval.ids", `"node-a"`},
		{"eval without env", `{"node-a":{"eval":{"ids":[0]}}}`, "topology.node-a.env.ids", `"node-a"`},
		{"env on two nodes", `{"a":{"env":{"ids":[0]},"eval":{"ids":[0]}},"b":{"env":{"ids":[0]},"eval":{"ids":[1]}}}`, "topology.b.env.ids", `"b"`},
		{"negative id", `{"a":{"env":{"ids":[-1]},"eval":{"ids":[0]}}}`, "topology.a.env.ids", `"a"`},
		{"eval id with no policy", `{"a":{"env":{"ids":[0]},"eval":{"ids":[9]}}}`, "topology.a.eval.ids", `"a"`},
		{"ids not ints", `{"a":{"env":{"ids":["x"]}}}`, "topology.a.env", "ids"},
		{"a typo of a kind", `{"node-a":{"envs":{"ids":[0]},"eval":{"ids":[0]}}}`, "topology.node-a.envs", "env or eval"},
		{"a component that is a list", `{"node-a":{"env":[0,1]}}`, "topology.node-a.env", "ids"},
		{"a node that is not an object", `{"node-a":[0]}`, "topology.node-a", "object"},
		{"the topology wrapped", `{"topology":{}}`, "topology.topology", "PUT /registration"},
		{"not an object", `[1]`, "topology", "object"},
		{"null", `null`, "topology", "object"},
		{"a node_id contradicting the topology", `{"node-a":{"env":{"ids":[0]},"eval":{"ids":[0]}},"node-b":{"env":{"ids":[1]},"eval":{"ids":[1,2]}}}`, "topology.node-b.eval.ids", `"elsewhere"`},
	}
	// Policy 2 registered on node "elsewhere" for the contradiction.
	idx := 2
	want(t, ts.do(t, "PUT", "/registration", `{"policies":[{"url":"http://127.0.0.1:9/p0","index":0},{"url":"http://127.0.0.1:9/p1","index":1},{"url":"http://127.0.0.1:9/p2","index":`+itoa(idx)+`,"node_id":"elsewhere"}],"topology":{}}`), http.StatusOK, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := wantError(t, ts.do(t, "PUT", "/topology", tt.body), http.StatusUnprocessableEntity, api.CodeValidationFailed, tt.field)
			if !strings.Contains(e.Message, tt.mention) {
				t.Errorf("message %q does not mention %s", e.Message, tt.mention)
			}
		})
	}
}

func TestSelectDisconnectConsumesNothing(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 1)
	var sel api.SelectResponse
	want(t, ts.do(t, "POST", "/select", `{}`), http.StatusOK, &sel)

	// A second caller waits, then goes away.
	ctx, cancel := context.WithCancel(context.Background())
	req := ts.request("POST", "/select", `{"timeout_ms":60000}`).WithContext(ctx)
	done := make(chan *httptest.ResponseRecorder)
	go func() {
		rec := httptest.NewRecorder()
		ts.h.ServeHTTP(rec, req)
		done <- rec
	}()
	poll.Until(t, "one waiter", func() bool { return ts.State.Stats().Waiters == 1 })
	cancel()
	<-done
	// The release goes to nobody gone: the policy is idle again.
	want(t, ts.do(t, "POST", "/release", `{"lease_id":"`+sel.LeaseID+`"}`), http.StatusOK, nil)
	want(t, ts.do(t, "POST", "/select", `{"timeout_ms":0}`), http.StatusOK, &sel)
}

func TestSelectShutdownAnswers503(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 1)
	want(t, ts.do(t, "POST", "/select", `{}`), http.StatusOK, nil)
	done := ts.waitingSelect(t)
	ts.Stop()
	rec := <-done
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("waiting select at shutdown: %d %v", rec.Code, rec.Header())
	}
}

// waitingSelect starts a /select that waits (up to a minute) and returns
// once it is queued; its answer comes on the channel.
func (ts *testServer) waitingSelect(tb testing.TB) <-chan *httptest.ResponseRecorder {
	tb.Helper()
	before := ts.State.Stats().Waiters
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		ts.h.ServeHTTP(rec, ts.request("POST", "/select", `{"timeout_ms":60000}`))
		done <- rec
	}()
	poll.Until(tb, "one more waiter", func() bool { return ts.State.Stats().Waiters == before+1 })
	return done
}

// TestSelectOverloaded fills the waiter list and checks that one more
// waiting /select is answered 503 overloaded with Retry-After, while a
// /select that would not wait still gets its usual answer.
func TestSelectOverloaded(t *testing.T) {
	ts := newTestServer(t, Config{State: routing.New(routing.Options{MaxWaiters: 1})})
	ts.register(t, 1)
	want(t, ts.do(t, "POST", "/select", `{}`), http.StatusOK, nil)
	done := ts.waitingSelect(t)
	rec := ts.do(t, "POST", "/select", `{"timeout_ms":60000}`)
	wantError(t, rec, http.StatusServiceUnavailable, api.CodeOverloaded, "")
	if rec.Header().Get("Retry-After") == "" {
		t.Errorf("overloaded answer without Retry-After: %v", rec.Header())
	}
	wantError(t, ts.do(t, "POST", "/select", `{"timeout_ms":0}`), http.StatusServiceUnavailable, api.CodeNoIdlePolicy, "")
	ts.Stop()
	<-done
}

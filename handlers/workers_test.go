package handlers

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/poller"
	"github.com/policyrouter/policyrouter/routing"
)

// newWorkerServer is a test server whose workers' capacities are read
// from their engines by a poller (not running), with engine as the
// server's --default-engine.
func newWorkerServer(tb testing.TB, engine string) *testServer {
	tb.Helper()
	p := poller.New(nil, poller.Config{Logger: discardLogger()})
	ts := newTestServer(tb, Config{EngineCapacity: p.EngineCapacity})
	ts.Registry.SetDefaultEngine(engine)
	return ts
}

func newSGLangFleet(tb testing.TB, n, maxRunning int) *fakepolicy.Fleet {
	tb.Helper()
	f, err := fakepolicy.New(n, nil, fakepolicy.Options{Engine: fakepolicy.EngineSGLang, MaxRunning: maxRunning})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = f.Close() })
	return f
}

// slime's registration, POST /workers {"url", "worker_type": "regular"},
// makes an ordinary policy of the default engine at the capacity its
// SGLang server reports, answered with SMG's 202; GET /workers lists it
// with the keys slime reads (id, url), GET and DELETE /workers/{id} find
// it by its policy id.
func TestWorkersLifecycle(t *testing.T) {
	ts := newWorkerServer(t, "sglang")
	f := newSGLangFleet(t, 1, 8)

	rec := ts.do(t, http.MethodPost, "/workers", `{"url": "`+f.URL(0)+`", "worker_type": "regular", "bootstrap_port": null}`)
	var acc api.WorkerAccepted
	want(t, rec, http.StatusAccepted, &acc)
	if acc.Status != "accepted" || acc.WorkerID == "" || acc.URL != f.URL(0) || acc.Location != "/workers/"+acc.WorkerID ||
		rec.Header().Get("Location") != acc.Location {
		t.Fatalf("202 body %+v, Location %q", acc, rec.Header().Get("Location"))
	}

	var pol api.Policy
	want(t, ts.do(t, http.MethodGet, "/policies/"+acc.WorkerID, ""), http.StatusOK, &pol)
	if pol.Engine != "sglang" || pol.Capacity != 8 || pol.URL != f.URL(0) {
		t.Errorf("the worker's policy: engine %q capacity %d url %q; want sglang, 8 (max_running_requests), %s", pol.Engine, pol.Capacity, pol.URL, f.URL(0))
	}

	var list api.WorkerList
	want(t, ts.do(t, http.MethodGet, "/workers?model=any", ""), http.StatusOK, &list)
	if list.Total != 1 || list.Stats.RegularCount != 1 || len(list.Workers) != 1 {
		t.Fatalf("GET /workers: %+v; want one regular worker", list)
	}
	w := list.Workers[0]
	if w.ID != acc.WorkerID || w.URL != f.URL(0) || w.RuntimeType != "sglang" || w.Capacity != 8 || w.WorkerType != "regular" {
		t.Errorf("listed worker %+v", w)
	}

	var one api.WorkerInfo
	want(t, ts.do(t, http.MethodGet, "/workers/"+acc.WorkerID, ""), http.StatusOK, &one)
	if one.ID != acc.WorkerID {
		t.Errorf("GET /workers/{id}: %+v", one)
	}

	rec = ts.do(t, http.MethodDelete, "/workers/"+acc.WorkerID, "")
	var del api.WorkerAccepted
	want(t, rec, http.StatusAccepted, &del)
	if del.Status != "accepted" || del.WorkerID != acc.WorkerID {
		t.Errorf("DELETE answer %+v", del)
	}
	wantError(t, ts.do(t, http.MethodGet, "/workers/"+acc.WorkerID, ""), http.StatusNotFound, api.CodeNotFound, "")
	wantError(t, ts.do(t, http.MethodDelete, "/workers/"+acc.WorkerID, ""), http.StatusNotFound, api.CodeNotFound, "")
	if n := len(ts.Registry.Current().Policies); n != 0 {
		t.Errorf("%d policies after the delete; want 0", n)
	}
}

// runtime_type chooses the engine, and the capacity it is asked for;
// policyrouter's own capacity skips the question; a url registered
// already is SMG's 409.
func TestWorkersEngineAndCapacity(t *testing.T) {
	ts := newWorkerServer(t, "")
	f := newSGLangFleet(t, 3, 5)
	vllm, err := fakepolicy.New(1, nil, fakepolicy.Options{Engine: fakepolicy.EngineVLLM})
	if err != nil {
		t.Fatal(err)
	}
	defer vllm.Close()
	for _, tt := range []struct {
		body           string
		engine         string
		capacity, node string
	}{
		{`{"url": "` + f.URL(0) + `", "runtime_type": "sglang"}`, "sglang", "5", ""},
		{`{"url": "` + f.URL(1) + `", "runtime": "sglang", "capacity": 3, "node_id": "node-a", "labels": {"pool": "a"}, "priority": 50, "cost": 1.0}`, "sglang", "3", "node-a"},
		{`{"url": "` + vllm.URL(0) + `", "runtime_type": "vllm"}`, "vllm", "256", ""}, // no /server_info outside dev mode
		{`{"url": "` + f.URL(2) + `", "runtime_type": "unspecified"}`, "policyrouter", "1", ""},
	} {
		var acc api.WorkerAccepted
		want(t, ts.do(t, http.MethodPost, "/workers", tt.body), http.StatusAccepted, &acc)
		var w api.WorkerInfo
		want(t, ts.do(t, http.MethodGet, "/workers/"+url.PathEscape(acc.WorkerID), ""), http.StatusOK, &w)
		if w.RuntimeType != tt.engine || strings.TrimSpace(jsonInt(w.Capacity)) != tt.capacity || w.NodeID != tt.node {
			t.Errorf("%s: runtime_type %q capacity %d node %q; want %s, %s, %q", tt.body, w.RuntimeType, w.Capacity, w.NodeID, tt.engine, tt.capacity, tt.node)
		}
	}
	wantError(t, ts.do(t, http.MethodPost, "/workers", `{"url": "`+f.URL(0)+`"}`), http.StatusConflict, api.CodeConflict, "url")
}

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

// Bad input is a 4xx naming the field: 400 for what SMG answers 400 (a
// body that is not JSON, a url it cannot use), 422 for what
// policyrouter cannot honour. Fields SMG has and policyrouter does not
// read are ignored, as SMG ignores unknown ones.
func TestWorkersBadInput(t *testing.T) {
	ts := newWorkerServer(t, "sglang")
	for _, tt := range []struct {
		body   string
		status int
		code   string
		field  string
	}{
		{`{"url": `, http.StatusBadRequest, api.CodeBadRequest, ""},
		{`[1]`, http.StatusBadRequest, api.CodeBadRequest, ""},
		{`{}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "url"},
		{`{"url": "10.0.0.5:8000"}`, http.StatusBadRequest, api.CodeBadRequest, "url"},
		{`{"url": "grpc://10.0.0.5:8000"}`, http.StatusBadRequest, api.CodeBadRequest, "url"},
		{`{"url": "http://10.0.0.5:8000", "worker_type": "prefill", "bootstrap_port": 8998}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "worker_type"},
		{`{"url": "http://10.0.0.5:8000", "connection_mode": "grpc"}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "connection_mode"},
		{`{"url": "http://10.0.0.5:8000", "runtime_type": "trtllm"}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "runtime_type"},
		{`{"url": "http://10.0.0.5:8000", "runtime": "mlx"}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "runtime"},
		{`{"url": "http://10.0.0.5:8000", "priority": 80}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "priority"},
		{`{"url": "http://10.0.0.5:8000", "cost": 2.5}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "cost"},
		{`{"url": "http://10.0.0.5:8000", "labels": ["a"]}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "labels"},
		{`{"url": "http://10.0.0.5:8000", "capacity": 0}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "capacity"},
		{`{"url": 7}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "url"},
	} {
		t.Run(tt.body, func(t *testing.T) {
			wantError(t, ts.do(t, http.MethodPost, "/workers", tt.body), tt.status, tt.code, tt.field)
		})
	}
	rec := ts.doReq(t, ts.request(http.MethodPost, "/workers", ""))
	wantError(t, rec, http.StatusUnsupportedMediaType, api.CodeUnsupportedMedia, "")
	if n := len(ts.Registry.Current().Policies); n != 0 {
		t.Errorf("%d policies registered by bad requests; want 0", n)
	}
}

// The older router's routes: /add_worker?url= registers like POST
// /workers and answers plain text, /list_workers lists the urls,
// /remove_worker?url= removes; every failure of the request is 400.
func TestWorkersLegacy(t *testing.T) {
	ts := newWorkerServer(t, "sglang")
	f := newSGLangFleet(t, 1, 4)
	u := f.URL(0)
	rec := ts.do(t, http.MethodPost, "/add_worker?url="+url.QueryEscape(u), "")
	if rec.Code != http.StatusOK || rec.Body.String() != "Worker "+u+" added successfully" {
		t.Fatalf("POST /add_worker: %d %q", rec.Code, rec.Body)
	}
	ps := ts.Registry.Current().Policies
	if len(ps) != 1 || ps[0].EngineName() != "sglang" || ps[0].Capacity != 4 {
		t.Fatalf("policies after /add_worker: %+v; want one sglang policy of capacity 4", ps)
	}
	wantError(t, ts.do(t, http.MethodPost, "/add_worker?url="+url.QueryEscape(u), ""), http.StatusBadRequest, api.CodeConflict, "url")
	wantError(t, ts.do(t, http.MethodPost, "/add_worker", ""), http.StatusBadRequest, api.CodeBadRequest, "url")
	wantError(t, ts.do(t, http.MethodPost, "/add_worker?url=not-a-url", ""), http.StatusBadRequest, api.CodeBadRequest, "url")

	var urls api.WorkerURLList
	want(t, ts.do(t, http.MethodGet, "/list_workers", ""), http.StatusOK, &urls)
	if len(urls.URLs) != 1 || urls.URLs[0] != u {
		t.Errorf("GET /list_workers: %+v; want [%s]", urls, u)
	}

	rec = ts.do(t, http.MethodPost, "/remove_worker?url="+url.QueryEscape(u), "")
	if rec.Code != http.StatusOK || rec.Body.String() != "Worker "+u+" removed successfully" {
		t.Fatalf("POST /remove_worker: %d %q", rec.Code, rec.Body)
	}
	wantError(t, ts.do(t, http.MethodPost, "/remove_worker?url="+url.QueryEscape(u), ""), http.StatusBadRequest, api.CodeNotFound, "url")
	want(t, ts.do(t, http.MethodGet, "/list_workers", ""), http.StatusOK, &urls)
	if len(urls.URLs) != 0 {
		t.Errorf("GET /list_workers after the removal: %v", urls.URLs)
	}
}

// A worker's state reads as SMG's status, and its load is the policy's
// occupancy.
func TestWorkerStatus(t *testing.T) {
	ts := newWorkerServer(t, "sglang")
	f := newSGLangFleet(t, 1, 4)
	var acc api.WorkerAccepted
	want(t, ts.do(t, http.MethodPost, "/workers", `{"url": "`+f.URL(0)+`"}`), http.StatusAccepted, &acc)
	status := func(what, wantStatus string, wantHealthy bool) api.WorkerInfo {
		t.Helper()
		var w api.WorkerInfo
		want(t, ts.do(t, http.MethodGet, "/workers/"+acc.WorkerID, ""), http.StatusOK, &w)
		if w.Status != wantStatus || w.IsHealthy != wantHealthy {
			t.Errorf("%s: status %q healthy %t; want %s %t", what, w.Status, w.IsHealthy, wantStatus, wantHealthy)
		}
		return w
	}
	ts.State.ObserveProbe(acc.WorkerID, routing.Probe{SentAt: time.Now(), OK: true, Idle: true, Load: 2, HasLoad: true})
	if w := status("answering with load 2", "ready", true); w.Load != 2 {
		t.Errorf("load %d; want the engine's 2", w.Load)
	}
	want(t, ts.do(t, http.MethodPost, "/policies/"+acc.WorkerID+"/drain", ""), http.StatusOK, nil)
	status("drained", "draining", false)
	want(t, ts.do(t, http.MethodPost, "/policies/"+acc.WorkerID+"/resume", ""), http.StatusOK, nil)
	for range 10 {
		ts.State.ObserveProbe(acc.WorkerID, routing.Probe{SentAt: time.Now(), Err: "status 500", ErrKind: routing.ErrKindStatus(500)})
	}
	status("failing", "not_ready", false)
}

// POST /finish_session?session_id= answers 200 for any session: there is
// no session table to release from. A missing or oversized id is 422.
func TestFinishSession(t *testing.T) {
	ts := newTestServer(t, Config{})
	var out api.FinishSessionResponse
	want(t, ts.do(t, http.MethodPost, "/finish_session?session_id=traj-7", ""), http.StatusOK, &out)
	if out.Status != "ok" || out.SessionID != "traj-7" {
		t.Errorf("answer %+v", out)
	}
	wantError(t, ts.do(t, http.MethodPost, "/finish_session", ""), http.StatusUnprocessableEntity, api.CodeValidationFailed, "session_id")
	wantError(t, ts.do(t, http.MethodPost, "/finish_session?session_id="+strings.Repeat("s", routing.MaxSessionBytes+1), ""),
		http.StatusUnprocessableEntity, api.CodeValidationFailed, "session_id")
}

package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/poller"
	"github.com/policyrouter/policyrouter/routing"
)

// polledServer is a router whose poller probes the policies every 10 ms.
func polledServer(tb testing.TB) (*testServer, *routing.State) {
	tb.Helper()
	st := routing.New(routing.Options{Polled: true, Serves: engine.Serves})
	pl := poller.New(st, poller.Config{Interval: 10 * time.Millisecond, Logger: discardLogger()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = pl.Run(ctx); close(done) }()
	tb.Cleanup(func() { cancel(); <-done })
	return newTestServer(tb, Config{State: st, Poller: pl}), st
}

func fakeFleet(tb testing.TB, n int, opts fakepolicy.Options) *fakepolicy.Fleet {
	tb.Helper()
	f, err := fakepolicy.New(n, nil, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = f.Close() })
	return f
}

func fleetAnswer(tb testing.TB, rec *httptest.ResponseRecorder) api.FleetResponse {
	tb.Helper()
	var out api.FleetResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		tb.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
	}
	return out
}

// controlCalls are a fake's calls but its probes, without the /p/{n}
// prefix.
func controlCalls(fp *fakepolicy.Policy) []string {
	var out []string
	for _, c := range fp.Calls() {
		method, path, _ := strings.Cut(c, " ")
		if rest, ok := strings.CutPrefix(path, "/p/"); ok {
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				path = rest[i:]
			}
		}
		switch strings.SplitN(path, "?", 2)[0] {
		case "/v1/loads", "/model_info", "/get_model_info", "/metrics", "/is_paused", "/is_sleeping", "/weight_info", "/v1/models", "/get_weight_version", "/server_info", "/get_server_info":
			continue
		}
		out = append(out, method+" "+path)
	}
	return out
}

// POST /fleet/sleep then /fleet/wake over a mixed SGLang and vLLM fleet:
// each engine gets exactly its calls, in order; every policy is asleep in
// between and gets no proxied request while asleep; all are routed again
// after the wake.
func TestFleetSleepWakeMixed(t *testing.T) {
	ts, st := polledServer(t)
	sg := fakeFleet(t, 2, fakepolicy.Options{Engine: engine.SGLang})
	vl := fakeFleet(t, 2, fakepolicy.Options{Engine: engine.VLLM})
	var pols []api.PolicyRequest
	fps := []*fakepolicy.Policy{sg.Policy(0), sg.Policy(1), vl.Policy(0), vl.Policy(1)}
	for i, fp := range fps {
		idx, eng := i, engine.SGLang
		if i >= 2 {
			eng = engine.VLLM
		}
		pols = append(pols, api.PolicyRequest{URL: fp.URL(), Index: &idx, Engine: eng})
	}
	body, _ := json.Marshal(api.ReplacePoliciesRequest{Policies: pols})
	want(t, ts.do(t, "PUT", "/policies", string(body)), http.StatusOK, nil)
	states := func(want string) func() bool {
		return func() bool {
			for _, ps := range st.Stats().Policies {
				if ps.State != want {
					return false
				}
			}
			return true
		}
	}
	poll.Until(t, "every policy idle", states(routing.StateIdle))

	rec := ts.do(t, "POST", "/fleet/sleep", `{"level": 1}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("sleep: %d %s", rec.Code, rec.Body)
	}
	if out := fleetAnswer(t, rec); len(out.Results) != 4 || len(out.Failed) != 0 {
		t.Fatalf("sleep answer %+v", out)
	}
	poll.Until(t, "every policy asleep", states(routing.StateAsleep))
	// The record is the registration's, stored: a restarted router or
	// another replica reads it.
	marks := func() []bool {
		var out []bool
		for _, p := range ts.Registry.Current().Policies {
			out = append(out, p.SleepMarked)
		}
		return out
	}
	if got := marks(); !slices.Equal(got, []bool{true, true, true, true}) {
		t.Errorf("asleep records %v; want all set", got)
	}
	served := make([]uint64, len(fps))
	for i, fp := range fps {
		served[i] = fp.Works()
	}
	// Proxied requests while asleep find no policy.
	for range 4 {
		rec := ts.do(t, "POST", "/select", `{"timeout_ms": 0}`)
		if rec.Code == http.StatusOK {
			t.Fatalf("/select while asleep: %d %s", rec.Code, rec.Body)
		}
	}
	for i, fp := range fps {
		if !fp.Asleep() {
			t.Errorf("policy %d: the engine is not asleep", i)
		}
		if got := fp.Works(); got != served[i] {
			t.Errorf("policy %d got %d requests while asleep", i, got-served[i])
		}
	}

	rec = ts.do(t, "POST", "/fleet/wake", `{"tags": ["weights", "kv_cache"]}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("wake: %d %s", rec.Code, rec.Body)
	}
	poll.Until(t, "every policy idle again", states(routing.StateIdle))
	if got := marks(); !slices.Equal(got, []bool{false, false, false, false}) {
		t.Errorf("asleep records after the wake %v; want none", got)
	}
	wantCalls := map[string][]string{
		engine.SGLang: {"POST /release_memory_occupation", "POST /resume_memory_occupation"},
		engine.VLLM:   {"POST /sleep?level=1", "POST /wake_up?tags=weights&tags=kv_cache"},
	}
	for i, fp := range fps {
		eng := pols[i].Engine
		if got := controlCalls(fp); !slices.Equal(got, wantCalls[eng]) {
			t.Errorf("policy %d (%s) calls %v; want %v", i, eng, got, wantCalls[eng])
		}
	}
}

// A fan-out where 1 of 8 fails (a wrong admin key: 401) answers 207 with
// that policy, and only it, in failed.
func TestFleetEnginePartialFailure(t *testing.T) {
	ts, _ := polledServer(t)
	f := fakeFleet(t, 8, fakepolicy.Options{Engine: engine.SGLang, APIKey: "k"})
	var pols []api.PolicyRequest
	for i := range 8 {
		idx, key := i, "k"
		if i == 5 {
			key = "wrong"
		}
		pols = append(pols, api.PolicyRequest{URL: f.URL(i), Index: &idx, Engine: engine.SGLang, APIKey: &key})
	}
	body, _ := json.Marshal(api.ReplacePoliciesRequest{Policies: pols})
	want(t, ts.do(t, "PUT", "/policies", string(body)), http.StatusOK, nil)
	rec := ts.do(t, "POST", "/fleet/engine/update_weight_version", `{"body": {"new_version": "3", "abort_all_requests": false}}`)
	if rec.Code != http.StatusMultiStatus {
		t.Fatalf("status %d %s; want 207", rec.Code, rec.Body)
	}
	out := fleetAnswer(t, rec)
	if len(out.Results) != 8 || len(out.Failed) != 1 || out.Failed[0].Index != 5 || out.Failed[0].Status != http.StatusUnauthorized {
		t.Fatalf("answer %+v; want 8 results, policy 5 failed with 401", out)
	}
	for i := range 8 {
		if got, want := f.Policy(i).WeightVersion(), map[bool]string{true: "default", false: "3"}[i == 5]; got != want {
			t.Errorf("policy %d weight_version %q; want %q", i, got, want)
		}
	}
	// Bad input names its field.
	wantError(t, ts.do(t, "POST", "/fleet/engine/x", `{"selector": {"indices": [99]}}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "selector")
	wantError(t, ts.do(t, "POST", "/fleet/engine/x", `{"method": "PATCH"}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "method")
	wantError(t, ts.do(t, "POST", "/fleet/sleep", `{"level": 3}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "level")
}

// A second exclusive fan-out while the first holds the policies' refit
// lock is 409 naming the holder; after the first ends it goes through.
func TestFleetExclusiveConflict(t *testing.T) {
	ts, _ := polledServer(t)
	release := make(chan struct{})
	var entered atomic.Int32
	b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered.Add(1)
			<-release
		}
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	zero := 0
	body, _ := json.Marshal(api.ReplacePoliciesRequest{Policies: []api.PolicyRequest{{URL: b.URL, Index: &zero}}})
	want(t, ts.do(t, "POST", "/policies", mustJSON(t, body)), http.StatusCreated, nil)
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- ts.do(t, "POST", "/fleet/engine/slow", `{"exclusive": true}`) }()
	poll.Until(t, "the first fan-out in flight", func() bool { return entered.Load() == 1 })
	e := wantError(t, ts.do(t, "POST", "/fleet/engine/other", `{"exclusive": true}`), http.StatusConflict, api.CodeConflict, "")
	if !strings.Contains(e.Message, "POST /fleet/engine/slow") {
		t.Errorf("409 message %q does not name the holder", e.Message)
	}
	if rec := ts.do(t, "POST", "/fleet/sleep", `{}`); rec.Code != http.StatusConflict {
		t.Errorf("sleep during the exclusive fan-out: %d; want 409", rec.Code)
	}
	// A fan-out that is not exclusive does not wait for the lock.
	if rec := ts.do(t, "POST", "/fleet/engine/other", `{}`); rec.Code != http.StatusOK {
		t.Errorf("non-exclusive fan-out: %d %s", rec.Code, rec.Body)
	}
	close(release)
	if rec := <-first; rec.Code != http.StatusOK {
		t.Fatalf("first fan-out: %d %s", rec.Code, rec.Body)
	}
	if rec := ts.do(t, "POST", "/fleet/engine/other", `{"exclusive": true}`); rec.Code != http.StatusOK {
		t.Errorf("after the first ended: %d %s", rec.Code, rec.Body)
	}
}

// mustJSON is the first policy of a replace body as a POST /policies body.
func mustJSON(tb testing.TB, replace []byte) string {
	tb.Helper()
	var r api.ReplacePoliciesRequest
	if err := json.Unmarshal(replace, &r); err != nil {
		tb.Fatal(err)
	}
	b, _ := json.Marshal(r.Policies[0])
	return string(b)
}

// A sleep call that fails leaves its policy awake: its asleep record is
// cleared and it is routed again, while the others stay asleep.
func TestFleetSleepFailureClearsRecord(t *testing.T) {
	ts, st := polledServer(t)
	f := fakeFleet(t, 2, fakepolicy.Options{Engine: engine.SGLang, APIKey: "k"})
	var pols []api.PolicyRequest
	for i := range 2 {
		idx, key, admin := i, "k", "k"
		if i == 1 {
			admin = "wrong" // probes pass, the sleep call is 401
		}
		pols = append(pols, api.PolicyRequest{URL: f.URL(i), Index: &idx, Engine: engine.SGLang, APIKey: &key, AdminAPIKey: &admin})
	}
	body, _ := json.Marshal(api.ReplacePoliciesRequest{Policies: pols})
	want(t, ts.do(t, "PUT", "/policies", string(body)), http.StatusOK, nil)
	state := func(i int) string { return st.Stats().Policies[i].State }
	poll.Until(t, "both idle", func() bool { return state(0) == routing.StateIdle && state(1) == routing.StateIdle })

	rec := ts.do(t, "POST", "/fleet/sleep", `{}`)
	if out := fleetAnswer(t, rec); rec.Code != http.StatusMultiStatus || len(out.Failed) != 1 || out.Failed[0].Index != 1 {
		t.Fatalf("sleep: %d %+v; want 207 with policy 1 failed", rec.Code, out)
	}
	got := ts.Registry.Current().Policies
	if !got[0].SleepMarked || got[1].SleepMarked {
		t.Errorf("asleep records %v, %v; want true, false", got[0].SleepMarked, got[1].SleepMarked)
	}
	poll.Until(t, "policy 0 asleep, policy 1 idle", func() bool { return state(0) == routing.StateAsleep && state(1) == routing.StateIdle })
}

package handlers

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/routing"
)

// engineProxy is a router with an SGLang policy (index 0, serving model
// "qwen") and a vLLM one (index 1, serving "llama"), as the probes would
// report them, each a backend that counts what it served. The state
// knows which engine serves which route (engine.Serves), as app wires it.
func engineProxy(tb testing.TB) (srv string, sg, vl *backend) {
	tb.Helper()
	ok := func(b *backend, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"path": r.URL.Path})
	}
	sg, vl = newBackend(tb, ok), newBackend(tb, ok)
	st := routing.New(routing.Options{Serves: engine.Serves})
	ts := newTestServer(tb, Config{State: st})
	zero, one := 0, 1
	body, _ := json.Marshal(api.ReplacePoliciesRequest{Policies: []api.PolicyRequest{
		{URL: sg.URL, Index: &zero, Engine: engine.SGLang, ID: "sg"},
		{URL: vl.URL, Index: &one, Engine: engine.VLLM, ID: "vl"},
	}})
	want(tb, ts.do(tb, "PUT", "/policies", string(body)), http.StatusOK, nil)
	now := time.Now()
	st.ObserveProbe("sg", routing.Probe{SentAt: now, OK: true, Idle: true, Models: []string{"qwen"}, HasModels: true})
	st.ObserveProbe("vl", routing.Probe{SentAt: now, OK: true, Idle: true, Models: []string{"llama"}, HasModels: true})
	hs := newHTTPServer(tb, ts)
	return hs, sg, vl
}

func newHTTPServer(tb testing.TB, ts *testServer) string {
	tb.Helper()
	srv := httptest.NewServer(ts.h)
	tb.Cleanup(srv.Close)
	return srv.URL
}

func post(tb testing.TB, url, body string) (*http.Response, api.ErrorBody) {
	tb.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	var env struct{ Error api.ErrorBody }
	_ = json.NewDecoder(res.Body).Decode(&env)
	return res, env.Error
}

// SGLang's native /generate goes only to the engine that serves it, never
// to vLLM; an OpenAI request goes to the policy that serves its model; a
// model nobody serves is 404 model_not_found listing the served ones.
func TestProxyRoutesByEngineAndModel(t *testing.T) {
	srv, sg, vl := engineProxy(t)
	for range 8 {
		if res, e := post(t, srv+"/generate", `{"text":"hi"}`); res.StatusCode != http.StatusOK {
			t.Fatalf("/generate: %d %+v", res.StatusCode, e)
		}
	}
	if got := vl.served.Load(); got != 0 {
		t.Errorf("vLLM served %d /generate requests; want 0", got)
	}
	if got := sg.served.Load(); got != 8 {
		t.Errorf("SGLang served %d /generate requests; want 8", got)
	}
	for range 4 {
		if res, e := post(t, srv+"/v1/completions", `{"model":"llama","prompt":"hi"}`); res.StatusCode != http.StatusOK {
			t.Fatalf("llama: %d %+v", res.StatusCode, e)
		}
	}
	if got := vl.served.Load(); got != 4 {
		t.Errorf("vLLM served %d llama requests; want 4", got)
	}
	if got := sg.served.Load(); got != 8 {
		t.Errorf("SGLang served %d requests after the llama ones; want still 8", got)
	}
	res, e := post(t, srv+"/v1/chat/completions", `{"model":"mistral","messages":[]}`)
	if res.StatusCode != http.StatusNotFound || e.Code != api.CodeModelNotFound {
		t.Fatalf("unknown model: %d %+v; want 404 model_not_found", res.StatusCode, e)
	}
	if e.Details == nil || !slices.Equal(e.Details.Models, []string{"llama", "qwen"}) {
		t.Errorf("model_not_found details %+v; want models [llama qwen]", e.Details)
	}
	res, e = post(t, srv+"/v1/completions", `{"model":42}`)
	if res.StatusCode != http.StatusUnprocessableEntity || e.Fields["model"] == "" {
		t.Errorf("numeric model: %d %+v; want 422 naming model", res.StatusCode, e)
	}
}

// GET /v1/models lists the models the probes read even when a policy's
// own list does not answer.
func TestProxyModelsUnion(t *testing.T) {
	srv, _, _ := engineProxy(t)
	res, err := http.Get(srv + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var list struct{ Data []struct{ ID string } }
	if err := json.NewDecoder(res.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"llama", "qwen"}) {
		t.Errorf("models %v; want [llama qwen]", ids)
	}
}

// Models registered with a policy are what it serves, over what its engine
// lists, and the registration shows them.
func TestRegisteredModels(t *testing.T) {
	ok := func(b *backend, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"path": r.URL.Path})
	}
	a, b := newBackend(t, ok), newBackend(t, ok)
	st := routing.New(routing.Options{Serves: engine.Serves})
	ts := newTestServer(t, Config{State: st})
	zero, one := 0, 1
	body, _ := json.Marshal(api.ReplacePoliciesRequest{Policies: []api.PolicyRequest{
		{URL: a.URL, Index: &zero, ID: "a", Models: []string{"policy-7b"}},
		{URL: b.URL, Index: &one, ID: "b", Models: []string{"reward-1b", "ref-7b"}},
	}})
	want(t, ts.do(t, "PUT", "/policies", string(body)), http.StatusOK, nil)
	// The engine of b lists another model: the registration wins.
	st.ObserveProbe("b", routing.Probe{SentAt: time.Now(), OK: true, Idle: true, Models: []string{"other"}, HasModels: true})
	var got api.Policy
	want(t, ts.do(t, "GET", "/policies/b", ""), http.StatusOK, &got)
	if !slices.Equal(got.Models, []string{"reward-1b", "ref-7b"}) {
		t.Errorf("GET /policies/b models %v; want the registered ones", got.Models)
	}
	srv := newHTTPServer(t, ts)
	for range 3 {
		if res, e := post(t, srv+"/v1/completions", `{"model":"ref-7b","prompt":"hi"}`); res.StatusCode != http.StatusOK {
			t.Fatalf("ref-7b: %d %+v", res.StatusCode, e)
		}
	}
	if a.served.Load() != 0 || b.served.Load() != 3 {
		t.Errorf("served a %d, b %d; want 0 and 3", a.served.Load(), b.served.Load())
	}
	if res, _ := post(t, srv+"/v1/completions", `{"model":"other","prompt":"hi"}`); res.StatusCode != http.StatusNotFound {
		t.Errorf("a model only the engine lists, under registered ones: %d; want 404", res.StatusCode)
	}
	wantError(t, ts.do(t, "POST", "/policies", `{"url": "http://127.0.0.1:9/x", "models": [""]}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "models[0]")
}

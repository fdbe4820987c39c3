package poller

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/routing"
)

// A registration without a capacity takes the engine's own: SGLang's
// max_running_requests from /v1/loads, vLLM's max_num_seqs from
// /server_info, asked with the policy's key; when the server does not say,
// the engine's default and an error saying why.
func TestEngineCapacity(t *testing.T) {
	sglang := newEngineFleet(t, engine.SGLang, "sk-key", 8)
	legacy := newEngineFleet(t, engine.SGLang, "", 8)
	legacy.Policy(0).SetLegacySGLang(true) // /v1/loads answers 404
	noInfo := newEngineFleet(t, engine.VLLM, "", 0)
	info := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/server_info" || r.URL.Query().Get("config_format") != "json" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"vllm_config": {"model_config": {"model": "m"}, "scheduler_config": {"max_num_seqs": 48, "max_num_batched_tokens": 2048}},
			"vllm_env": {}, "system_env": {}}`))
	}))
	defer info.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()

	p := New(nil, Config{Logger: discard()})
	defer p.closeIdle()
	for _, tt := range []struct {
		name   string
		pol    routing.Policy
		want   int
		errHas string // "" for no error
	}{
		{"sglang", routing.Policy{URL: sglang.URL(0), Engine: engine.SGLang, APIKey: "sk-key"}, 8, ""},
		{"sglang without its key", routing.Policy{URL: sglang.URL(0), Engine: engine.SGLang}, engine.SGLangDefaultCapacity, "status 401"},
		{"sglang without /v1/loads", routing.Policy{URL: legacy.URL(0), Engine: engine.SGLang}, engine.SGLangDefaultCapacity, "status 404"},
		{"vllm in dev mode", routing.Policy{URL: info.URL, Engine: engine.VLLM}, 48, ""},
		{"vllm outside dev mode", routing.Policy{URL: noInfo.URL(0), Engine: engine.VLLM}, engine.VLLMDefaultCapacity, "status 404"},
		{"server down", routing.Policy{URL: dead.URL, Engine: engine.SGLang}, engine.SGLangDefaultCapacity, "GET " + dead.URL + "/v1/loads"},
		{"native", routing.Policy{URL: dead.URL, Engine: routing.EnginePolicyrouter}, 1, "reports no capacity"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.EngineCapacity(context.Background(), tt.pol)
			if got != tt.want {
				t.Errorf("capacity %d; want %d (err %v)", got, tt.want, err)
			}
			switch {
			case tt.errHas == "" && err != nil:
				t.Errorf("error %v; want none", err)
			case tt.errHas != "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)):
				t.Errorf("error %v; want one naming %q", err, tt.errHas)
			}
		})
	}
}

// A report out of bounds is not taken: no rank may say 0, and the sum is
// capped at engine.MaxCapacity.
func TestSGLangCapacityBounds(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       int
	}{
		{"two ranks", `{"loads": [{"max_running_requests": 3}, {"max_running_requests": 5}]}`, 8},
		{"a rank says 0", `{"loads": [{"max_running_requests": 3}, {"max_running_requests": 0}]}`, engine.SGLangDefaultCapacity},
		{"no loads", `{"loads": []}`, engine.SGLangDefaultCapacity},
		{"huge", `{"loads": [{"max_running_requests": 4000000}]}`, engine.MaxCapacity},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			p := New(nil, Config{Logger: discard()})
			defer p.closeIdle()
			got, _ := p.EngineCapacity(context.Background(), routing.Policy{URL: srv.URL, Engine: engine.SGLang})
			if got != tt.want {
				t.Errorf("capacity %d; want %d", got, tt.want)
			}
		})
	}
}

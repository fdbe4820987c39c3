package app

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
)

// A llama.cpp policy beside an SGLang one, through the whole router: it
// is probed on its slots, SGLang's native /generate never goes to it,
// and OpenAI completions are proxied to it.
func TestLlamaCppThroughTheRouter(t *testing.T) {
	newFake := func(eng string) *fakepolicy.Fleet {
		f, err := fakepolicy.New(1, nil, fakepolicy.Options{Engine: eng, MaxRunning: 3, MinWork: 5 * time.Millisecond, MaxWork: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	sg, lc := newFake(engine.SGLang), newFake(engine.LlamaCpp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := New(ctx, Config{PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()

	do := func(method, path, body string, header ...string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = res.Body.Close() })
		return res
	}
	reg := `{"policies": [
		{"url": "` + sg.URL(0) + `", "index": 0, "id": "sg", "engine": "sglang"},
		{"url": "` + lc.URL(0) + `", "index": 1, "id": "lc", "engine": "llamacpp"}]}`
	if res := do("PUT", "/policies", reg); res.StatusCode != http.StatusOK {
		t.Fatalf("PUT /policies: %d", res.StatusCode)
	}
	stats := func() map[string]api.PolicyStats {
		var s api.Stats
		if err := json.NewDecoder(do("GET", "/stats", "").Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
		out := map[string]api.PolicyStats{}
		for _, p := range s.Policies {
			out[p.ID] = p
		}
		return out
	}
	poll.Until(t, "both policies probed idle", func() bool {
		s := stats()
		return s["sg"].State == "idle" && s["lc"].State == "idle"
	})
	if p := stats()["lc"]; p.Engine != engine.LlamaCpp {
		t.Errorf("/stats engine %q; want %q", p.Engine, engine.LlamaCpp)
	}

	for range 6 {
		res := do("POST", "/generate", `{"text": "hi", "sampling_params": {"max_new_tokens": 2}}`)
		if res.StatusCode != http.StatusOK || res.Header.Get("X-Policy-Index") != "0" {
			t.Fatalf("/generate: %d on policy %q; want 200 on the SGLang policy 0", res.StatusCode, res.Header.Get("X-Policy-Index"))
		}
	}
	if n := lc.Policy(0).Works(); n != 0 {
		t.Errorf("llama.cpp received %d requests of /generate; want 0", n)
	}

	// With the SGLang policy drained, completions go to llama.cpp, and a
	// /generate finds no policy that serves it.
	if res := do("POST", "/policies/sg/drain", ""); res.StatusCode != http.StatusOK {
		t.Fatalf("drain: %d", res.StatusCode)
	}
	for range 3 {
		res := do("POST", "/v1/completions", `{"model": "fake-policy", "prompt": "hi", "max_tokens": 2}`)
		if res.StatusCode != http.StatusOK || res.Header.Get("X-Policy-Index") != "1" {
			t.Fatalf("/v1/completions: %d on policy %q; want 200 on the llama.cpp policy 1", res.StatusCode, res.Header.Get("X-Policy-Index"))
		}
		var body struct {
			Object  string `json:"object"`
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(res.Body).Decode(&body); err != nil || body.Object != "text_completion" || len(body.Choices) != 1 {
			t.Fatalf("/v1/completions answer %+v, %v; want one text_completion choice", body, err)
		}
	}
	res := do("POST", "/generate", `{"text": "hi"}`, "X-Select-Timeout-MS", "50")
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/generate with only llama.cpp in routing: %d on policy %q; want 503", res.StatusCode, res.Header.Get("X-Policy-Index"))
	}
	if n := lc.Policy(0).Works(); n != 3 {
		t.Errorf("llama.cpp received %d requests; want the 3 completions", n)
	}
}

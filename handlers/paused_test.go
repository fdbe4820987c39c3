package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
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

// An engine paused by someone else (vLLM's POST /pause), outside any
// update, reads paused, never unhealthy and without last_error, and gets
// none of 10 s of proxied load from 8 clients; the first probe after its
// resume routes it again. (SGLang has no endpoint that says it is paused: engine/sglang.go.)
func TestPausedEngineGetsNoRequest(t *testing.T) {
	const attempts = 40
	const pausedFor = 10 * time.Second
	for _, c := range []struct{ eng, pause, resume, body string }{
		{engine.VLLM, "/pause?mode=keep", "/resume", ""},
	} {
		t.Run(c.eng, func(t *testing.T) {
			// Probes every 50 ms, each bounded by 500 ms: a loaded test
			// machine does not turn a slow probe into an unhealthy policy.
			st := routing.New(routing.Options{Polled: true, Serves: engine.Serves})
			pl := poller.New(st, poller.Config{Interval: 50 * time.Millisecond, Timeout: 500 * time.Millisecond, Logger: discardLogger()})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = pl.Run(ctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })
			ts := newTestServer(t, Config{State: st, Poller: pl})
			f := fakeFleet(t, 2, fakepolicy.Options{Engine: c.eng, MinWork: time.Millisecond, MaxWork: 2 * time.Millisecond})
			for i := range 2 {
				idx := i
				body, _ := json.Marshal(api.PolicyRequest{URL: f.URL(i), Index: &idx, Engine: c.eng})
				want(t, ts.do(t, "POST", "/policies", string(body)), http.StatusCreated, nil)
			}
			stats := func(i int) routing.PolicyStats { return st.Stats().Policies[i] }
			poll.Until(t, "both policies idle", func() bool {
				return stats(0).State == routing.StateIdle && stats(1).State == routing.StateIdle
			})
			enginePost(t, f.URL(0)+c.pause, c.body)
			poll.Until(t, "policy 0 paused", func() bool { return stats(0).State == routing.StatePaused })

			// Load from 8 clients for pausedFor: the paused engine gets none
			// of it, and reads paused, never unhealthy, all along.
			before := f.Policy(0).Works()
			probesBefore := stats(0).Probes
			var sent atomic.Int64
			var wg sync.WaitGroup
			end := time.Now().Add(pausedFor)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(end) {
						rec := ts.do(t, "POST", "/v1/completions", `{"prompt": "hi", "max_tokens": 1}`)
						n := sent.Add(1)
						if rec.Code != http.StatusOK || rec.Header().Get("X-Policy-Index") != "1" {
							t.Errorf("request %d while policy 0 is paused: %d, X-Policy-Index %q; want 200 from policy 1", n, rec.Code, rec.Header().Get("X-Policy-Index"))
							return
						}
						if ps := stats(0); ps.State != routing.StatePaused || ps.LastError != "" {
							t.Errorf("paused policy after request %d: state %s, last_error %q; want paused, none", n, ps.State, ps.LastError)
							return
						}
					}
				}()
			}
			wg.Wait()
			if got := f.Policy(0).Works() - before; got != 0 {
				t.Errorf("the paused engine got %d of %d requests over %v; want 0", got, sent.Load(), pausedFor)
			}
			if probed := stats(0).Probes - probesBefore; probed < 2 {
				t.Errorf("the paused engine was probed %d times under the load; want it probed all along", probed)
			}
			t.Logf("%d requests over %v, none to the paused engine, which was probed %d times", sent.Load(), pausedFor, stats(0).Probes-probesBefore)

			probes := stats(0).Probes
			enginePost(t, f.URL(0)+c.resume, "")
			poll.Until(t, "policy 0 routed again", func() bool { return stats(0).State == routing.StateIdle })
			// A probe in flight when the resume was sent may still say
			// paused; the next one must not.
			if got := stats(0).Probes - probes; got > 2 {
				t.Errorf("policy 0 read idle %d probes after its resume; want the first probe sent after it", got)
			}
			before = f.Policy(0).Works()
			for range attempts {
				if rec := ts.do(t, "POST", "/v1/completions", `{"prompt": "hi", "max_tokens": 1}`); rec.Code != http.StatusOK {
					t.Fatalf("after the resume: %d %s", rec.Code, rec.Body)
				}
			}
			if f.Policy(0).Works() == before {
				t.Errorf("policy 0 got none of %d requests after its resume", attempts)
			}
		})
	}
}

// enginePost sends an engine call straight to a fake, as an outside
// controller would.
func enginePost(tb testing.TB, url, body string) {
	tb.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		tb.Fatalf("POST %s: %d", url, res.StatusCode)
	}
}

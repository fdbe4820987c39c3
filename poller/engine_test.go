package poller

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/internal/syncbuf"
	"github.com/policyrouter/policyrouter/routing"
)

// newEngineFleet starts one simulated server of the engine, requiring
// the API key key, with maxRunning requests running at once.
func newEngineFleet(tb testing.TB, eng, key string, maxRunning int) *fakepolicy.Fleet {
	tb.Helper()
	f, err := fakepolicy.New(1, nil, fakepolicy.Options{Engine: eng, APIKey: key, MaxRunning: maxRunning})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = f.Close() })
	return f
}

// An engine policy is idle while running + waiting is below its
// capacity, its load is that sum, and SGLang's version string is kept
// with its integer.
func TestEngineProbeLoadAndVersion(t *testing.T) {
	for _, eng := range []string{engine.SGLang, engine.VLLM} {
		t.Run(eng, func(t *testing.T) {
			f := newEngineFleet(t, eng, "sk-key", 1)
			fp := f.Policy(0)
			fp.SetWeightVersion("step-42")
			p := New(nil, Config{Logger: discard()})
			defer p.closeIdle()
			m := newMember(routing.Policy{ID: "p", URL: f.URL(0), Capacity: 2, Engine: eng, APIKey: "sk-key"})
			for load := range 4 {
				a, err := p.probe(context.Background(), m)
				if err != nil {
					t.Fatalf("load %d: %v", load, err)
				}
				if !a.HasLoad || a.Load != int64(load) || a.Idle != (load < 2) {
					t.Errorf("load %d: got load %d (has %t) idle %t; want load %d idle %t", load, a.Load, a.HasLoad, a.Idle, load, load < 2)
				}
				// SGLang's /model_info and vLLM's /weight_info alike.
				if !a.HasVersion || a.Version != 42 || a.WeightVersion != "step-42" {
					t.Errorf("version %d %q (has %t); want 42 \"step-42\"", a.Version, a.WeightVersion, a.HasVersion)
				}
				fp.StartWorkFor(time.Minute) // one more request: running up to 1, the rest waiting
			}
		})
	}
}

// An SGLang without /v1/loads is probed on /get_load, and asked for
// /v1/loads only once.
func TestSGLangLegacyLoad(t *testing.T) {
	f := newEngineFleet(t, engine.SGLang, "", 0)
	fp := f.Policy(0)
	fp.SetLegacySGLang(true)
	fp.StartWorkFor(time.Minute)
	p := New(nil, Config{Logger: discard()})
	defer p.closeIdle()
	m := newMember(routing.Policy{ID: "p", URL: f.URL(0), Engine: engine.SGLang})
	for range 3 {
		a, err := p.probe(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		if a.Load != 1 || a.Idle || a.WeightVersion != "default" || a.Version != 0 {
			t.Errorf("got %+v; want load 1, busy, version \"default\" = 0", a)
		}
	}
	var loads int
	for _, c := range fp.Calls() {
		if c == "GET /p/0/v1/loads" || c == "GET /v1/loads" {
			loads++
		}
	}
	if loads != 1 {
		t.Errorf("GET /v1/loads asked %d times; want once (calls %v)", loads, fp.Calls())
	}
}

// A paused vLLM (dev mode's /is_paused) reports paused, whatever its
// load: a state of its own, which routing keeps out (not busy, not a
// failure).
func TestVLLMPausedIsReported(t *testing.T) {
	f := newEngineFleet(t, engine.VLLM, "", 0)
	p := New(nil, Config{Logger: discard()})
	defer p.closeIdle()
	m := newMember(routing.Policy{ID: "p", URL: f.URL(0), Engine: engine.VLLM})
	a, err := p.probe(context.Background(), m)
	if err != nil || !a.Idle || a.Paused {
		t.Fatalf("got %+v, %v; want idle, not paused", a, err)
	}
	resp, err := p.client.HTTP.Post(f.URL(0)+"/pause?mode=keep", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if a, err := p.probe(context.Background(), m); err != nil || !a.Paused {
		t.Errorf("paused: got %+v, %v; want paused", a, err)
	}
}

// An engine endpoint that answers 500, garbage or 401 (a wrong key) makes
// the error name that endpoint.
func TestEngineProbeErrorsNameTheEndpoint(t *testing.T) {
	tests := []struct {
		engine, key string
		mode        fakepolicy.Mode
		want        []string
	}{
		{engine.SGLang, "", fakepolicy.ModeFail, []string{"GET ", "/v1/loads?include=core", "status 500"}},
		{engine.SGLang, "", fakepolicy.ModeGarbage, []string{"/v1/loads?include=core", "decode"}},
		{engine.SGLang, "wrong", fakepolicy.ModeNormal, []string{"/v1/loads?include=core", "status 401"}},
		{engine.VLLM, "", fakepolicy.ModeFail, []string{"/metrics", "status 500"}},
		{engine.VLLM, "", fakepolicy.ModeGarbage, []string{"/metrics", "parse metrics"}},
		{engine.VLLM, "wrong", fakepolicy.ModeNormal, []string{"/metrics", "status 401"}},
	}
	for _, tt := range tests {
		t.Run(tt.engine+"/"+tt.mode.String()+"/"+tt.key, func(t *testing.T) {
			f := newEngineFleet(t, tt.engine, "right", 0)
			f.Policy(0).SetMode(tt.mode)
			p := New(nil, Config{Logger: discard()})
			defer p.closeIdle()
			key := routing.Secret(tt.key)
			if key == "" {
				key = "right"
			}
			_, err := p.probe(context.Background(), newMember(routing.Policy{ID: "p", URL: f.URL(0), Engine: tt.engine, APIKey: key}))
			if err == nil {
				t.Fatal("probe succeeded; want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "right") || strings.Contains(err.Error(), "wrong") {
				t.Errorf("error %q shows a key", err)
			}
		})
	}
}

// A policy's API key reaches the engine on every probe (the simulated
// engine answers 401 without it), and no log line or last_error shows
// it, even at debug level with failing probes.
func TestEngineKeySentNeverLogged(t *testing.T) {
	const key = "sk-SECRET-123"
	for _, eng := range []string{routing.EnginePolicyrouter, engine.SGLang, engine.VLLM} {
		t.Run(eng, func(t *testing.T) {
			var logs syncbuf.Buffer
			logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			st := routing.New(routing.Options{Polled: true, FailThreshold: 1, PassThreshold: 1})
			var good, bad *fakepolicy.Fleet
			if eng == routing.EnginePolicyrouter {
				// The native fake checks no key: a server that does is
				// below, with a handler that demands it.
				good = newEngineFleet(t, "", "", 0)
				bad = newEngineFleet(t, "", "", 0)
			} else {
				good = newEngineFleet(t, eng, key, 0)
				bad = newEngineFleet(t, eng, key, 0)
			}
			bad.Policy(0).SetMode(fakepolicy.ModeFail)
			ps := []routing.Policy{
				{Index: 0, ID: "good", URL: good.URL(0), Engine: eng, APIKey: key, AdminAPIKey: key + "-admin"},
				{Index: 1, ID: "bad", URL: bad.URL(0), Engine: eng, APIKey: key},
			}
			if err := st.Update(ps, routing.Topology{}); err != nil {
				t.Fatal(err)
			}
			logger.Info("policies", "policy", ps[0], "policies", ps)
			start(t, st, Config{Interval: 10 * time.Millisecond, Logger: logger})
			poll.Until(t, "the good policy to be idle", func() bool { return policyStats(st, 0).State == routing.StateIdle })
			poll.Until(t, "the bad policy to be unhealthy", func() bool { return policyStats(st, 1).State == routing.StateUnhealthy })
			if got := logs.String(); strings.Contains(got, "SECRET") || !strings.Contains(got, "probe failed") {
				t.Errorf("logs show a key, or no failed probe:\n%s", got)
			}
			if le := policyStats(st, 1).LastError; le == "" || strings.Contains(le, "SECRET") {
				t.Errorf("last_error %q: empty, or shows a key", le)
			}
		})
	}
}

// The native engine sends the key too.
func TestNativeEngineSendsKey(t *testing.T) {
	var got []string
	var mu sync.Mutex
	srv := newFake(t, answerWith(200, `{"idle": true}`))
	srv.Config.Handler = wrapAuth(srv.Config.Handler, &mu, &got)
	p := New(nil, Config{Logger: discard()})
	defer p.closeIdle()
	if _, err := p.probe(context.Background(), newMember(routing.Policy{ID: "p", URL: srv.URL, APIKey: "k1", AdminAPIKey: "k2"})); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, []string{"Bearer k1"}) {
		t.Errorf("Authorization %v; want the API key", got)
	}
}

// wrapAuth records each request's Authorization header before h.
func wrapAuth(h http.Handler, mu *sync.Mutex, got *[]string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		*got = append(*got, r.Header.Get("Authorization"))
		mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

// A change of a policy's asleep record (Policy.SleepMarked, written by the
// fleet verbs through the registry, which publishes it like a drain) reaches
// the probes of the member already probing it: asleep while marked, routed
// again once cleared, and what the probes learnt of the server (here: an
// SGLang without /v1/loads) is kept rather than learnt again.
func TestSleepMarkReachesProbes(t *testing.T) {
	f := newEngineFleet(t, engine.SGLang, "", 0)
	fp := f.Policy(0)
	fp.SetLegacySGLang(true)
	st := routing.New(routing.Options{Polled: true})
	pol := routing.Policy{ID: "p", URL: f.URL(0), Capacity: 1, Engine: engine.SGLang}
	publish := func(marked bool) {
		t.Helper()
		pol.SleepMarked = marked
		if err := st.Update([]routing.Policy{pol}, routing.Topology{}); err != nil {
			t.Fatal(err)
		}
	}
	publish(false)
	start(t, st, Config{Interval: 20 * time.Millisecond, Timeout: 500 * time.Millisecond})
	state := func(want string) func() bool {
		return func() bool { return policyStats(st, 0).State == want }
	}
	poll.Until(t, "idle", state(routing.StateIdle))

	publish(true)
	poll.Until(t, "asleep once marked", state(routing.StateAsleep))
	publish(false)
	poll.Until(t, "idle once the mark is cleared", state(routing.StateIdle))

	var loads int
	for _, c := range fp.Calls() {
		if c == "GET /p/0/v1/loads" || c == "GET /v1/loads" {
			loads++
		}
	}
	if loads != 1 {
		t.Errorf("GET /v1/loads asked %d times; want once: the server was learnt again", loads)
	}
}

// The poller reports how each registered SGLang policy's server streams,
// as its probes learnt it, for the policy of that id and URL only; a
// policy registered anew at another URL is learnt anew.
func TestPollerIncrementalStreaming(t *testing.T) {
	inc, cum := newEngineFleet(t, engine.SGLang, "", 0), newEngineFleet(t, engine.SGLang, "", 0)
	inc.Policy(0).SetIncrementalStreaming(true)
	st := routing.New(routing.Options{})
	pol := routing.Policy{ID: "p0", URL: inc.URL(0), Engine: engine.SGLang}
	if err := st.Update([]routing.Policy{pol}, routing.Topology{}); err != nil {
		t.Fatal(err)
	}
	p := start(t, st, Config{Interval: 10 * time.Millisecond})
	poll.Until(t, "the form of p0 known", func() bool { _, known := p.IncrementalStreaming(pol); return known })
	if incremental, _ := p.IncrementalStreaming(pol); !incremental {
		t.Errorf("p0 on the incremental server: cumulative")
	}
	for _, other := range []routing.Policy{{ID: "p0", URL: cum.URL(0)}, {ID: "p1", URL: inc.URL(0)}} {
		if _, known := p.IncrementalStreaming(other); known {
			t.Errorf("%+v: known; want unknown (not registered so)", other)
		}
	}
	pol.URL = cum.URL(0)
	if err := st.Update([]routing.Policy{pol}, routing.Topology{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the form of p0 at its new URL known", func() bool { _, known := p.IncrementalStreaming(pol); return known })
	if incremental, _ := p.IncrementalStreaming(pol); incremental {
		t.Errorf("p0 on the cumulative server: incremental")
	}
}

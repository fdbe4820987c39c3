package app

import (
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/etcdtest"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/routing"
)

// A pause sent through POST /fleet/engine is a state the router keeps:
// the paused engines get no request, and no other refit, until the resume
// comes through the same route, on this router, a restarted one, or the
// replica that took over as leader.

// registerEngines registers the fleet's servers as policies of engine
// eng on the router at base and waits until every one is idle.
func registerEngines(t *testing.T, base string, fleet *fakepolicy.Fleet, eng string) {
	t.Helper()
	var regs []string
	for i, u := range fleet.URLs() {
		regs = append(regs, `{"url": "`+u+`", "index": `+strconv.Itoa(i)+`, "engine": "`+eng+`"}`)
	}
	if code, body := call(t, base, "PUT", "/policies", `{"policies": [`+strings.Join(regs, ",")+`]}`); code != http.StatusOK {
		t.Fatalf("PUT /policies: %d %s", code, body)
	}
	poll.Until(t, "every policy idle", func() bool { return allIn(policyStates(t, base), routing.StateIdle) })
}

// pauseThroughRouter pauses every engine of the router at base with
// SGLang's pause verb, through POST /fleet/engine.
func pauseThroughRouter(t *testing.T, base string, fleet *fakepolicy.Fleet) {
	t.Helper()
	if code, body := call(t, base, "POST", "/fleet/engine/pause_generation", `{"body": {"mode": "abort"}}`); code != http.StatusOK {
		t.Fatalf("POST /fleet/engine/pause_generation: %d %s", code, body)
	}
	for i := range fleet.Len() {
		if !fleet.Policy(i).Paused() {
			t.Fatalf("engine %d is not paused", i)
		}
	}
}

// pausedUntilResumed checks that every policy of the router at base is
// paused, gets no request, and refuses a refit (409) until the resume
// through the router, after which they are served again.
func pausedUntilResumed(t *testing.T, base string, fleet *fakepolicy.Fleet) {
	t.Helper()
	works := func() (sum uint64) {
		for i := range fleet.Len() {
			sum += fleet.Policy(i).Works()
		}
		return sum
	}
	before := works()
	poll.Until(t, "every policy paused", func() bool { return allIn(policyStates(t, base), routing.StatePaused) })
	for range 4 {
		if code, body := call(t, base, "POST", "/generate", `{"text": "hi"}`, "X-Select-Timeout-MS", "50"); code != http.StatusServiceUnavailable {
			t.Fatalf("/generate while paused: %d %s; want 503, no policy to route to", code, body)
		}
	}
	if got := works(); got != before {
		t.Errorf("the engines got %d requests while paused", got-before)
	}
	// The refit lock is held: neither a sleep nor a second pause.
	for _, c := range []struct{ path, body string }{
		{"/fleet/sleep", `{}`},
		{"/fleet/engine/pause_generation", `{}`},
	} {
		if code, body := call(t, base, "POST", c.path, c.body); code != http.StatusConflict || !strings.Contains(string(body), "continue_generation") {
			t.Errorf("POST %s while paused: %d %s; want 409 naming the resume", c.path, code, body)
		}
	}
	if got := works(); got != before {
		t.Errorf("the engines got %d requests while paused", got-before)
	}

	if code, body := call(t, base, "POST", "/fleet/engine/continue_generation", `{}`); code != http.StatusOK {
		t.Fatalf("POST /fleet/engine/continue_generation: %d %s", code, body)
	}
	poll.Until(t, "every policy idle after the resume", func() bool { return allIn(policyStates(t, base), routing.StateIdle) })
	for range 4 {
		if code, body := call(t, base, "POST", "/generate", `{"text": "hi", "sampling_params": {"max_new_tokens": 2}}`); code != http.StatusOK {
			t.Fatalf("/generate after the resume: %d %s", code, body)
		}
	}
	if got := works(); got != before+4 {
		t.Errorf("the engines got %d requests after the resume; want 4", got-before)
	}
	// Free again for a refit.
	if code, body := call(t, base, "POST", "/fleet/engine/pause_generation", `{}`); code != http.StatusOK {
		t.Errorf("a pause after the resume: %d %s; want 200", code, body)
	}
	if code, body := call(t, base, "POST", "/fleet/engine/continue_generation", `{}`); code != http.StatusOK {
		t.Errorf("a resume after the resume: %d %s; want 200", code, body)
	}
}

func TestFleetEnginePauseIsAState(t *testing.T) {
	fleet := sglangFleet(t, 2)
	base, _ := startOn(t, Config{PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	registerEngines(t, base, fleet, engine.SGLang)
	pauseThroughRouter(t, base, fleet)
	// No rolling update either: it would resume the engines itself.
	if code, body := call(t, base, "POST", "/updates", `{"version": 2, "model_path": "/ckpt/2"}`); code != http.StatusConflict ||
		!strings.Contains(string(body), "continue_generation") {
		t.Errorf("POST /updates while paused: %d %s; want 409 naming the resume", code, body)
	}
	pausedUntilResumed(t, base, fleet)
}

// A router restarted on the same data dir.
func TestFleetEnginePauseSurvivesRestart(t *testing.T) {
	fleet := sglangFleet(t, 2)
	cfg := Config{DataDir: t.TempDir(), PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	base, stop := startOn(t, cfg)
	registerEngines(t, base, fleet, engine.SGLang)
	pauseThroughRouter(t, base, fleet)
	stop()

	base, _ = startOn(t, cfg)
	pausedUntilResumed(t, base, fleet)
}

// The replica that takes over as leader on etcd.
func TestFleetEnginePauseSurvivesFailOver(t *testing.T) {
	etcd := etcdtest.Start(t)
	fleet := sglangFleet(t, 2)
	a := startReplica(t, etcd.Endpoint, "/pause-failover/")
	b := startReplica(t, etcd.Endpoint, "/pause-failover/")
	leader, followers := leaderOf(t, a, b)
	registerEngines(t, leader.url, fleet, engine.SGLang)
	pauseThroughRouter(t, leader.url, fleet)

	leader.stop()
	if next, _ := leaderOf(t, followers[0]); next != followers[0] {
		t.Fatal("the follower did not take over")
	}
	pausedUntilResumed(t, followers[0].url, fleet)
}

// A pause and its resume sent through a follower: the leader, which
// probes and holds the refit lock, runs them.
func TestFleetEnginePauseThroughFollower(t *testing.T) {
	etcd := etcdtest.Start(t)
	fleet := sglangFleet(t, 2)
	a := startReplica(t, etcd.Endpoint, "/pause-follower/")
	b := startReplica(t, etcd.Endpoint, "/pause-follower/")
	leader, followers := leaderOf(t, a, b)
	registerEngines(t, followers[0].url, fleet, engine.SGLang)
	pauseThroughRouter(t, followers[0].url, fleet)
	if got := policyStates(t, leader.url); !allIn(got, routing.StatePaused) {
		t.Fatalf("the leader's states just after a pause through the follower: %v; want every policy paused", got)
	}
	pausedUntilResumed(t, followers[0].url, fleet)
}

// vLLM says whether it is paused: a resume sent to the engine directly
// clears the router's mark, and its hold, at the next probe.
func TestVLLMResumedDirectlyClearsThePauseMark(t *testing.T) {
	fleet, err := fakepolicy.New(2, nil, fakepolicy.Options{Engine: engine.VLLM, MinWork: time.Millisecond, MaxWork: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fleet.Close() })
	base, _ := startOn(t, Config{PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	registerEngines(t, base, fleet, engine.VLLM)
	if code, body := call(t, base, "POST", "/fleet/engine/pause", `{"query": {"mode": "keep"}}`); code != http.StatusOK {
		t.Fatalf("POST /fleet/engine/pause: %d %s", code, body)
	}
	poll.Until(t, "every policy paused", func() bool { return allIn(policyStates(t, base), routing.StatePaused) })
	if code, body := call(t, base, "POST", "/fleet/sleep", `{}`); code != http.StatusConflict || !strings.Contains(string(body), "/resume") {
		t.Fatalf("POST /fleet/sleep while paused: %d %s; want 409 naming the resume", code, body)
	}

	for _, u := range fleet.URLs() {
		if code, body := call(t, u, "POST", "/resume", ``); code != http.StatusOK {
			t.Fatalf("POST %s/resume: %d %s", u, code, body)
		}
	}
	poll.Until(t, "every policy idle after the engines' own resume", func() bool { return allIn(policyStates(t, base), routing.StateIdle) })
	poll.Until(t, "the refit lock free again", func() bool {
		code, _ := call(t, base, "POST", "/fleet/engine/pause", `{"query": {"mode": "keep"}}`)
		return code == http.StatusOK
	})
	if code, body := call(t, base, "POST", "/fleet/engine/resume", `{}`); code != http.StatusOK {
		t.Fatalf("POST /fleet/engine/resume: %d %s", code, body)
	}
}

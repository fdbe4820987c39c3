package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/etcdtest"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/routing"
)

// What POST /fleet/sleep did to SGLang engines, which cannot say it
// themselves, must outlive the router that did it: a router restarted on
// the same data dir, or the replica that takes over as leader, shows them
// asleep and routes nothing to them (their requests would hang) until
// POST /fleet/wake.

// call sends one request to the router at base and returns the answer's
// status and body.
func call(tb testing.TB, base, method, path, body string, header ...string) (int, []byte) {
	tb.Helper()
	// Bounded: a request proxied to an asleep engine would hang.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatalf("%s %s: read the answer: %v", method, path, err)
	}
	return res.StatusCode, b
}

// policyStates returns the state of every policy in base's /stats by id.
func policyStates(tb testing.TB, base string) map[string]string {
	tb.Helper()
	code, body := call(tb, base, "GET", "/stats", "")
	var s api.Stats
	if err := json.Unmarshal(body, &s); code != http.StatusOK || err != nil {
		tb.Fatalf("/stats: %d %s: %v", code, body, err)
	}
	out := map[string]string{}
	for _, p := range s.Policies {
		out[p.ID] = p.State
	}
	return out
}

// allIn reports whether there are policies and every one is in state want.
func allIn(states map[string]string, want string) bool {
	for _, s := range states {
		if s != want {
			return false
		}
	}
	return len(states) > 0
}

// sglangFleet starts n simulated SGLang servers.
func sglangFleet(tb testing.TB, n int) *fakepolicy.Fleet {
	tb.Helper()
	f, err := fakepolicy.New(n, nil, fakepolicy.Options{Engine: engine.SGLang, MinWork: time.Millisecond, MaxWork: 2 * time.Millisecond})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = f.Close() })
	return f
}

// sleepFleet registers the fleet's servers as SGLang policies on the
// router at base and puts them to sleep with POST /fleet/sleep.
func sleepFleet(t *testing.T, base string, fleet *fakepolicy.Fleet) {
	t.Helper()
	var regs []string
	for i, u := range fleet.URLs() {
		regs = append(regs, `{"url": "`+u+`", "index": `+strconv.Itoa(i)+`, "engine": "sglang"}`)
	}
	if code, body := call(t, base, "PUT", "/policies", `{"policies": [`+strings.Join(regs, ",")+`]}`); code != http.StatusOK {
		t.Fatalf("PUT /policies: %d %s", code, body)
	}
	poll.Until(t, "every policy idle", func() bool { return allIn(policyStates(t, base), routing.StateIdle) })
	if code, body := call(t, base, "POST", "/fleet/sleep", `{}`); code != http.StatusOK {
		t.Fatalf("POST /fleet/sleep: %d %s", code, body)
	}
	poll.Until(t, "every policy asleep", func() bool { return allIn(policyStates(t, base), routing.StateAsleep) })
	for i := range fleet.URLs() {
		if !fleet.Policy(i).Asleep() {
			t.Fatalf("engine %d is not asleep", i)
		}
	}
}

// asleepUntilWoken checks, on a router at base that did not put the fleet
// to sleep itself, that every policy is asleep once probed and gets no
// request, and that after POST /fleet/wake they are routed again.
func asleepUntilWoken(t *testing.T, base string, fleet *fakepolicy.Fleet) {
	t.Helper()
	n := len(fleet.URLs())
	works := func() (sum uint64) {
		for i := range n {
			sum += fleet.Policy(i).Works()
		}
		return sum
	}
	before := works()
	poll.Until(t, "every policy probed", func() bool {
		for _, s := range policyStates(t, base) {
			if s == routing.StateUnknown {
				return false
			}
		}
		return true
	})
	if got := policyStates(t, base); !allIn(got, routing.StateAsleep) {
		t.Fatalf("states %v; want every policy asleep", got)
	}
	for range 4 {
		if code, body := call(t, base, "POST", "/generate", `{"text": "hi"}`, "X-Select-Timeout-MS", "50"); code != http.StatusServiceUnavailable {
			t.Fatalf("/generate while asleep: %d %s; want 503, no policy to route to", code, body)
		}
	}
	if got := works(); got != before {
		t.Errorf("the engines got %d requests while asleep", got-before)
	}

	if code, body := call(t, base, "POST", "/fleet/wake", `{}`); code != http.StatusOK {
		t.Fatalf("POST /fleet/wake: %d %s", code, body)
	}
	poll.Until(t, "every policy idle after the wake", func() bool { return allIn(policyStates(t, base), routing.StateIdle) })
	for range 4 {
		if code, body := call(t, base, "POST", "/generate", `{"text": "hi", "sampling_params": {"max_new_tokens": 2}}`); code != http.StatusOK {
			t.Fatalf("/generate after the wake: %d %s", code, body)
		}
	}
	if got := works(); got != before+4 {
		t.Errorf("the engines got %d requests after the wake; want 4", got-before)
	}
}

// startOn builds and runs a router of cfg and serves it; stop stops it
// and closes its store, so that another router may open it.
func startOn(t *testing.T, cfg Config) (base string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	srv := httptest.NewServer(a.Handler())
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		srv.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	t.Cleanup(stop)
	return srv.URL, stop
}

// A router restarted on the same data dir.
func TestSleepSurvivesRestart(t *testing.T) {
	fleet := sglangFleet(t, 2)
	cfg := Config{DataDir: t.TempDir(), PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	base, stop := startOn(t, cfg)
	sleepFleet(t, base, fleet)
	stop()

	base, _ = startOn(t, cfg)
	asleepUntilWoken(t, base, fleet)
}

// The replica that takes over as leader on etcd.
func TestSleepSurvivesFailOver(t *testing.T) {
	etcd := etcdtest.Start(t)
	fleet := sglangFleet(t, 2)
	a := startReplica(t, etcd.Endpoint, "/sleep-failover/")
	b := startReplica(t, etcd.Endpoint, "/sleep-failover/")
	leader, followers := leaderOf(t, a, b)
	sleepFleet(t, leader.url, fleet)

	leader.stop()
	if next, _ := leaderOf(t, followers[0]); next != followers[0] {
		t.Fatal("the follower did not take over")
	}
	asleepUntilWoken(t, followers[0].url, fleet)
}

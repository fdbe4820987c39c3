package app

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/etcdtest"
	"github.com/policyrouter/policyrouter/internal/poll"
)

// newProxyFleet starts n simulated SGLang-native policies for proxy
// traffic.
func newProxyFleet(t *testing.T, n int) *fakepolicy.Fleet {
	t.Helper()
	fleet, err := fakepolicy.New(n, nil, fakepolicy.Options{PerPolicyListeners: true, TokensPerSecond: 200})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fleet.Close() })
	return fleet
}

// registerFleet registers the fleet's policies with capacity, through r,
// and waits until the leader has heard from them all, idle.
func registerFleet(t *testing.T, r, leader *replica, fleet *fakepolicy.Fleet, capacity int, token ...string) {
	t.Helper()
	var ps []map[string]any
	for i, u := range fleet.URLs() {
		ps = append(ps, map[string]any{"url": u, "index": i, "capacity": capacity})
	}
	b, _ := json.Marshal(map[string]any{"policies": ps})
	req, _ := http.NewRequest(http.MethodPut, r.url+"/policies", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for _, tok := range token {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("PUT /policies = %d", res.StatusCode)
	}
	poll.Until(t, "the leader to hear from every policy", func() bool {
		return leader.app.Ready() == nil && leader.app.State.Stats().Idle == fleet.Len()*capacity
	})
}

// generate sends a streaming native /generate of n tokens to url and
// returns the answer, its body unread.
func generate(t *testing.T, url string, n int, header map[string]string) *http.Response {
	t.Helper()
	res, err := sendGenerate(url, n, header)
	if err != nil {
		t.Fatalf("POST %s/generate: %v", url, err)
	}
	return res
}

func sendGenerate(url string, n int, header map[string]string) (*http.Response, error) {
	b, _ := json.Marshal(map[string]any{"input_ids": []int{1, 2, 3}, "sampling_params": map[string]any{"max_new_tokens": n}, "stream": true})
	req, _ := http.NewRequest(http.MethodPost, url+"/generate", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Resume-On-Abort", "0")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return http.DefaultClient.Do(req)
}

// streamOutcome reads an event stream to its end: whether it ended with
// [DONE] and carried no error event.
func streamOutcome(body io.Reader) (complete bool, err error) {
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "data: [DONE]":
			complete = true
		case strings.HasPrefix(line, "data: ") && strings.Contains(line, `"error"`):
			return false, nil
		}
	}
	return complete, sc.Err()
}

// A follower proxies generate traffic itself, under a lease the leader
// hands out and counts: while its request runs, the policy's one slot is
// taken on the leader too, and it comes back when the request ends.
func TestFollowerProxiesUnderTheLeadersLease(t *testing.T) {
	etcd := etcdtest.Start(t)
	fleet := newProxyFleet(t, 1)
	a := startReplica(t, etcd.Endpoint, "/ha-proxy/")
	b := startReplica(t, etcd.Endpoint, "/ha-proxy/")
	leader, followers := leaderOf(t, a, b)
	follower := followers[0]
	registerFleet(t, follower, leader, fleet, 1)

	// The request waits at the policy, its lease out, until the thaw.
	fleet.Policy(0).Freeze()
	res := make(chan *http.Response, 1)
	go func() { res <- generate(t, follower.url, 8, nil) }()
	poll.Until(t, "the follower's request to hold a lease on the leader", func() bool { return leader.app.State.Stats().Leases == 1 })

	// Capacity is counted across replicas: nothing is left, for the
	// follower's next request or the leader's /select.
	busy := generate(t, follower.url, 8, map[string]string{"X-Select-Timeout-MS": "0"})
	_, _ = io.Copy(io.Discard, busy.Body)
	busy.Body.Close()
	if busy.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a second request on the follower, the only slot out = %d; want 503", busy.StatusCode)
	}
	if code, _, body := post(t, leader.url, "/select", map[string]any{"timeout_ms": 0}); code != http.StatusServiceUnavailable {
		t.Errorf("/select on the leader, the only slot out = %d %v; want 503", code, body)
	}

	fleet.Policy(0).Thaw()
	r := <-res
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK || r.Header.Get("X-Policy-Index") != "0" {
		t.Fatalf("follower /generate = %d (X-Policy-Index %q); want 200 from policy 0", r.StatusCode, r.Header.Get("X-Policy-Index"))
	}
	if complete, err := streamOutcome(r.Body); !complete || err != nil {
		t.Fatalf("the follower's stream: complete %t, err %v", complete, err)
	}
	poll.Until(t, "the lease back on the leader", func() bool { return leader.app.State.Stats().Leases == 0 })
	if got := fleet.Policy(0).PeakLoad(); got != 1 {
		t.Errorf("policy peak load %d; want 1", got)
	}

	// The follower's /v1/models lists what the leader can route to.
	code, models := getJSON(t, follower.url, "/v1/models")
	if data, _ := models["data"].([]any); code != http.StatusOK || len(data) == 0 || !strings.Contains(mustJSON(models), fakepolicy.ModelName) {
		t.Errorf("follower /v1/models = %d %v; want %s listed", code, models, fakepolicy.ModelName)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/auth"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/proxy"
)

// replicaSecret is the token key the replicas of these tests share.
var replicaSecret = bytes.Repeat([]byte("r"), 48)

func replicaVerifier(tb testing.TB) *auth.Verifier {
	tb.Helper()
	v, err := auth.NewVerifier(auth.Config{Secret: replicaSecret})
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

func mintRoute(tb testing.TB, subject string) string {
	tb.Helper()
	tok, err := auth.Mint(auth.Config{Secret: replicaSecret}, subject, []string{auth.ScopeRoute, auth.ScopeAdmin}, time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// replicas is a leader and a follower of one registration: the policies
// at urls, each of capacity 1, registered on both under the same ids.
type replicas struct {
	leader, follower *testServer
	leaderURL        string
}

func newReplicas(tb testing.TB, replica *ReplicaConfig, urls ...string) *replicas {
	tb.Helper()
	return newReplicasWith(tb, replica, Config{}, urls...)
}

// newReplicasWith is newReplicas with the follower's other settings in
// cfg.
func newReplicasWith(tb testing.TB, replica *ReplicaConfig, cfg Config, urls ...string) *replicas {
	tb.Helper()
	rs := &replicas{}
	leader := httptest.NewUnstartedServer(nil)
	rs.leaderURL = "http://" + leader.Listener.Addr().String()
	rs.leader = newTestServer(tb, Config{Auth: replicaVerifier(tb), Leader: func() (bool, string) { return true, rs.leaderURL }})
	leader.Config.Handler = rs.leader.h
	leader.Start()
	tb.Cleanup(leader.Close)
	cfg.Auth, cfg.Replica = replicaVerifier(tb), replica
	cfg.Leader = func() (bool, string) { return false, rs.leaderURL }
	rs.follower = newTestServer(tb, cfg)

	var req api.ReplacePoliciesRequest
	key := "sk-engine"
	for i, u := range urls {
		idx := i
		req.Policies = append(req.Policies, api.PolicyRequest{URL: u, Index: &idx, ID: fmt.Sprintf("policy-%d", i), APIKey: &key})
	}
	body, _ := json.Marshal(req)
	for _, ts := range []*testServer{rs.leader, rs.follower} {
		r := ts.request("PUT", "/policies", string(body))
		r.Header.Set("Authorization", "Bearer "+mintRoute(tb, "admin"))
		want(tb, ts.doReq(tb, r), http.StatusOK, nil)
	}
	return rs
}

// proxied sends a proxied request to the follower, with a client token.
func (rs *replicas) proxied(tb testing.TB, path, body string, header map[string]string) *httptest.ResponseRecorder {
	tb.Helper()
	r := rs.follower.request("POST", path, body)
	r.Header.Set("Authorization", "Bearer "+mintRoute(tb, "client"))
	for k, v := range header {
		r.Header.Set(k, v)
	}
	return rs.follower.doReq(tb, r)
}

func replicaConfig(tb testing.TB) *ReplicaConfig {
	return &ReplicaConfig{
		Holder: func() string { return "http://follower.test" },
		Token:  func() (string, error) { return mintRoute(tb, "replica"), nil },
	}
}

// A follower proxies under a lease the leader holds while the request
// runs, with the engine key of its own registration.
func TestFollowerLeasesFromTheLeader(t *testing.T) {
	hold := make(chan struct{})
	b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		<-hold
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"text": "ok"}`)
	})
	rs := newReplicas(t, replicaConfig(t), b.URL)

	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- rs.proxied(t, "/generate", `{"text": "hi"}`, nil) }()
	poll.Until(t, "the follower's request at the policy", func() bool { return b.inflight.Load() == 1 })
	if got := rs.leader.State.Stats().Leases; got != 1 {
		t.Errorf("leases on the leader while the follower's request runs: %d; want 1", got)
	}
	if got := rs.follower.State.Stats().Leases; got != 0 {
		t.Errorf("leases on the follower: %d; want none (the leader counts them)", got)
	}
	close(hold)
	rec := <-done
	if rec.Code != http.StatusOK || rec.Header().Get("X-Policy-ID") != "policy-0" {
		t.Fatalf("follower /generate = %d (X-Policy-ID %q): %s", rec.Code, rec.Header().Get("X-Policy-ID"), rec.Body)
	}
	if got := rs.leader.State.Stats().Leases; got != 0 {
		t.Errorf("leases on the leader after the request: %d; want 0", got)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.auth) != 1 || b.auth[0] != "Bearer sk-engine" {
		t.Errorf("the policy saw Authorization %q; want its own key", b.auth)
	}
}

// The leader's refusal reaches the client as the leader wrote it: code,
// fields, Retry-After.
func TestFollowerPassesTheLeadersRefusal(t *testing.T) {
	b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {})
	rs := newReplicas(t, replicaConfig(t), b.URL)
	rec := rs.proxied(t, "/generate", `{"text": "hi"}`, map[string]string{"X-Min-Weight-Version": "5", "X-Select-Timeout-MS": "0"})
	e := wantError(t, rec, http.StatusServiceUnavailable, api.CodeNoFreshPolicy, "")
	if rec.Header().Get("Retry-After") == "" || e.Message == "" {
		t.Errorf("refusal passed on without Retry-After or message: %v %+v", rec.Header(), e)
	}
	if b.served.Load() != 0 {
		t.Error("the policy was sent a request no lease was granted for")
	}
}

// A follower whose token the leader refuses, or whose leader does not
// answer (and no other is elected within the request's wait), says so;
// neither is the client's fault.
func TestFollowerCannotReachTheLeader(t *testing.T) {
	b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {})
	noToken := &ReplicaConfig{Holder: func() string { return "http://follower.test" }}
	rs := newReplicas(t, noToken, b.URL)
	wantError(t, rs.proxied(t, "/generate", `{"text": "hi"}`, nil), http.StatusBadGateway, api.CodeUpstreamFailed, "")

	gone := newReplicas(t, replicaConfig(t), b.URL)
	gone.leaderURL = "http://127.0.0.1:1" // nothing listens there
	wantError(t, gone.proxied(t, "/generate", `{"text": "hi"}`, map[string]string{"X-Select-Timeout-MS": "100"}), http.StatusServiceUnavailable, api.CodeNotLeader, "")
	if b.served.Load() != 0 {
		t.Error("the policy was sent a request no lease was granted for")
	}
}

// The follower's /v1/models lists what the leader routes to.
func TestFollowerModelsFromTheLeader(t *testing.T) {
	b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object": "list", "data": [{"id": "served-model", "object": "model"}]}`)
	})
	rs := newReplicas(t, replicaConfig(t), b.URL)
	r := rs.follower.request("GET", "/v1/models", "")
	r.Header.Set("Authorization", "Bearer "+mintRoute(t, "client"))
	rec := rs.follower.doReq(t, r)
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusOK || !bytes.Contains(body, []byte(`"served-model"`)) {
		t.Errorf("follower /v1/models = %d %s; want served-model listed", rec.Code, body)
	}
}

// A follower's own bounds may exceed the internal API's: its lease
// requests stay within them.
func TestFollowerBoundsItsLeaseRequest(t *testing.T) {
	b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"text": "ok"}`)
	})
	rs := newReplicasWith(t, replicaConfig(t), Config{MaxSelectWait: 2 * time.Hour, Proxy: proxy.Options{Timeout: 48 * time.Hour}}, b.URL)
	rec := rs.proxied(t, "/generate", `{"text": "hi"}`, map[string]string{"X-Select-Timeout-MS": "3600000"})
	if rec.Code != http.StatusOK {
		t.Fatalf("follower /generate with a 48h --proxy-timeout and an hour's wait = %d: %s", rec.Code, rec.Body)
	}
}

// A follower without a token answers 502 upstream_failed, not a 500; a
// token that fails, or that the leader refuses, while a request runs does
// not strand its lease: it goes back with the last token the leader took.
func TestFollowerWithoutAToken(t *testing.T) {
	var hold atomic.Pointer[chan struct{}]
	b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		<-*hold.Load()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"text": "ok"}`)
	})
	const (
		good = iota
		none
		foreign // signed with a key the leader does not know
	)
	var mode atomic.Int32
	rc := &ReplicaConfig{
		Holder: func() string { return "http://follower.test" },
		Token: func() (string, error) {
			switch mode.Load() {
			case none:
				return "", errors.New("--replica-token-file: /run/token is empty")
			case foreign:
				return auth.Mint(auth.Config{Secret: bytes.Repeat([]byte("x"), 48)}, "replica", []string{auth.ScopeRoute}, time.Hour)
			}
			return mintRoute(t, "replica"), nil
		},
		TokenSource: "--replica-token-file /run/token",
	}
	rs := newReplicas(t, rc, b.URL)

	for _, tt := range []struct {
		name string
		mode int32
		code int
	}{{"no token", none, http.StatusBadGateway}, {"a refused token", foreign, http.StatusBadGateway}} {
		mode.Store(good)
		ch := make(chan struct{})
		hold.Store(&ch)
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() { done <- rs.proxied(t, "/generate", `{"text": "hi"}`, nil) }()
		poll.Until(t, "the follower's request at the policy", func() bool { return b.inflight.Load() == 1 })
		mode.Store(tt.mode)
		close(ch)
		if rec := <-done; rec.Code != http.StatusOK {
			t.Fatalf("%s: follower /generate = %d: %s", tt.name, rec.Code, rec.Body)
		}
		if got := rs.leader.State.Stats().Leases; got != 0 {
			t.Errorf("%s meanwhile: leases on the leader after the request: %d; want 0", tt.name, got)
		}

		rec := rs.proxied(t, "/generate", `{"text": "hi"}`, nil)
		var env api.ErrorResponse
		_ = json.Unmarshal(rec.Body.Bytes(), &env)
		if rec.Code != tt.code || env.Error.Code != api.CodeUpstreamFailed {
			t.Errorf("follower /generate with %s = %d %s; want %d upstream_failed", tt.name, rec.Code, rec.Body, tt.code)
		}
		if got := rs.leader.State.Stats().Leases; got != 0 {
			t.Errorf("leases on the leader after a request with %s: %d; want 0", tt.name, got)
		}
	}
}

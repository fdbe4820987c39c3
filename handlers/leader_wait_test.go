package handlers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/internal/poll"
)

// fakeElection is a replica's view of the election, changed by the test.
type fakeElection struct {
	leading atomic.Bool
	leader  atomic.Pointer[string]
}

func (f *fakeElection) Leader() (bool, string) {
	if p := f.leader.Load(); p != nil {
		return f.leading.Load(), *p
	}
	return f.leading.Load(), ""
}

// waitingFor sends req in the background; its answer comes on the channel.
func (ts *testServer) waitingFor(tb testing.TB, req *http.Request) <-chan *httptest.ResponseRecorder {
	tb.Helper()
	out := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		ts.h.ServeHTTP(rec, req)
		out <- rec
	}()
	return out
}

// A routing request that reaches a replica with no leader waits for one
// within its wait, and is served when this replica is elected; a waiter
// on a replica that learns of another leader is told its address.
func TestNoLeaderIsAWait(t *testing.T) {
	var el fakeElection
	ts := newTestServer(t, Config{Leader: el.Leader})
	ts.register(t, 2)

	sel := ts.waitingFor(t, ts.request("POST", "/select", `{"timeout_ms": 60000}`))
	asn := ts.waitingFor(t, ts.request("POST", "/assign", `{"num_tasks": 1}`))
	poll.Until(t, "two requests waiting for a leader", func() bool { return ts.LeaderWaiters() == 2 })
	el.leading.Store(true)
	ts.LeaderChanged()
	var got api.SelectResponse
	want(t, <-sel, http.StatusOK, &got)
	if got.LeaseID == "" {
		t.Errorf("the /select served after the election: %+v; want a lease", got)
	}
	want(t, <-asn, http.StatusOK, nil)

	el.leading.Store(false)
	ts.LeaderChanged()
	sel = ts.waitingFor(t, ts.request("POST", "/select", `{"timeout_ms": 60000}`))
	poll.Until(t, "a /select waiting for a leader", func() bool { return ts.LeaderWaiters() == 1 })
	other := "http://10.0.0.9:8080"
	el.leader.Store(&other)
	ts.LeaderChanged()
	rec := <-sel
	if e := wantError(t, rec, http.StatusServiceUnavailable, api.CodeNotLeader, ""); e.Leader != other {
		t.Errorf("a /select that waited until another replica was elected: leader %q; want %q", e.Leader, other)
	}
	if n := ts.LeaderWaiters(); n != 0 {
		t.Errorf("%d requests still counted waiting for a leader", n)
	}
}

// A request whose wait runs out before a leader is elected is answered
// not_leader, as one that does not wait (timeout_ms 0, or /release without
// X-Select-Timeout-MS) is at once.
func TestNoLeaderInTimeIsNotLeader(t *testing.T) {
	var el fakeElection
	ts := newTestServer(t, Config{Leader: el.Leader})
	for _, c := range []struct{ path, body, header string }{
		{"/select", `{"timeout_ms": 50}`, ""},
		{"/select", `{"timeout_ms": 0}`, ""},
		{"/assign", `{"num_tasks": 1}`, "50"},
		{"/release", `{"index": 0}`, ""},
	} {
		req := ts.request("POST", c.path, c.body)
		if c.header != "" {
			req.Header.Set("X-Select-Timeout-MS", c.header)
		}
		if e := wantError(t, ts.doReq(t, req), http.StatusServiceUnavailable, api.CodeNotLeader, ""); e.Leader != "" {
			t.Errorf("POST %s with no leader: leader %q; want none", c.path, e.Leader)
		}
	}
}

// Beyond MaxLeaderWaiters, a request that would wait for a leader is
// answered overloaded at once; and when no leader can be elected (the
// store does not answer), store_unavailable at once.
func TestLeaderWaitersCapped(t *testing.T) {
	var el fakeElection
	var storeDown atomic.Bool
	ts := newTestServer(t, Config{Leader: el.Leader, MaxLeaderWaiters: 1, Election: func(context.Context) error {
		if storeDown.Load() {
			return errorf(api.CodeStoreDown, "etcd does not answer")
		}
		return nil
	}})
	ts.register(t, 1)

	first := ts.waitingFor(t, ts.request("POST", "/select", `{"timeout_ms": 60000}`))
	poll.Until(t, "a /select waiting for a leader", func() bool { return ts.LeaderWaiters() == 1 })
	wantError(t, ts.do(t, "POST", "/select", `{"timeout_ms": 60000}`), http.StatusServiceUnavailable, api.CodeOverloaded, "")

	el.leading.Store(true)
	ts.LeaderChanged()
	want(t, <-first, http.StatusOK, nil)

	el.leading.Store(false)
	storeDown.Store(true)
	ts.LeaderChanged()
	wantError(t, ts.do(t, "POST", "/select", `{"timeout_ms": 60000}`), http.StatusServiceUnavailable, api.CodeStoreDown, "")
	if n := ts.LeaderWaiters(); n != 0 {
		t.Errorf("%d requests still counted waiting for a leader", n)
	}
}

package handlers

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/store"
)

// One replica of several: as a follower it answers routing 503 not_leader
// naming the leader, and takes admin writes; as the leader it routes, and
// releases a lease it did not issue (an earlier leader's) as ended.
func TestFollowerAnswersNotLeader(t *testing.T) {
	var leading atomic.Bool
	var leader atomic.Value
	leader.Store("")
	ts := newTestServer(t, Config{Leader: func() (bool, string) { return leading.Load(), leader.Load().(string) }})

	// No leader elected yet: not_leader, and no leader named.
	rec := ts.do(t, "POST", "/select", `{"timeout_ms": 0}`)
	if e := wantError(t, rec, http.StatusServiceUnavailable, api.CodeNotLeader, ""); e.Leader != "" || rec.Header().Get(api.LeaderHeader) != "" {
		t.Errorf("with no leader: leader %q, header %q; want neither", e.Leader, rec.Header().Get(api.LeaderHeader))
	}

	leader.Store("http://10.0.0.7:8080")
	ts.register(t, 2)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/select", `{"timeout_ms": 0}`},
		{"POST", "/assign", `{"num_tasks": 1}`},
		{"POST", "/release", `{"index": 0}`},
		{"POST", "/complete", `{"index": 0}`},
		{"GET", "/updates", ""},
		{"POST", "/updates", `{"version": 2}`},
		{"GET", "/readyz", ""},
	} {
		rec := ts.do(t, c.method, c.path, c.body)
		e := wantError(t, rec, http.StatusServiceUnavailable, api.CodeNotLeader, "")
		if e.Leader != "http://10.0.0.7:8080" || rec.Header().Get(api.LeaderHeader) != e.Leader || rec.Header().Get("Retry-After") == "" {
			t.Errorf("%s %s on a follower: leader %q, header %q, Retry-After %q; want the leader named twice and a Retry-After",
				c.method, c.path, e.Leader, rec.Header().Get(api.LeaderHeader), rec.Header().Get("Retry-After"))
		}
	}
	want(t, ts.do(t, "GET", "/healthz", ""), http.StatusOK, nil)
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, nil)
	want(t, ts.do(t, "PUT", "/weights", `{"version": 3}`), http.StatusOK, nil)

	leading.Store(true)
	var sel api.SelectResponse
	want(t, ts.do(t, "POST", "/select", `{"timeout_ms": 0}`), http.StatusOK, &sel)
	var rel api.ReleaseResponse
	want(t, ts.do(t, "POST", "/release", `{"lease_id": "6f1c1f5e-8d0a-4a55-9c43-0d5b3a1e2f10"}`), http.StatusOK, &rel)
	if rel.Released {
		t.Error("a lease this replica never issued was released true")
	}
	want(t, ts.do(t, "POST", "/release", `{"lease_id": "`+sel.LeaseID+`"}`), http.StatusOK, &rel)
	if !rel.Released {
		t.Error("the leader's own lease was not released")
	}
}

// A store that did not answer is a 503 the caller may retry, and a write
// that kept losing the race to other replicas a 409: neither is a 500.
func TestStoreErrorsAreNotInternal(t *testing.T) {
	for _, c := range []struct {
		err    error
		code   string
		status int
	}{
		{fmt.Errorf("store: apply: %w: %w", store.ErrUnavailable, context.DeadlineExceeded), api.CodeStoreDown, http.StatusServiceUnavailable},
		{fmt.Errorf("store: %w", store.ErrStale), api.CodeConflict, http.StatusConflict},
	} {
		e := asError(c.err)
		if e.Code != c.code || statusOf(e.Code) != c.status {
			t.Errorf("asError(%v) = %s (%d), want %s (%d)", c.err, e.Code, statusOf(e.Code), c.code, c.status)
		}
	}
}

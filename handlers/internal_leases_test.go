package handlers

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

const otherLeaderLease = "0190f5c2-7a3b-8c4d-9e5f-0123456789ab" // another leader's

// A replica takes a lease for an attempt, the policy is counted busy
// until it returns it, and a failure it reports counts against the
// policy.
func TestInternalLeaseTakeAndReturn(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 1)

	var sel api.SelectResponse
	want(t, ts.do(t, "POST", "/internal/leases", `{"router": "idle_affinity", "timeout_ms": 0, "route": "/generate"}`), http.StatusOK, &sel)
	if sel.ID == "" || sel.LeaseID == "" || sel.URL != "http://127.0.0.1:9/p0" {
		t.Fatalf("lease = %+v; want policy 0 and a lease id", sel)
	}
	// The only policy is out: the next attempt waits, in vain.
	wantError(t, ts.do(t, "POST", "/internal/leases", `{"router": "idle_affinity", "timeout_ms": 0}`), http.StatusServiceUnavailable, api.CodeNoIdlePolicy, "")

	var rel api.ReleaseResponse
	want(t, ts.do(t, "POST", "/internal/leases/"+sel.LeaseID+"/release",
		`{"policy_id": "`+sel.ID+`", "failure": {"at": "2026-01-02T03:04:05Z", "reason": "proxy: connect: refused"}}`), http.StatusOK, &rel)
	if !rel.Released || rel.ID != sel.ID {
		t.Errorf("return = %+v; want released true for %s", rel, sel.ID)
	}
	if got := ts.State.Stats().Policies[0]; got.FailStreak != 1 || got.LastError != "proxy: connect: refused" {
		t.Errorf("after a returned failure: fail streak %d, last error %q; want 1 and the reason", got.FailStreak, got.LastError)
	}
	// Returned twice: ended already, not an error.
	want(t, ts.do(t, "POST", "/internal/leases/"+sel.LeaseID+"/release", `{"policy_id": "`+sel.ID+`"}`), http.StatusOK, &rel)
	if rel.Released || rel.How != "release" {
		t.Errorf("returned again = %+v; want released false, how release", rel)
	}
	// A lease of an earlier leader: nothing to end.
	want(t, ts.do(t, "POST", "/internal/leases/"+otherLeaderLease+"/release", `{"policy_id": "`+sel.ID+`"}`), http.StatusOK, &rel)
	if rel.Released {
		t.Error("an unknown lease was released true")
	}
}

// A new leader adopts a lease an earlier one handed out: the policy is
// out until the holder returns it under the same id.
func TestInternalLeaseAdopt(t *testing.T) {
	ts := newTestServer(t, Config{})
	ps := ts.register(t, 1)

	var sel api.SelectResponse
	body := `{"policy_id": "` + ps[0].ID + `", "holder": "http://replica-b:8080"}`
	want(t, ts.do(t, "PUT", "/internal/leases/"+otherLeaderLease, body), http.StatusOK, &sel)
	if sel.LeaseID != otherLeaderLease || sel.ID != ps[0].ID {
		t.Fatalf("adopted = %+v; want lease %s on %s", sel, otherLeaderLease, ps[0].ID)
	}
	want(t, ts.do(t, "PUT", "/internal/leases/"+otherLeaderLease, body), http.StatusOK, nil) // a retry
	if got := ts.State.Stats().Leases; got != 1 {
		t.Fatalf("leases %d after adopting twice; want 1", got)
	}
	wantError(t, ts.do(t, "POST", "/select", `{"timeout_ms": 0}`), http.StatusServiceUnavailable, api.CodeNoIdlePolicy, "")
	// Another holder cannot take it.
	wantError(t, ts.do(t, "PUT", "/internal/leases/"+otherLeaderLease, `{"policy_id": "`+ps[0].ID+`", "holder": "http://replica-c:8080"}`),
		http.StatusConflict, api.CodeConflict, "")

	var rel api.ReleaseResponse
	want(t, ts.do(t, "POST", "/internal/leases/"+otherLeaderLease+"/release", `{"policy_id": "`+ps[0].ID+`"}`), http.StatusOK, &rel)
	if !rel.Released {
		t.Fatalf("return of the adopted lease = %+v; want released", rel)
	}
	want(t, ts.do(t, "POST", "/select", `{"timeout_ms": 0}`), http.StatusOK, nil)
}

func TestInternalLeaseBadInput(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 1)
	for _, c := range []struct {
		method, path, body string
		status             int
		code, field        string
	}{
		{"PUT", "/internal/leases/not-a-uuid", `{"policy_id": "p", "holder": "h"}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "id"},
		{"PUT", "/internal/leases/" + otherLeaderLease, `{"holder": "h"}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "policy_id"},
		{"PUT", "/internal/leases/" + otherLeaderLease, `{"policy_id": "p", "holder": "h"}`, http.StatusNotFound, api.CodeNotFound, ""},
		{"POST", "/internal/leases/x/release", `{"policy_id": "p"}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "id"},
		{"POST", "/internal/leases", `{"router": "round_robin", "timeout_ms": 0}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "X-Router"},
		{"POST", "/internal/leases", `{"router": "idle_affinity", "timeout_ms": -1}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "timeout_ms"},
		{"POST", "/internal/leases", `{"router": "idle_affinity", "timeout_ms": 0, "session_id": "` + strings.Repeat("s", 257) + `"}`, http.StatusUnprocessableEntity, api.CodeValidationFailed, "session_id"},
		{"POST", "/internal/leases", `{"timeout_ms": 0`, http.StatusBadRequest, api.CodeBadRequest, ""},
	} {
		t.Run(c.method+" "+c.path+" "+c.body, func(t *testing.T) {
			wantError(t, ts.do(t, c.method, c.path, c.body), c.status, c.code, c.field)
		})
	}
}

// The internal endpoints are the leader's: a follower answers not_leader.
func TestInternalLeaseOnFollower(t *testing.T) {
	var leading atomic.Bool
	ts := newTestServer(t, Config{Leader: func() (bool, string) { return leading.Load(), "http://10.0.0.7:8080" }})
	ts.register(t, 1)
	wantError(t, ts.do(t, "POST", "/internal/leases", `{"router": "idle_affinity", "timeout_ms": 0}`), http.StatusServiceUnavailable, api.CodeNotLeader, "")
	wantError(t, ts.do(t, "GET", "/internal/routable", ""), http.StatusServiceUnavailable, api.CodeNotLeader, "")
	leading.Store(true)
	var r api.Routable
	want(t, ts.do(t, "GET", "/internal/routable", ""), http.StatusOK, &r)
	if len(r.Available) != 1 || r.Models == nil {
		t.Errorf("routable = %+v; want the one policy, and a models list", r)
	}
}

// A replica returns a lease unfinished when its client left before the
// answer's end: the leader keeps the policy's slot taken until a probe
// shows what its engine runs.
func TestInternalLeaseReturnedUnfinished(t *testing.T) {
	ts := newTestServer(t, Config{})
	ps := ts.register(t, 1)
	probe := func(sentAt time.Time, load int64) {
		ts.State.ObserveProbe(ps[0].ID, routing.Probe{SentAt: sentAt, OK: true, Idle: load == 0, Load: load, HasLoad: true})
	}
	probe(time.Now().Add(-time.Second), 0)
	var sel api.SelectResponse
	want(t, ts.do(t, "POST", "/internal/leases", `{"router": "idle_affinity", "timeout_ms": 0}`), http.StatusOK, &sel)
	var rel api.ReleaseResponse
	want(t, ts.do(t, "POST", "/internal/leases/"+sel.LeaseID+"/release", `{"policy_id": "`+sel.ID+`", "unfinished": true}`), http.StatusOK, &rel)
	if !rel.Released {
		t.Fatalf("return = %+v; want released", rel)
	}
	wantError(t, ts.do(t, "POST", "/internal/leases", `{"router": "idle_affinity", "timeout_ms": 0}`), http.StatusServiceUnavailable, api.CodeNoIdlePolicy, "")
	probe(time.Now(), 1) // the engine runs on
	wantError(t, ts.do(t, "POST", "/internal/leases", `{"router": "idle_affinity", "timeout_ms": 0}`), http.StatusServiceUnavailable, api.CodeNoIdlePolicy, "")
	probe(time.Now(), 0) // it stopped
	want(t, ts.do(t, "POST", "/internal/leases", `{"router": "idle_affinity", "timeout_ms": 0}`), http.StatusOK, &sel)
}

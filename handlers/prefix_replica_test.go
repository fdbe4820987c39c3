package handlers

import (
	"context"
	"net/http"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/prefix"
	"github.com/policyrouter/policyrouter/proxy"
	"github.com/policyrouter/policyrouter/routing"
)

// A follower's attempt carries the prompt's hashes to the leader, which
// decides on them as for its own proxy, and its return confirms them with
// the engine's cached tokens: the next attempt with the same prompt,
// whichever replica it entered, matches.
func TestInternalLeasePrefixHashes(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 3)
	h := hashesJSON(t, 9, 8)

	var sel api.SelectResponse
	want(t, ts.do(t, "POST", "/internal/leases", `{"router":"simple","timeout_ms":0,"prefix_hashes":`+h+`}`), http.StatusOK, &sel)
	if sel.PrefixOutcome != routing.PrefixMiss {
		t.Fatalf("first lease %+v; want a miss", sel)
	}
	want(t, ts.do(t, "POST", "/internal/leases/"+sel.LeaseID+"/release",
		`{"policy_id":"`+sel.ID+`","prefix_hashes":`+h+`,"cached_tokens":0}`), http.StatusOK, nil)

	var next api.SelectResponse
	want(t, ts.do(t, "POST", "/internal/leases", `{"router":"simple","timeout_ms":0,"prefix_hashes":`+h+`}`), http.StatusOK, &next)
	if next.ID != sel.ID || next.PrefixOutcome != routing.PrefixHit || next.PrefixMatch == nil || *next.PrefixMatch != 8 {
		t.Errorf("next lease %+v; want %s, a hit matching 8 blocks", next, sel.ID)
	}

	// A failed attempt drops what it had pending.
	other := hashesJSON(t, 5000, 4)
	var failed api.SelectResponse
	want(t, ts.do(t, "POST", "/internal/leases", `{"router":"simple","timeout_ms":0,"prefix_hashes":`+other+`}`), http.StatusOK, &failed)
	want(t, ts.do(t, "POST", "/internal/leases/"+failed.LeaseID+"/release",
		`{"policy_id":"`+failed.ID+`","prefix_hashes":`+other+`,"failure":{"at":"2026-01-02T03:04:05Z","reason":"refused"}}`), http.StatusOK, nil)
	var again api.SelectResponse
	want(t, ts.do(t, "POST", "/internal/leases", `{"router":"simple","timeout_ms":0,"prefix_hashes":`+other+`}`), http.StatusOK, &again)
	if again.PrefixOutcome != routing.PrefixMiss {
		t.Errorf("after a failed attempt %+v; want a miss", again)
	}
}

// The proxy's leaser passes a request's hashes to the decision and
// confirms them at the attempt's end with the engine's cached tokens.
func TestStateLeaserPrefix(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 2)
	h := prefix.TokenHashes(make([]uint32, 4*prefix.BlockTokens), 0)
	l := stateLeaser{ts.Server}
	ctx := context.Background()
	req := proxy.Request{Router: "simple", Prefix: h}
	d, err := l.Select(ctx, req)
	if err != nil || d.PrefixOutcome != routing.PrefixMiss {
		t.Fatalf("first: %+v, %v; want a miss", d, err)
	}
	if err := l.Release(ctx, d, proxy.Outcome{Prefix: h, CachedTokens: 0, CachedKnown: true}); err != nil {
		t.Fatal(err)
	}
	d2, err := l.Select(ctx, req)
	if err != nil || d2.Policy.ID != d.Policy.ID || d2.PrefixMatch != 4 || d2.PrefixOutcome != routing.PrefixHit {
		t.Errorf("second: %+v, %v; want %s matching 4 blocks", d2, err, d.Policy.ID)
	}
}

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/client"
)

// demo --engine sglang runs on simulated SGLang servers, registered as
// such; a rolling update from disk reaches them all through SGLang's own
// endpoints and sets the /weights floor.
func TestDemoSGLangEngine(t *testing.T) {
	p := start(t, nil, "demo", "--addr", "127.0.0.1:0", "--engine", "sglang", "--policies", "4", "--workers", "2")
	base := "http://" + p.addr
	ctx, c := context.Background(), client.New(base, nil)
	deadline := time.Now().Add(20 * time.Second)
	var stats api.Stats
	for {
		var err error
		if stats, err = c.Stats(ctx); err != nil {
			t.Fatal(err)
		}
		if len(stats.Policies) == 4 && stats.Totals.Unknown == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo policies never all heard from: %+v", stats.Totals)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, ps := range stats.Policies {
		if ps.Engine != "sglang" || ps.WeightVersion != "default" {
			t.Errorf("policy %d: engine %q, weight_version %q; want sglang, default", ps.Index, ps.Engine, ps.WeightVersion)
		}
	}
	// A plain request: its 202 Accepted is checked too.
	code, body := post(t, base+"/updates", "", `{"version": 1, "model_path": "/ckpt/step-1", "max_unavailable": 2, "set_floor": true}`)
	if code != http.StatusAccepted {
		t.Fatalf("POST /updates: %d %s", code, body)
	}
	var u api.Update
	if err := json.Unmarshal([]byte(body), &u); err != nil {
		t.Fatal(err)
	}
	for u.State == "running" {
		if time.Now().After(deadline.Add(20 * time.Second)) {
			t.Fatalf("update still running: %+v", u)
		}
		time.Sleep(50 * time.Millisecond)
		var err error
		if u, err = c.Update(ctx, u.ID); err != nil {
			t.Fatal(err)
		}
	}
	if u.State != "succeeded" || u.Floor != 1 {
		t.Fatalf("update ended %s (floor %d): %s", u.State, u.Floor, u.Error)
	}
	for _, pol := range u.Policies {
		if pol.WeightVersion != "1" || pol.LastCall == nil || pol.LastCall.Path != "/continue_generation" {
			t.Errorf("policy %d: weight_version %q, last call %+v; want 1 after continue_generation", pol.Index, pol.WeightVersion, pol.LastCall)
		}
	}
	if err := p.stop(t); err != nil {
		t.Fatal(err)
	}
}

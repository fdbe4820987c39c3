package handlers

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/updates"
)

// vllmFleet is a polled router with its update manager running, and n
// simulated vLLM servers registered with it and heard from.
func vllmFleet(t *testing.T, n int) (*testServer, []*fakepolicy.Policy) {
	t.Helper()
	ts, st := polledServer(t)
	runUpdates(t, ts)
	f := fakeFleet(t, n, fakepolicy.Options{Engine: engine.VLLM})
	var pols []api.PolicyRequest
	var fps []*fakepolicy.Policy
	for i := range n {
		idx := i
		pols = append(pols, api.PolicyRequest{URL: f.URL(i), Index: &idx, Engine: engine.VLLM})
		fps = append(fps, f.Policy(i))
	}
	body, _ := json.Marshal(api.ReplacePoliciesRequest{Policies: pols})
	want(t, ts.do(t, "PUT", "/policies", string(body)), http.StatusOK, nil)
	poll.Until(t, "every policy idle", func() bool {
		for _, ps := range st.Stats().Policies {
			if ps.State != routing.StateIdle {
				return false
			}
		}
		return true
	})
	return ts, fps
}

// startUpdate starts an external update of the whole fleet to version and
// waits until every policy waits for the trainer.
func startUpdate(t *testing.T, ts *testServer, body string, n int) api.Update {
	t.Helper()
	var u api.Update
	want(t, ts.do(t, "POST", "/updates", body), http.StatusAccepted, &u)
	poll.Until(t, "every policy ready for the trainer", func() bool {
		want(t, ts.do(t, "GET", "/updates/"+u.ID, ""), http.StatusOK, &u)
		return len(u.Ready) == n
	})
	return u
}

// waitUpdateEnded polls GET /updates/{id} until the update ends.
func waitUpdateEnded(t *testing.T, ts *testServer, id string) api.Update {
	t.Helper()
	var u api.Update
	poll.Until(t, "the update to end", func() bool {
		want(t, ts.do(t, "GET", "/updates/"+id, ""), http.StatusOK, &u)
		return u.State != updates.StateRunning
	})
	return u
}

// wantLabelled checks that every engine and /stats report the label.
func wantLabelled(t *testing.T, ts *testServer, fps []*fakepolicy.Policy, label string, version int64) {
	t.Helper()
	for i, fp := range fps {
		if got := fp.WeightVersion(); got != label {
			t.Errorf("policy %d: the engine's weight_version %q; want %q", i, got, label)
		}
	}
	var stats api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &stats)
	for _, ps := range stats.Policies {
		if ps.WeightVersion != label || ps.Version != version {
			t.Errorf("/stats policy %d: weight_version %q, version %d; want %q, %d", ps.Index, ps.WeightVersion, ps.Version, label, version)
		}
	}
}

// An update in external mode against vLLM: the router pauses each
// engine, the trainer says it moved the weights, the router labels them
// (update_weight_version) and resumes; the update ends with every engine
// reporting the new label.
func TestVLLMExternalUpdateLabels(t *testing.T) {
	ts, fps := vllmFleet(t, 2)
	wantLabelled(t, ts, fps, "default", 0) // what a fresh vLLM reports
	u := startUpdate(t, ts, `{"version": 8, "max_unavailable": "100%"}`, 2)
	body, _ := json.Marshal(api.UpdateDoneRequest{Policies: u.Ready})
	want(t, ts.do(t, "POST", "/updates/"+u.ID+"/done", string(body)), http.StatusOK, nil)
	if u = waitUpdateEnded(t, ts, u.ID); u.State != updates.StateSucceeded {
		t.Fatalf("update ended %s: %s", u.State, u.Error)
	}
	wantLabelled(t, ts, fps, "8", 8)
	want := []string{"POST /pause?mode=wait", "POST /update_weight_version", "POST /resume"}
	for i, fp := range fps {
		if got := controlCalls(fp); !slices.Equal(got, want) {
			t.Errorf("policy %d calls %v; want %v", i, got, want)
		}
	}
}

// A trainer that moves the weights itself (NCCL) runs vLLM's whole
// weight-transfer sequence through POST /fleet/engine/...: each step
// reaches every engine, in order, while the router's update holds them
// paused. The label finish_weight_update publishes is the update's
// version, so the update goes on without POST /updates/{id}/done.
func TestVLLMWeightTransferThroughFleetEngine(t *testing.T) {
	ts, fps := vllmFleet(t, 2)
	u := startUpdate(t, ts, `{"version": 8, "max_unavailable": "100%"}`, 2)
	for _, step := range []struct{ path, body string }{
		{"init_weight_transfer_engine", `{"init_info": {"master_address": "10.0.0.1", "master_port": 29500, "rank_offset": 1, "world_size": 3}}`},
		{"start_weight_update", `null`},
		{"update_weights", `{"update_info": {"names": ["lm_head.weight"], "dtype_names": ["bfloat16"], "shapes": [[8, 8]], "packed": true}}`},
		{"finish_weight_update", `{"weight_version": "8"}`},
	} {
		rec := ts.do(t, "POST", "/fleet/engine/"+step.path, `{"body": `+step.body+`}`)
		if out := fleetAnswer(t, rec); rec.Code != http.StatusOK || len(out.Results) != 2 || len(out.Failed) != 0 {
			t.Fatalf("POST /fleet/engine/%s: %d %s", step.path, rec.Code, rec.Body)
		}
	}
	if u = waitUpdateEnded(t, ts, u.ID); u.State != updates.StateSucceeded {
		t.Fatalf("update ended %s: %s", u.State, u.Error)
	}
	wantLabelled(t, ts, fps, "8", 8)
	want := []string{
		"POST /pause?mode=wait",
		"POST /init_weight_transfer_engine", "POST /start_weight_update", "POST /update_weights", "POST /finish_weight_update",
		"POST /update_weight_version", "POST /resume",
	}
	for i, fp := range fps {
		if got := controlCalls(fp); !slices.Equal(got, want) {
			t.Errorf("policy %d calls %v; want %v", i, got, want)
		}
	}
}

package handlers

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/engine"
)

// POST /updates refuses, with a 422 naming the field, a pause mode no
// engine has, one an engine of a registered policy has not got, and a
// model_path an engine cannot load without an action.
func TestUpdatePauseModeAndModelPathChecked(t *testing.T) {
	ts := newTestServer(t, Config{})
	rec := ts.do(t, "PUT", "/policies", `{"policies": [
		{"url": "http://127.0.0.1:9/a", "index": 0, "engine": "sglang"},
		{"url": "http://127.0.0.1:9/b", "index": 1, "engine": "vllm"}]}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("PUT /policies: %d %s", rec.Code, rec.Body)
	}
	for _, tt := range []struct{ body, field string }{
		{`{"version": 3, "pause_mode": "pause"}`, "pause_mode"},
		{`{"version": 3, "pause_mode": "retract"}`, "pause_mode"}, // vLLM has none
		{`{"version": 3, "pause_mode": "keep"}`, "pause_mode"},    // SGLang has none
		{`{"version": 3, "model_path": "/ckpt/3"}`, "model_path"}, // vLLM loads no checkpoint
		{`{"version": 3, "phase_timeout_ms": 0}`, "phase_timeout_ms"},
	} {
		wantError(t, ts.do(t, "POST", "/updates", tt.body), http.StatusUnprocessableEntity, api.CodeValidationFailed, tt.field)
	}
	var u api.Update
	want(t, ts.do(t, "POST", "/updates", `{"version": 3, "pause_mode": "abort", "set_floor": true, "phase_timeout_ms": 5000}`), http.StatusAccepted, &u)
	if u.PauseMode != "abort" || !u.SetFloor || u.PhaseTimeoutMS != 5000 || !u.External {
		t.Errorf("started update %+v; want abort, set_floor, 5000 ms, external", u)
	}
	want(t, ts.do(t, "POST", "/updates/"+u.ID+"/abort", ""), http.StatusOK, &u)

	// A policyrouter engine pauses nothing: only "wait".
	ts2 := newTestServer(t, Config{})
	ts2.register(t, 2)
	wantError(t, ts2.do(t, "POST", "/updates", `{"version": 3, "pause_mode": "abort"}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "pause_mode")
	wantError(t, ts2.do(t, "POST", "/updates", `{"version": 3, "model_path": "/ckpt/3"}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "model_path")
}

// The OpenAPI enums of pause_mode are the poller's list of pause modes.
func TestPauseModesMatchOpenAPI(t *testing.T) {
	doc, _, err := loadSpec()
	if err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{"UpdateRequest", "Update"} {
		prop := doc.Components.Schemas[schema].Value.Properties["pause_mode"]
		if prop == nil {
			t.Errorf("openapi.yaml has no %s.pause_mode", schema)
			continue
		}
		var got []string
		for _, v := range prop.Value.Enum {
			s, _ := v.(string)
			got = append(got, s)
		}
		if !slices.Equal(got, engine.PauseModes) {
			t.Errorf("%s.pause_mode enum %v; engine.PauseModes %v", schema, got, engine.PauseModes)
		}
	}
}

// A lease a weight update aborted answers POST /release with released
// false and reason "aborted"; one released twice has no reason.
func TestReleaseOfAbortedLease(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 2)
	var a, b api.SelectResponse
	want(t, ts.do(t, "POST", "/select", `{}`), http.StatusOK, &a)
	want(t, ts.do(t, "POST", "/select", `{}`), http.StatusOK, &b)
	if _, err := ts.State.AbortLeases(a.ID); err != nil {
		t.Fatal(err)
	}
	var got api.ReleaseResponse
	want(t, ts.do(t, "POST", "/release", `{"lease_id": "`+a.LeaseID+`"}`), http.StatusOK, &got)
	if got.Released || got.Reason != "aborted" {
		t.Errorf("release of an aborted lease = %+v; want released false, reason aborted", got)
	}
	want(t, ts.do(t, "POST", "/release", `{"lease_id": "`+b.LeaseID+`"}`), http.StatusOK, &got)
	rec := ts.do(t, "POST", "/release", `{"lease_id": "`+b.LeaseID+`"}`)
	var again map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &again)
	if _, ok := again["reason"]; ok || again["released"] != false {
		t.Errorf("second release of a normal lease = %v; want released false, no reason", again)
	}
}

// A policy the latest update failed, still drained, reads update_failed in
// /stats with the engine's message; once resumed it is itself again.
func TestStatsShowsUpdateFailed(t *testing.T) {
	ts := newTestServer(t, Config{})
	pols := ts.register(t, 2)
	doc := `{"id": "u1", "spec": {"version": 9, "max_unavailable": 1}, "state": "failed", "created": "2025-01-01T00:00:00Z",
		"policies": [{"id": "` + pols[1].ID + `", "index": 1, "phase": "failed", "error": "step load: status 400: model not found"}]}`
	if err := ts.Updates.Restore(map[string][]byte{"u1": []byte(doc)}); err != nil {
		t.Fatal(err)
	}
	want(t, ts.do(t, "POST", "/policies/"+pols[1].ID+"/drain", ""), http.StatusOK, nil)
	var stats api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &stats)
	p := stats.Policies[1]
	if p.State != api.StateUpdateFailed || p.UpdateError != "step load: status 400: model not found" || stats.Totals.UpdateFailed != 1 || stats.Totals.Draining != 0 {
		t.Errorf("/stats policy %+v, totals %+v; want update_failed with the engine's message", p, stats.Totals)
	}
	want(t, ts.do(t, "POST", "/policies/"+pols[1].ID+"/resume", ""), http.StatusOK, nil)
	var after api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &after)
	if p := after.Policies[1]; p.State == api.StateUpdateFailed || p.UpdateError != "" {
		t.Errorf("resumed policy %+v; want it no longer update_failed", p)
	}
}

package handlers

import (
	"net/http"
	"testing"

	"github.com/policyrouter/policyrouter/api"
)

// The /updates endpoints: start (202), one at a time (409), read, confirm,
// abort, and the input checks. The rolling itself is tested in updates/.
func TestUpdatesEndpoints(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 8)
	for _, tt := range []struct{ body, field string }{
		{`{"max_unavailable": 1}`, "version"},
		{`{"version": 3, "max_unavailable": 0}`, "max_unavailable"},
		{`{"version": 3, "max_unavailable": "150%"}`, "max_unavailable"},
		{`{"version": 3, "max_unavailable": "lots"}`, "max_unavailable"},
		{`{"version": 3, "action": {"body": {}}}`, "action.path"},
		{`{"version": 3, "action": {"path": "/u", "method": "DELETE"}}`, "action.method"},
		{`{"version": 3, "drain_timeout_ms": -1}`, "drain_timeout_ms"},
	} {
		wantError(t, ts.do(t, "POST", "/updates", tt.body), http.StatusUnprocessableEntity, api.CodeValidationFailed, tt.field)
	}
	var u api.Update
	rec := ts.do(t, "POST", "/updates", `{"version": 3, "max_unavailable": "25%", "min_available_per_node": 1}`)
	want(t, rec, http.StatusAccepted, &u)
	if u.State != "running" || u.MaxUnavailable != 2 || !u.External || rec.Header().Get("Location") != "/updates/"+u.ID {
		t.Errorf("started update %+v (Location %q); want running, 25%% of 8 = 2, external", u, rec.Header().Get("Location"))
	}
	wantError(t, ts.do(t, "POST", "/updates", `{"version": 4}`), http.StatusConflict, api.CodeConflict, "")
	var stats api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &stats)
	if stats.Update == nil || stats.Update.ID != u.ID || stats.Update.State != "running" {
		t.Errorf("/stats update = %+v; want the running update", stats.Update)
	}
	var got api.Update
	want(t, ts.do(t, "GET", "/updates/"+u.ID, ""), http.StatusOK, &got)
	if got.ID != u.ID {
		t.Errorf("GET /updates/{id} = %+v", got)
	}
	var list api.UpdateList
	want(t, ts.do(t, "GET", "/updates", ""), http.StatusOK, &list)
	if len(list.Updates) != 1 {
		t.Errorf("GET /updates lists %d updates; want 1", len(list.Updates))
	}
	wantError(t, ts.do(t, "POST", "/updates/"+u.ID+"/done", `{"policies": ["nope"]}`), http.StatusConflict, api.CodeConflict, "")
	wantError(t, ts.do(t, "POST", "/updates/"+u.ID+"/done", `{"policies": []}`), http.StatusUnprocessableEntity, api.CodeValidationFailed, "policies")
	want(t, ts.do(t, "POST", "/updates/"+u.ID+"/abort", ""), http.StatusOK, &got)
	if got.State != "aborted" || got.Ended == nil {
		t.Errorf("aborted update = %+v", got)
	}
	wantError(t, ts.do(t, "POST", "/updates/"+u.ID+"/abort", ""), http.StatusConflict, api.CodeConflict, "")
	wantError(t, ts.do(t, "GET", "/updates/nope", ""), http.StatusNotFound, api.CodeNotFound, "")
	want(t, ts.do(t, "POST", "/updates", `{"version": 4, "max_unavailable": "100%", "action": {"path": "/update_weights_from_disk", "body": {"model_path": "/ckpt/4"}}}`), http.StatusAccepted, &u)
	if u.MaxUnavailable != 8 || u.External {
		t.Errorf("pause-everything update %+v; want max_unavailable 8 with an action", u)
	}
}

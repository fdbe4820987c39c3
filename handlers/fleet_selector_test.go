package handlers

import (
	"net/http"
	"testing"

	"github.com/policyrouter/policyrouter/api"
)

// A key the request does not know is named by its path: a wrong selector
// key is selector.index, not index, on every fleet verb.
func TestFleetUnknownSelectorKeyNamedByPath(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 2)
	tests := []struct {
		name, method, path, body string
		field                    string
	}{
		{"sleep", "POST", "/fleet/sleep", `{"selector": {"index": 1}}`, "selector.index"},
		{"wake", "POST", "/fleet/wake", `{"selector": {"indices": [0], "index": 1}}`, "selector.index"},
		{"engine verb", "POST", "/fleet/engine/pause_generation", `{"selector": {"Index": 1}}`, "selector.Index"},
		{"top level stays unqualified", "POST", "/fleet/sleep", `{"index": 1}`, "index"},
		{"a key the engine's body carries is the engine's", "POST", "/fleet/engine/x", `{"body": {"index": 1}, "selector": {"idx": [0]}}`, "selector.idx"},
		{"in a list", "PUT", "/policies", `{"policies": [{"url": "http://127.0.0.1:9/p/0"}, {"url": "http://127.0.0.1:9/p/1", "index": 1, "capacty": 4}]}`, "policies[1].capacty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := wantError(t, ts.do(t, tt.method, tt.path, tt.body), http.StatusUnprocessableEntity, api.CodeValidationFailed, tt.field)
			if want := "is not a known field"; got.Fields[tt.field] != want {
				t.Errorf("fields = %v, want %s: %q", got.Fields, tt.field, want)
			}
			if len(got.Fields) != 1 {
				t.Errorf("fields = %v, want %s alone", got.Fields, tt.field)
			}
		})
	}
}

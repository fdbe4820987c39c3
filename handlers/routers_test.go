package handlers

import (
	"encoding/json"
	"github.com/policyrouter/policyrouter/api"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/routing"
)

// The table of routers is the one source of router names: the OpenAPI
// enums must list exactly its names, in its order.
func TestRouterTableMatchesOpenAPI(t *testing.T) {
	doc, _, err := loadSpec()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		schema, property string
		want             []string
	}{
		{"AssignRequest", "router", routing.AssignRouterNames()},
		{"SelectRequest", "router", routing.SelectRouterNames()},
		{"Stats", "router", routing.DefaultRouterNames()},
	} {
		ref := doc.Components.Schemas[tt.schema]
		if ref == nil || ref.Value.Properties[tt.property] == nil {
			t.Errorf("openapi.yaml has no %s.%s", tt.schema, tt.property)
			continue
		}
		var got []string
		for _, v := range ref.Value.Properties[tt.property].Value.Enum {
			s, _ := v.(string)
			got = append(got, s)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("openapi.yaml %s.%s enum = %v; the table of routers says %v", tt.schema, tt.property, got, tt.want)
		}
	}
}

// Every router the table offers is accepted by its endpoint, and a name
// it does not offer there is a 422 naming the router field.
func TestRouterNamesFromTable(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 2)
	for _, r := range routing.Routers() {
		body := `{"num_tasks": 1, "router": "` + r.Name + `"}`
		want := http.StatusOK
		if r.Assign == nil {
			want = http.StatusUnprocessableEntity
		}
		if rec := ts.do(t, "POST", "/assign", body); rec.Code != want {
			t.Errorf("/assign router %s: %d %s; want %d", r.Name, rec.Code, rec.Body, want)
		}
		body = `{"router": "` + r.Name + `", "timeout_ms": 0, "session_id": "s-` + r.Name + `"}`
		want = http.StatusOK
		if r.Select == nil {
			want = http.StatusUnprocessableEntity
		}
		rec := ts.do(t, "POST", "/select", body)
		if rec.Code != want {
			t.Errorf("/select router %s: %d %s; want %d", r.Name, rec.Code, rec.Body, want)
		}
		var sel api.SelectResponse
		if rec.Code == http.StatusOK && json.Unmarshal(rec.Body.Bytes(), &sel) == nil && sel.LeaseID != "" {
			ts.do(t, "POST", "/release", `{"lease_id":"`+sel.LeaseID+`"}`)
		}
	}
	rec := ts.do(t, "POST", "/select", `{"router": "fifo"}`)
	if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), `"router"`) {
		t.Errorf("unknown router: %d %s; want 422 naming router", rec.Code, rec.Body)
	}
	for _, name := range routing.SelectRouterNames() {
		if !strings.Contains(rec.Body.String(), name) {
			t.Errorf("422 for an unknown router does not list %s: %s", name, rec.Body)
		}
	}
}

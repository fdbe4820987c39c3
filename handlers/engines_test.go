package handlers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/routing"
)

// The table of engines is the one source of engine names: openapi.yaml
// lists them once, in EngineName, in the table's order, and every other
// schema refers to it rather than listing them again.
func TestEngineTableMatchesOpenAPI(t *testing.T) {
	doc, _, err := loadSpec()
	if err != nil {
		t.Fatal(err)
	}
	names := doc.Components.Schemas["EngineName"]
	if names == nil {
		t.Fatal("openapi.yaml has no EngineName")
	}
	if got, want := enumStrings(names.Value), engine.Names(); !slices.Equal(got, want) {
		t.Errorf("openapi.yaml EngineName enum = %v; the table of engines says %v", got, want)
	}
	for _, schema := range []string{"PolicyRequest", "Policy", "PolicyStats", "FleetSelector", "UpdatePolicy", "WorkerInfo", "WorkerSpecRequest"} {
		ref := doc.Components.Schemas[schema]
		if ref == nil || ref.Value.Properties["engine"] == nil && ref.Value.Properties["runtime_type"] == nil {
			t.Errorf("openapi.yaml has no %s.engine or .runtime_type", schema)
		}
	}
	// No other list of engine names: any enum naming an engine besides
	// the native one is a copy that a new engine would leave behind.
	const namesRef = "#/components/schemas/EngineName"
	refs := 0
	seen := map[*openapi3.Schema]bool{}
	var walk func(path string, s *openapi3.SchemaRef)
	walk = func(path string, s *openapi3.SchemaRef) {
		if s == nil || s.Value == nil || seen[s.Value] {
			return
		}
		if s.Ref == namesRef {
			refs++
			return
		}
		seen[s.Value] = true
		for _, v := range enumStrings(s.Value) {
			if v != engine.Native && engine.Is(v) {
				t.Errorf("%s lists engine names %v: refer to %s instead", path, enumStrings(s.Value), namesRef)
				break
			}
		}
		for name, p := range s.Value.Properties {
			walk(path+"."+name, p)
		}
		walk(path+"[]", s.Value.Items)
		for i, sub := range append(append(append(openapi3.SchemaRefs{}, s.Value.AllOf...), s.Value.AnyOf...), s.Value.OneOf...) {
			walk(fmt.Sprintf("%s<%d>", path, i), sub)
		}
		if s.Value.AdditionalProperties.Schema != nil {
			walk(path+"{}", s.Value.AdditionalProperties.Schema)
		}
	}
	for name, s := range doc.Components.Schemas {
		if name != "EngineName" {
			walk(name, s)
		}
	}
	if refs == 0 {
		t.Errorf("the walk found no reference to %s: it misses them", namesRef)
	}
}

// enumStrings returns the string values of s's enum.
func enumStrings(s *openapi3.Schema) []string {
	var out []string
	for _, v := range s.Enum {
		if str, ok := v.(string); ok {
			out = append(out, str)
		}
	}
	return out
}

// A policy's engine is stored and shown; an unknown one is a 422 naming
// the field; the default is policyrouter.
func TestPolicyEngine(t *testing.T) {
	ts := newTestServer(t, Config{})
	rec := ts.do(t, "PUT", "/policies", `{"policies": [
		{"url": "http://127.0.0.1:9/a", "index": 0},
		{"url": "http://127.0.0.1:9/b", "index": 1, "engine": "sglang"},
		{"url": "http://127.0.0.1:9/c", "index": 2, "engine": "vllm"}]}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("PUT /policies: %d %s", rec.Code, rec.Body)
	}
	var list api.PolicyList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range list.Policies {
		got = append(got, p.Engine)
	}
	if want := []string{"policyrouter", "sglang", "vllm"}; !slices.Equal(got, want) {
		t.Errorf("engines %v; want %v", got, want)
	}
	var stats api.Stats
	if err := json.Unmarshal(ts.do(t, "GET", "/stats", "").Body.Bytes(), &stats); err != nil {
		t.Fatal(err)
	}
	if len(stats.Policies) != 3 || stats.Policies[1].Engine != "sglang" {
		t.Errorf("/stats policies %+v; want engine sglang at index 1", stats.Policies)
	}
	rec = ts.do(t, "POST", "/policies", `{"url": "http://127.0.0.1:9/d", "engine": "tgi"}`)
	if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), `"engine"`) {
		t.Errorf("unknown engine: %d %s; want 422 naming engine", rec.Code, rec.Body)
	}
	// Same body again is idempotent; another engine for the index conflicts.
	if rec := ts.do(t, "POST", "/policies", `{"url": "http://127.0.0.1:9/b", "index": 1, "engine": "sglang"}`); rec.Code != http.StatusOK {
		t.Errorf("repeat: %d %s; want 200", rec.Code, rec.Body)
	}
	rec = ts.do(t, "POST", "/policies", `{"url": "http://127.0.0.1:9/b", "index": 1, "engine": "vllm"}`)
	if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "engine") {
		t.Errorf("other engine: %d %s; want 409 naming engine", rec.Code, rec.Body)
	}
}

// The registry's default engine applies to registrations that name none.
func TestPolicyDefaultEngine(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.Registry.SetDefaultEngine("vllm")
	rec := ts.do(t, "POST", "/policies", `{"url": "http://127.0.0.1:9/a"}`)
	var p api.Policy
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Engine != "vllm" {
		t.Errorf("POST /policies: %d %s; want engine vllm", rec.Code, rec.Body)
	}
}

// api_key and admin_api_key are write-only: stored (and sent to the
// engine), never in an answer. Sending the registration back without them
// keeps them; "" removes one.
func TestPolicyKeysWriteOnly(t *testing.T) {
	const key, admin = "sk-probe-SECRET-1", "sk-admin-SECRET-2"
	ts := newTestServer(t, Config{})
	body := `{"policies": [{"url": "http://127.0.0.1:9/a", "index": 0, "id": "a", "engine": "sglang",
		"api_key": "` + key + `", "admin_api_key": "` + admin + `"}], "topology": {}}`
	answers := []string{ts.do(t, "PUT", "/registration", body).Body.String()}
	answers = append(answers, ts.do(t, "POST", "/policies", `{"url": "http://127.0.0.1:9/b", "id": "b", "api_key": "`+key+`"}`).Body.String())
	for _, path := range []string{"/registration", "/policies", "/policies/a", "/policies/b", "/stats"} {
		answers = append(answers, ts.do(t, "GET", path, "").Body.String())
	}
	answers = append(answers, ts.do(t, "POST", "/policies/a/drain", "").Body.String())
	for _, a := range answers {
		if strings.Contains(a, "SECRET") || strings.Contains(a, "api_key") {
			t.Errorf("an answer shows a key: %s", a)
		}
	}
	p, err := ts.Registry.Get("a")
	if err != nil || p.APIKey.Reveal() != key || p.AdminAPIKey.Reveal() != admin {
		t.Fatalf("stored policy a: %v; want its keys", err)
	}
	if got := p.BearerFor(false); got != key {
		t.Errorf("probe key %q; want the api key", got)
	}
	if got := p.BearerFor(true); got != admin {
		t.Errorf("admin key %q; want the admin key", got)
	}
	// The registration read back and sent again keeps the keys.
	var reg api.Registration
	if err := json.Unmarshal(ts.do(t, "GET", "/registration", "").Body.Bytes(), &reg); err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(map[string]any{"policies": []map[string]any{{"url": reg.Policies[0].URL, "index": 0, "id": "a", "engine": "sglang"}}, "topology": map[string]any{}})
	if rec := ts.do(t, "PUT", "/registration", string(again)); rec.Code != http.StatusOK {
		t.Fatalf("PUT again: %d %s", rec.Code, rec.Body)
	}
	if p, _ := ts.Registry.Get("a"); p.APIKey.Reveal() != key || p.AdminAPIKey.Reveal() != admin {
		t.Errorf("keys lost by a registration sent back without them")
	}
	rec := ts.do(t, "PUT", "/policies", `{"policies": [{"url": "http://127.0.0.1:9/a", "index": 0, "id": "a", "engine": "sglang", "admin_api_key": ""}]}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("PUT /policies: %d %s", rec.Code, rec.Body)
	}
	if p, _ := ts.Registry.Get("a"); p.APIKey.Reveal() != key || p.AdminAPIKey != "" {
		t.Errorf(`"" did not remove the admin key, or removed the other`)
	}
	// A policy printed or logged shows no key.
	if s := routing.Secret(key).String() + (routing.Policy{APIKey: key}).APIKey.GoString(); strings.Contains(s, "SECRET") {
		t.Errorf("a printed secret shows it: %s", s)
	}
}

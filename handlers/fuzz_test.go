package handlers

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// fuzzBody sends body to method path on a server with two policies and a
// topology, and fails on a panic (the recoverer would turn it into a 500),
// on any 5xx but a 503 that says there is nothing to route to, and on any
// answer openapi.yaml does not describe: a 2xx body must match its
// operation's schema, an error the envelope.
func fuzzBody(f *testing.F, method, path string, seeds ...string) {
	// Waits are capped at 1ms: a fuzzed /select must never block the run.
	ts := newTestServer(f, Config{MaxBodyBytes: 64 << 10, MaxSelectWait: time.Millisecond})
	ts.register(f, 2)
	ts.do(f, "PUT", "/topology", `{"n0":{"env":{"ids":[0,1]},"eval":{"ids":[0,1]}}}`)
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		ts.h.ServeHTTP(rec, req)
		switch {
		case rec.Code < 300 && rec.Body.Len() > fuzzSpecLimit:
			// A million-task /assign answer takes seconds to check against
			// the schema, and the fuzzer, minimising such an input over
			// and over, takes that for a hang. Its shape is the small
			// answers', which are checked; here it must be JSON.
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("%s %s %q: %d bytes of answer that are not JSON", method, path, body, rec.Body.Len())
			}
		case rec.Code < 300:
			checkSpec(t, req, rec.Code, rec.Header(), rec.Body.Bytes())
		default:
			// The error envelope alone: cheaper than finding the route.
			checkEnvelope(t, method+" "+path, rec.Code, rec.Header(), rec.Body.Bytes())
		}
		switch {
		case rec.Code == http.StatusServiceUnavailable:
			var env struct {
				Error struct{ Code string } `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || !slices.Contains(fuzzNoCapacity, env.Error.Code) {
				t.Fatalf("%s %s %q: 503 that is not a lack of policies: %s", method, path, body, rec.Body)
			}
		case rec.Code >= 500:
			t.Fatalf("%s %s %q: status %d: %s", method, path, body, rec.Code, rec.Body)
		case method == "POST" && (path == "/select" || path == "/internal/leases") && rec.Code == http.StatusOK:
			// Give the lease back, so that the next input finds an
			// idle policy and its 200 is checked too.
			var sel struct {
				LeaseID string `json:"lease_id"`
			}
			if json.Unmarshal(rec.Body.Bytes(), &sel) == nil && sel.LeaseID != "" {
				ts.do(t, "POST", "/release", `{"lease_id":"`+sel.LeaseID+`"}`)
			}
		}
	})
}

// fuzzSpecLimit is the largest answer a fuzz run checks against
// openapi.yaml (about 1.2 s per 2 MB answer here).
const fuzzSpecLimit = 256 << 10

// fuzzNoCapacity are the 503 codes a fuzzed request may meet: the policy
// set replaced by an empty one, both policies leased, or a floor above
// their versions. Shutting down, overload and the HA codes cannot happen
// here.
var fuzzNoCapacity = []string{"no_policies", "all_unavailable", "no_idle_policy", "no_fresh_policy"}

func FuzzAssignBody(f *testing.F) {
	fuzzBody(f, "POST", "/assign",
		`{"num_tasks":4,"current_loads":[3,1,2]}`,
		`{"num_tasks":2,"env_ids":["env-0","env-x"],"router":"node_affinity"}`,
		`{"num_tasks":1048576,"current_loads":[-536870912]}`,
		`{"num_tasks":1}`, `{}`, `[]`, `null`, `{"num_tasks":1e400}`,
		`{"num_tasks":3,"session_ids":["g",null,""],"load_factor":1.25}`,
		`{"num_tasks":2,"session_ids":["a","b"],"current_loads":[0,600000000],"router":"node_affinity","env_ids":["env-0","env-1"]}`,
		`{"num_tasks":1,"session_ids":[1],"load_factor":-1}`)
}

func FuzzSelectBody(f *testing.F) {
	fuzzBody(f, "POST", "/select",
		`{"env_id":"env-0","router":"idle_affinity","timeout_ms":0}`,
		`{"router":"node_affinity","env_id":"env-١"}`, `{"timeout_ms":-1}`, `{"timeout_ms":0}`,
		`{"session_id":"traj-1","sticky_wait_ms":5000,"load_factor":1.5}`,
		`{"session_id":"g","router":"node_affinity","load_factor":1e308}`, `{"session_id":"","sticky_wait_ms":-1}`)
}

func FuzzReleaseBody(f *testing.F) {
	fuzzBody(f, "POST", "/release",
		`{"lease_id":"00000000-0000-8000-8000-000000000001"}`, `{"index":0}`, `{"index":-5}`, `{"lease_id":""}`)
}

func FuzzInternalLeaseBody(f *testing.F) {
	fuzzBody(f, "POST", "/internal/leases",
		`{"router":"idle_affinity","timeout_ms":0,"route":"/generate"}`,
		`{"router":"power_of_two","timeout_ms":5,"session_id":"s","sticky_wait_ms":9,"exclude":["x"],"min_version":0}`,
		`{"router":"node_affinity","timeout_ms":0}`, `{"router":"","timeout_ms":-1}`, `{"timeout_ms":0,"lease_ttl_ms":1e20}`)
}

func FuzzAdoptBody(f *testing.F) {
	fuzzBody(f, "PUT", "/internal/leases/0190f5c2-7a3b-8c4d-9e5f-0123456789ab",
		`{"policy_id":"p","holder":"http://r"}`, `{"policy_id":"","holder":""}`, `{"policy_id":"p","holder":"h","lease_ttl_ms":-1}`)
}

func FuzzLeaseReleaseBody(f *testing.F) {
	fuzzBody(f, "POST", "/internal/leases/0190f5c2-7a3b-8c4d-9e5f-0123456789ab/release",
		`{"policy_id":"p"}`, `{"policy_id":"p","failure":{"at":"2026-01-01T00:00:00Z","reason":"x"}}`, `{"failure":{"at":"x"}}`)
}

func FuzzCompleteBody(f *testing.F) {
	fuzzBody(f, "POST", "/complete", `{"index":0,"count":2}`, `{"index":1}`, `{"count":1}`)
}

func FuzzRegisterBody(f *testing.F) {
	fuzzBody(f, "POST", "/policies",
		`{"url":"http://127.0.0.1:9001","node_id":"n0","index":3,"capacity":2,"labels":{"a":"b"}}`,
		`{"url":"http://u:p@h/"}`, `{"url":"http://[::1"}`, `{"url":"http://h","id":"x","index":0}`)
}

func FuzzReplaceBody(f *testing.F) {
	fuzzBody(f, "PUT", "/policies",
		`{"policies":[{"url":"http://127.0.0.1:9001","index":0},{"url":"http://127.0.0.1:9002","index":1}]}`,
		`{"policies":[{"url":"http://a","index":1},{"url":"http://b","index":1}]}`, `{"policies":null}`)
}

func FuzzTopologyBody(f *testing.F) {
	fuzzBody(f, "PUT", "/topology",
		`{"n0":{"env":{"ids":[0,1]},"eval":{"ids":[0,1]}}}`,
		`{"n0":{"env":{"ids":[0]}}}`, `{"":{"env":{"ids":[0]},"eval":{"ids":[0]}}}`,
		`{"a":{"env":{"ids":[1048576]},"eval":{"ids":[0]}}}`, `{"a":null}`, `{"a":{"eval":null}}`)
}

// FuzzWorkerBody fuzzes SMG's POST /workers. The server asks no engine
// for its capacity (Config.EngineCapacity nil): no fuzzed URL is dialled.
func FuzzWorkerBody(f *testing.F) {
	fuzzBody(f, "POST", "/workers",
		`{"url":"http://127.0.0.1:30000","worker_type":"regular"}`,
		`{"url":"http://127.0.0.1:30001","runtime_type":"vllm","labels":{"a":"b"},"capacity":3,"priority":50,"cost":1.0}`,
		`{"url":"http://h","runtime":"sglang","models":[{"id":"m"}],"api_key":"k","bootstrap_port":8998}`,
		`{"url":"10.0.0.5:8000"}`, `{"url":"http://h","worker_type":"prefill"}`, `{"url":"http://h","cost":1e400}`, `[]`, `null`)
}

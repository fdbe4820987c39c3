package handlers

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/prefix"
	"github.com/policyrouter/policyrouter/routing"
)

// hashesJSON renders the hashes of the token ids base, base+1, ... (n
// blocks) as a JSON array. The prefix index keeps whole steps of
// prefix.DefaultStride blocks: the tests' prompts are whole steps.
func hashesJSON(tb testing.TB, base, n int) string {
	tb.Helper()
	ids := make([]uint32, n*prefix.BlockTokens)
	for i := range ids {
		ids[i] = uint32(base + i)
	}
	b, err := json.Marshal(prefix.TokenHashes(ids, 0))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func TestSelectBadPrefixHashes(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 2)
	for _, tc := range []struct{ name, value string }{
		{"not hex", `["zzzzzzzzzzzzzzzz"]`},
		{"short", `["abc"]`},
		{"upper case", `["ABCDEF0123456789"]`},
		{"a number", `[12]`},
		{"a string", `"4cbad8846f198735"`},
		{"an object", `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/select", "/assign", "/release"} {
				body := `{"prefix_hashes":` + tc.value + `}`
				switch path {
				case "/assign":
					body = `{"num_tasks":1,"prefix_hashes":` + tc.value + `}`
				case "/release":
					body = `{"index":0,"prefix_hashes":` + tc.value + `}`
				}
				wantError(t, ts.do(t, "POST", path, body), http.StatusUnprocessableEntity, api.CodeValidationFailed, "prefix_hashes")
			}
		})
	}
}

func TestSelectPrefixHashes(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 3)
	h := hashesJSON(t, 0, 8)

	// Nobody holds them: the router's pick, and the hashes pending there.
	var first api.SelectResponse
	want(t, ts.do(t, "POST", "/select", `{"router":"simple","prefix_hashes":`+h+`}`), http.StatusOK, &first)
	if first.PrefixOutcome != routing.PrefixMiss || first.PrefixMatch == nil || *first.PrefixMatch != 0 {
		t.Fatalf("first answer %+v; want a miss with match 0", first)
	}
	// Its release reports prompt + output: the next turn matches.
	turn := hashesJSON(t, 0, 12)
	want(t, ts.do(t, "POST", "/release", `{"lease_id":"`+first.LeaseID+`","prefix_hashes":`+turn+`}`), http.StatusOK, nil)
	var next api.SelectResponse
	want(t, ts.do(t, "POST", "/select", `{"router":"simple","prefix_hashes":`+turn+`}`), http.StatusOK, &next)
	if next.ID != first.ID || next.PrefixOutcome != routing.PrefixHit || next.PrefixMatch == nil || *next.PrefixMatch != 12 {
		t.Errorf("next turn %+v; want %s, a hit matching 12 blocks", next, first.ID)
	}

	// Without hashes the answer says nothing of prefixes.
	rec := ts.do(t, "POST", "/select", `{"router":"simple"}`)
	want(t, rec, http.StatusOK, nil)
	if strings.Contains(rec.Body.String(), "prefix") {
		t.Errorf("answer without hashes %s; want no prefix fields", rec.Body)
	}

	var st api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &st)
	if st.Prefix.Decisions[routing.PrefixHit] != 1 || st.Prefix.Decisions[routing.PrefixMiss] != 1 ||
		st.Prefix.MatchedTokens != 12*prefix.BlockTokens || len(st.Prefix.Policies) == 0 {
		t.Errorf("stats prefix %+v; want 1 hit, 1 miss, 192 matched tokens and the indexed policy", st.Prefix)
	}
}

func TestSelectLongPrefixHashesCapped(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 1)
	var out api.SelectResponse
	want(t, ts.do(t, "POST", "/select", `{"prefix_hashes":`+hashesJSON(t, 0, prefix.MaxBlocks+100)+`}`), http.StatusOK, &out)
	if out.PrefixOutcome == "" {
		t.Errorf("answer %+v; want a prefix outcome", out)
	}
	var st api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &st)
	if got := st.Prefix.PromptTokens; got != prefix.MaxBlocks*prefix.BlockTokens {
		t.Errorf("prompt tokens %d; want %d (capped, not refused)", got, prefix.MaxBlocks*prefix.BlockTokens)
	}
}

func TestAssignPrefixHashesRecorded(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 2)
	h := hashesJSON(t, 50, 4)
	var a api.AssignResponse
	want(t, ts.do(t, "POST", "/assign", `{"num_tasks":1,"router":"simple","prefix_hashes":`+h+`}`), http.StatusOK, &a)
	var st api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &st)
	if len(st.Prefix.Policies) != 1 || st.Prefix.Policies[0].PendingTokens != 4*prefix.BlockTokens {
		t.Errorf("stats prefix policies %+v; want the assigned policy with 4 blocks pending", st.Prefix.Policies)
	}
}

// An /assign of a group with its prompt's hashes gathers the tasks on one
// policy (the seed's least-loaded spread puts one on each), and the next
// /select of the prompt follows them there.
func TestAssignPrefixHashesGatherGroup(t *testing.T) {
	ts := newTestServer(t, Config{})
	var policies strings.Builder
	for i := range 4 {
		if i > 0 {
			policies.WriteByte(',')
		}
		policies.WriteString(`{"url":"http://127.0.0.1:9/p` + itoa(i) + `","index":` + itoa(i) + `,"capacity":16}`)
	}
	want(t, ts.do(t, "PUT", "/policies", `{"policies":[`+policies.String()+`]}`), http.StatusOK, nil)
	h := hashesJSON(t, 900, 4)
	var a api.AssignResponse
	want(t, ts.do(t, "POST", "/assign", `{"num_tasks":4,"router":"simple","prefix_hashes":`+h+`}`), http.StatusOK, &a)
	if len(a.Policies) != 1 || len(a.Assignments) != 4 {
		t.Fatalf("assigned %v over %+v; want the four tasks on one policy", a.Assignments, a.Policies)
	}
	id := a.Policies[itoa(a.Assignments[0])].ID
	var sel api.SelectResponse
	want(t, ts.do(t, "POST", "/select", `{"router":"simple","prefix_hashes":`+h+`}`), http.StatusOK, &sel)
	if sel.ID != id || sel.PrefixOutcome != routing.PrefixHit {
		t.Errorf("select %+v; want %s, a hit", sel, id)
	}
}

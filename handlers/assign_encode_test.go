package handlers

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

// The hand-written /assign answer decodes to the document encoding/json
// writes for the same assignment: each task's index, each registered
// policy among them named once with its reference, unregistered indices
// (stateless /assign routes to them) left out, sticky outcomes in order.
// Pooled buffers of earlier, larger answers must not leak into later ones.
func TestAssignAnswerMatchesEncodingJSON(t *testing.T) {
	for _, spread := range []int{1, 100} { // compact indices, then sparse ones
		ts := newTestServer(t, Config{})
		var req api.ReplacePoliciesRequest
		for i := range 12 {
			idx := i * spread
			req.Policies = append(req.Policies, api.PolicyRequest{URL: "http://127.0.0.1:9/p" + strconv.Itoa(idx), Index: &idx, NodeID: "n" + strconv.Itoa(i%3)})
		}
		body, _ := json.Marshal(req)
		want(t, ts.do(t, "PUT", "/policies", string(body)), 200, nil)
		snap := ts.State.Snapshot()
		rng := rand.New(rand.NewPCG(uint64(spread), 9))
		outcomes := []routing.Sticky{routing.NotSticky, "home", "moved", `q"uote`}
		for round := range 300 {
			n := []int{0, 1, 3, 9, 50, 700}[round%6]
			a := routing.Assignment{Snapshot: snap, Indices: make([]int, n)}
			for k := range a.Indices {
				a.Indices[k] = rng.IntN(14 * spread) // some registered, most not when sparse
			}
			if rng.IntN(2) == 0 {
				a.Sticky = make([]routing.Sticky, n)
				for k := range a.Sticky {
					a.Sticky[k] = outcomes[rng.IntN(len(outcomes))]
				}
			}
			unmapped := rng.IntN(3) == 0
			exp := api.AssignResponse{Assignments: a.Indices, Policies: map[string]api.PolicyRef{}, EnvUnmapped: unmapped}
			for _, idx := range a.Indices {
				if pos, ok := snap.ByIndex(idx); ok {
					p := snap.Policies()[pos]
					exp.Policies[strconv.Itoa(idx)] = api.PolicyRef{ID: p.ID, URL: p.URL, NodeID: snap.Node(pos)}
				}
			}
			if a.Sticky != nil {
				for _, o := range a.Sticky {
					if o == routing.NotSticky {
						exp.Sticky = append(exp.Sticky, nil)
					} else {
						s := string(o)
						exp.Sticky = append(exp.Sticky, &s)
					}
				}
			}
			rec := httptest.NewRecorder()
			ts.writeAssignment(rec, a, unmapped)
			var got, wantDoc any
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("spread %d round %d: %v in %s", spread, round, err, rec.Body)
			}
			wb, _ := json.Marshal(exp)
			_ = json.Unmarshal(wb, &wantDoc)
			gb, _ := json.Marshal(got)
			wb, _ = json.Marshal(wantDoc)
			if !bytes.Equal(gb, wb) {
				t.Fatalf("spread %d round %d:\ngot  %s\nwant %s", spread, round, gb, wb)
			}
			for key := range exp.Policies {
				if c := bytes.Count(rec.Body.Bytes(), []byte(`"`+key+`":{`)); c != 1 {
					t.Fatalf("spread %d round %d: policy %s named %d times in %s", spread, round, key, c, rec.Body)
				}
			}
		}
	}
}

package handlers

import (
	"encoding/json"
	"math/rand/v2"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/api"
)

// TestAnswersMatchEncodingJSON holds the hand-written /select and /release
// answers to what encoding/json writes for the same values.
func TestAnswersMatchEncodingJSON(t *testing.T) {
	strs := []string{
		"", "p-0", "http://127.0.0.1:9100/p/0", "node-a", "00000000-0000-4000-8000-000000000001",
		"home", `quo"te`, `back\\slash`, "tab\there", "nl\n", "<a&b>", "é", "\u2028", "\x7f", "\xff", "\x00", "a\x1fb",
	}
	rng := rand.New(rand.NewPCG(3, 4))
	str := func() string { return strs[rng.IntN(len(strs))] }
	ints := []int{0, 1, -1, 1048575, 1 << 62}
	for range 5000 {
		sel := api.SelectResponse{
			Index: ints[rng.IntN(len(ints))], ID: str(), URL: str(), NodeID: str(),
			LeaseID: str(), Version: int64(ints[rng.IntN(len(ints))]), Sticky: str(),
		}
		got, want := httptest.NewRecorder(), httptest.NewRecorder()
		writeSelected(got, &sel)
		writeJSON(want, 200, sel)
		if got.Body.String() != want.Body.String() || got.Code != want.Code || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
			t.Fatalf("select %+v:\ngot  %q\nwant %q", sel, got.Body, want.Body)
		}
		rel := api.ReleaseResponse{Released: rng.IntN(2) == 0, LeaseID: str(), ID: str(), Reason: str()}
		if rng.IntN(2) == 0 {
			rel.Index = &ints[rng.IntN(len(ints))]
		}
		got, want = httptest.NewRecorder(), httptest.NewRecorder()
		writeReleased(got, &rel)
		writeJSON(want, 200, rel)
		if got.Body.String() != want.Body.String() || got.Code != want.Code || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
			t.Fatalf("release %+v:\ngot  %q\nwant %q", rel, got.Body, want.Body)
		}
	}
}

// An /assign answer names each assigned policy once, whether it finds the
// policies already named by looking back (a few tasks) or by marks.
func TestAssignAnswerNamesEachPolicyOnce(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 3)
	for _, n := range []int{1, 5, 8, 9, 20} {
		rec := ts.do(t, "POST", "/assign", `{"num_tasks":`+strconv.Itoa(n)+`,"current_loads":[0,0,0]}`)
		if rec.Code != 200 {
			t.Fatalf("n=%d: %d %s", n, rec.Code, rec.Body)
		}
		var resp api.AssignResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatalf("n=%d: %v in %s", n, err, rec.Body)
		}
		distinct := map[int]bool{}
		for _, idx := range resp.Assignments {
			distinct[idx] = true
		}
		if len(resp.Assignments) != n || len(resp.Policies) != len(distinct) {
			t.Fatalf("n=%d: %d assignments naming %d policies, answer names %d: %s", n, len(resp.Assignments), len(distinct), len(resp.Policies), rec.Body)
		}
		// Unmarshal keeps the last of repeated keys; count them in the bytes.
		for idx := range distinct {
			if got := strings.Count(rec.Body.String(), `"`+strconv.Itoa(idx)+`":{`); got != 1 {
				t.Errorf("n=%d: policy %d named %d times in %s", n, idx, got, rec.Body)
			}
		}
	}
}

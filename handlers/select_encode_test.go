package handlers

import (
	"math/rand/v2"
	"net/http/httptest"
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
		rel := api.ReleaseResponse{Released: rng.IntN(2) == 0, LeaseID: str(), ID: str()}
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

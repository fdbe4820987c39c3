package handlers

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/poller"
)

// recentPoller reports fixed figures, lifetime and recent.
type recentPoller struct {
	stats  poller.Stats
	recent map[string]poller.ProbeCounts
}

func (p recentPoller) Stats() poller.Stats                       { return p.stats }
func (p recentPoller) RecentProbes(id string) poller.ProbeCounts { return p.recent[id] }

// /stats shows the poller's probes over its recent window beside the
// counts since start, overall and per policy, in the document's schema.
func TestStatsRecentProbes(t *testing.T) {
	pl := recentPoller{
		stats:  poller.Stats{ProbesTotal: 900, FailuresTotal: 40, Recent: poller.ProbeCounts{Probes: 30, Failures: 7}},
		recent: map[string]poller.ProbeCounts{},
	}
	ts := newTestServer(t, Config{Poller: pl})
	ps := ts.register(t, 2)
	pl.recent[ps[1].ID] = poller.ProbeCounts{Probes: 15, Failures: 7}
	rec := ts.do(t, "GET", "/stats", "")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /stats: %d %s", rec.Code, rec.Body)
	}
	var s api.Stats
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	got := *s.Poller
	if got.ProbesTotal != 900 || got.FailuresTotal != 40 || got.ProbesRecent != 30 || got.FailuresRecent != 7 || got.WindowSeconds != poller.Window.Seconds() {
		t.Errorf("poller %+v; want 900 (40 failed) since start, 30 (7 failed) over %v", got, poller.Window)
	}
	byID := map[string]api.PolicyStats{}
	for _, p := range s.Policies {
		byID[p.ID] = p
	}
	if len(byID) != 2 {
		t.Fatalf("policies %+v; want 2", s.Policies)
	}
	for id, want := range map[string]poller.ProbeCounts{ps[0].ID: {}, ps[1].ID: {Probes: 15, Failures: 7}} {
		if p := byID[id]; p.ProbesRecent != want.Probes || p.ProbeFailuresRecent != want.Failures {
			t.Errorf("policy %s: recent %d (%d failed); want %d (%d failed)", id, p.ProbesRecent, p.ProbeFailuresRecent, want.Probes, want.Failures)
		}
	}
}

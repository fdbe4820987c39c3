package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/api"
)

// status counts and shows paused, asleep and update_failed policies with
// their reason; a paused or asleep engine needs no person (exit 0), an
// update_failed policy does (exit 1), even from a router whose totals do
// not count it.
func TestStatusStatesAndReasons(t *testing.T) {
	failed := api.PolicyStats{Policy: api.Policy{Index: 0, Engine: "sglang", State: api.StateUpdateFailed}, UpdateError: "step load: status 500: CUDA out of memory"}
	paused := api.PolicyStats{Policy: api.Policy{Index: 1, Engine: "vllm", State: "paused"}}
	asleep := api.PolicyStats{Policy: api.Policy{Index: 2, Engine: "vllm", State: "asleep"}}
	idle := api.PolicyStats{Policy: api.Policy{Index: 3, Engine: "sglang", State: "idle"}}
	for _, c := range []struct {
		name  string
		stats api.Stats
		lines []string
		want  error // nil: exit 0
	}{
		{"paused and asleep", api.Stats{Policies: []api.PolicyStats{paused, asleep, idle},
			Totals: api.StateCounts{Policies: 3, Idle: 1, Paused: 1, Asleep: 1}},
			[]string{"1 paused, 1 asleep;", "engine paused", "engine asleep", "vllm"}, nil},
		{"update failed", api.Stats{Policies: []api.PolicyStats{failed, paused, asleep, idle},
			Totals: api.StateCounts{Policies: 4, Idle: 1, UpdateFailed: 1, Paused: 1, Asleep: 1}},
			[]string{"1 update_failed, 1 paused, 1 asleep;", "update failed: step load: status 500: CUDA out of memory"}, errUpdateFailed},
		{"update failed, not in the totals", api.Stats{Policies: []api.PolicyStats{failed, idle},
			Totals: api.StateCounts{Policies: 2, Idle: 1}},
			[]string{"1 update_failed;", "CUDA out of memory"}, errUpdateFailed},
		{"unhealthy, not in the totals", api.Stats{Policies: []api.PolicyStats{{Policy: api.Policy{Index: 0, State: "unhealthy", LastError: "status 404"}}},
			Totals: api.StateCounts{Policies: 1}},
			[]string{"status 404"}, errUnhealthy},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			if err := printStatus(&out, c.stats); err != nil {
				t.Fatal(err)
			}
			for _, l := range c.lines {
				if !strings.Contains(out.String(), l) {
					t.Errorf("status prints:\n%s\nwant %q in it", out.String(), l)
				}
			}
			err := statusVerdict(c.stats)
			switch {
			case c.want == nil && err != nil:
				t.Errorf("verdict %v; want nil (exit 0): paused and asleep are not failures", err)
			case c.want != nil && (!errors.Is(err, c.want) || !errors.Is(err, errAttention)):
				t.Errorf("verdict %v; want %v (exit 1)", err, c.want)
			}
		})
	}
}

// The status command itself, against a router whose /stats shows a
// policy failed by an update: it prints the policy with its error and
// returns errAttention, on which main exits 1; once the policy is back,
// nil (exit 0).
func TestStatusCommandFailedPolicy(t *testing.T) {
	failed := api.PolicyStats{Policy: api.Policy{Index: 0, ID: "p0", Engine: "sglang", State: api.StateUpdateFailed},
		UpdateError: "step load: status 500: CUDA out of memory"}
	doc := api.Stats{Policies: []api.PolicyStats{failed}, Totals: api.StateCounts{Policies: 1, UpdateFailed: 1}}
	router := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stats" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	}))
	defer router.Close()

	var out strings.Builder
	err := statusCommand(context.Background(), &out, []string{"--url", router.URL})
	if !errors.Is(err, errAttention) || !errors.Is(err, errUpdateFailed) {
		t.Errorf("status with a failed policy: %v; want %v, which exits 1", err, errUpdateFailed)
	}
	for _, want := range []string{"1 update_failed", "CUDA out of memory"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status prints:\n%s\nwant %q in it", out.String(), want)
		}
	}

	doc.Policies[0].State, doc.Policies[0].UpdateError, doc.Totals = "idle", "", api.StateCounts{Policies: 1, Idle: 1}
	out.Reset()
	if err := statusCommand(context.Background(), &out, []string{"--url", router.URL}); err != nil {
		t.Errorf("status with the policy back: %v; want nil (exit 0)\n%s", err, out.String())
	}
}

package handlers

import (
	"bytes"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/metrics"
	"github.com/policyrouter/policyrouter/routing"
)

// TestEnvUnmapped: env ids that map to no node are counted in /stats and
// policyrouter_env_unmapped_total, and each is logged once.
func TestEnvUnmapped(t *testing.T) {
	var buf bytes.Buffer
	st := routing.New(routing.Options{})
	ts := newTestServer(t, Config{State: st, Metrics: metrics.New(st)})
	ts.logger = slog.New(slog.NewJSONHandler(&buf, nil))
	ts.register(t, 2, "node-a", "node-b")
	want(t, ts.do(t, "PUT", "/topology", `{"node-a": {"env": {"ids": [0]}, "eval": {"ids": [0]}}, "node-b": {"env": {"ids": [1]}, "eval": {"ids": [1]}}}`), http.StatusOK, nil)

	for _, c := range []struct {
		path, body string
		unmapped   bool // named in the answer
	}{
		{"/select", `{"env_id": "env-0", "router": "idle_affinity", "timeout_ms": 0}`, false},    // mapped
		{"/select", `{"env_id": "worker-99", "router": "idle_affinity", "timeout_ms": 0}`, true}, // no such worker
		{"/select", `{"env_id": "envA", "router": "idle_affinity", "timeout_ms": 0}`, true},      // no index
		{"/select", `{"env_id": "envA", "router": "simple", "timeout_ms": 0}`, true},             // not node-affine: named, not counted
		{"/select", `{"router": "idle_affinity", "timeout_ms": 0}`, false},                       // no env id
		{"/assign", `{"num_tasks": 3, "env_ids": ["env-1", "envA", "worker-7"], "router": "node_affinity"}`, true},
		{"/assign", `{"num_tasks": 2, "env_ids": ["env-1", "env-0"], "router": "node_affinity"}`, false},
	} {
		rec := ts.do(t, "POST", c.path, c.body)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", c.path, c.body, rec.Code, rec.Body)
		}
		if c.path == "/select" {
			var sel api.SelectResponse
			want(t, rec, http.StatusOK, &sel)
			if sel.EnvUnmapped != c.unmapped {
				t.Errorf("%s %s: env_unmapped %v, want %v", c.path, c.body, sel.EnvUnmapped, c.unmapped)
			}
			ts.do(t, "POST", "/release", `{"lease_id": "`+sel.LeaseID+`"}`)
		} else {
			var a api.AssignResponse
			want(t, rec, http.StatusOK, &a)
			if a.EnvUnmapped != c.unmapped {
				t.Errorf("%s %s: env_unmapped %v, want %v", c.path, c.body, a.EnvUnmapped, c.unmapped)
			}
		}
	}
	var stats api.Stats
	want(t, ts.do(t, "GET", "/stats", ""), http.StatusOK, &stats)
	got := stats.EnvUnmapped
	if got.Total != 4 || got.Distinct != 3 || strings.Join(got.IDs, ",") != "worker-99,envA,worker-7" {
		t.Errorf("/stats env_unmapped = %+v, want 4 in total, 3 distinct: worker-99, envA, worker-7", got)
	}
	if rec := ts.do(t, "GET", "/metrics", ""); !strings.Contains(rec.Body.String(), "\npolicyrouter_env_unmapped_total 4\n") {
		t.Errorf("/metrics lacks policyrouter_env_unmapped_total 4")
	}
	if n := strings.Count(buf.String(), "maps to no node"); n != 3 {
		t.Errorf("%d log lines for 3 distinct env ids:\n%s", n, buf.String())
	}
}

// The remembered ids are capped: past maxUnmappedEnvs only the count
// grows, and the cap is logged once.
func TestEnvUnmappedBounded(t *testing.T) {
	var buf bytes.Buffer
	ts := newTestServer(t, Config{})
	ts.logger = slog.New(slog.NewJSONHandler(&buf, nil))
	for i := range maxUnmappedEnvs + 100 {
		ts.unmappedEnv(t.Context(), "env-x"+strconv.Itoa(i))
	}
	got := ts.unmapped.stats()
	if got.Total != maxUnmappedEnvs+100 || got.Distinct != maxUnmappedEnvs || len(got.IDs) != shownUnmappedEnvs {
		t.Errorf("stats %d total, %d distinct, %d ids", got.Total, got.Distinct, len(got.IDs))
	}
	if n := strings.Count(buf.String(), "\n"); n != maxUnmappedEnvs+1 {
		t.Errorf("%d log lines, want %d (one per remembered id, and one for the cap)", n, maxUnmappedEnvs+1)
	}
}

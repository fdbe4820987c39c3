package metrics

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/policyrouter/policyrouter/routing"
)

// scrape serves /metrics once and parses it with the Prometheus text
// parser.
func scrape(tb testing.TB, m *Metrics) map[string]*dto.MetricFamily {
	tb.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		tb.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		tb.Fatalf("parse /metrics: %v", err)
	}
	return families
}

// value returns the value of the family's sample whose labels include
// want, or fails.
func value(tb testing.TB, families map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	tb.Helper()
	f, ok := families[name]
	if !ok {
		tb.Fatalf("family %s missing", name)
	}
	for _, m := range f.GetMetric() {
		match := true
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	tb.Fatalf("%s has no sample with labels %v", name, want)
	return 0
}

func TestMetricsFamilies(t *testing.T) {
	st := routing.New(routing.Options{FailThreshold: 1})
	topo := routing.Topology{
		"a": {routing.KindEnv: {0}, routing.KindEval: {0}},
		"b": {routing.KindEnv: {1}, routing.KindEval: {1, 2}},
	}
	if err := st.Update([]routing.Policy{{Index: 0, ID: "p0"}, {Index: 1, ID: "p1"}, {Index: 2, ID: "p2"}}, topo); err != nil {
		t.Fatal(err)
	}
	m := New(st)
	// Every policy idle and unloaded: a session's task goes to its home.
	if _, err := st.Assign(routing.AssignRequest{NumTasks: 1, Sessions: []string{"traj-1"}, Loads: []int64{0, 0, 0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Select(t.Context(), routing.SelectRequest{Router: routing.SelectIdle, EnvID: ""}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetDraining("p1", true); err != nil {
		t.Fatal(err)
	}
	probe := routing.Probe{SentAt: time.Now(), Latency: 2 * time.Millisecond, OK: false}
	m.ObserveProbe(probe, st.ObserveProbe("p2", probe))
	m.ObserveProbe(routing.Probe{OK: true, Idle: true, Latency: time.Millisecond}, routing.NoTransition)
	m.ObserveRequest("/select", "POST", 200, 3*time.Millisecond)
	m.ObserveRequest("/assign", "POST", 422, time.Millisecond)
	m.ObserveDecision("select", "simple", 5*time.Microsecond)
	m.ObserveAffinity("assign", "node_affinity", 3, 1)
	m.SetLeader(true)

	fams := scrape(t, m)
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"policyrouter_http_requests_total", map[string]string{"route": "/select", "method": "POST", "code": "200"}, 1},
		{"policyrouter_http_requests_total", map[string]string{"route": "/assign", "code": "422"}, 1},
		{"policyrouter_http_request_duration_seconds", map[string]string{"route": "/select"}, 1},
		{"policyrouter_decision_duration_seconds", map[string]string{"endpoint": "select", "router": "simple"}, 1},
		{"policyrouter_affinity_decisions_total", map[string]string{"router": "node_affinity", "outcome": "hit"}, 3},
		{"policyrouter_affinity_decisions_total", map[string]string{"router": "node_affinity", "outcome": "fallback"}, 1},
		{"policyrouter_poll_probes_total", map[string]string{"result": "ok"}, 1},
		{"policyrouter_poll_probes_total", map[string]string{"result": "failed"}, 1},
		{"policyrouter_poll_probe_duration_seconds", nil, 2},
		{"policyrouter_health_transitions_total", map[string]string{"to": "unhealthy"}, 1},
		{"policyrouter_policies", map[string]string{"node": "a", "state": "busy"}, 1},
		{"policyrouter_policies", map[string]string{"node": "a", "state": "idle"}, 0},
		{"policyrouter_policies", map[string]string{"node": "b", "state": "draining"}, 1},
		{"policyrouter_sticky_total", map[string]string{"outcome": "hit"}, 1},
		{"policyrouter_sticky_total", map[string]string{"outcome": "spill"}, 0},
		{"policyrouter_sticky_total", map[string]string{"outcome": "miss"}, 0},
		{"policyrouter_policies", map[string]string{"node": "b", "state": "unhealthy"}, 1},
		{"policyrouter_select_waiters", nil, 0},
		{"policyrouter_leases", nil, 1},
		{"policyrouter_leases_ended_total", map[string]string{"how": "release"}, 0},
		{"policyrouter_leases_ended_total", map[string]string{"how": "probe"}, 0},
		{"policyrouter_node_occupancy", map[string]string{"node": "a"}, 1},
		{"policyrouter_node_load", map[string]string{"node": "a"}, 0},
		{"policyrouter_leader", nil, 1},
	}
	for _, tt := range tests {
		if got := value(t, fams, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("runtime family %s missing", name)
		}
	}
}

// The series resolved once in New and those made on first use count the
// same way: each observation lands in the series its labels name.
func TestObserveCachedSeries(t *testing.T) {
	m := New(routing.New(routing.Options{}))
	for range 3 {
		m.ObserveRequest("/select", "POST", 200, time.Millisecond)
		m.ObserveDecision("select", "idle_affinity", time.Microsecond)
		m.ObserveAffinity("select", "idle_affinity", 1, 0)
	}
	m.ObserveRequest("/select", "POST", 503, time.Millisecond)
	m.ObserveDecision("select", "not_in_the_table", time.Microsecond)
	m.ObserveAffinity("assign", "idle_affinity", 4, 2)
	m.ObserveAffinity("assign", "not_in_the_table", 0, 5)
	for range 2 {
		m.ObserveProxy(3, 200, time.Millisecond, time.Millisecond)
	}
	m.ObserveProxy(3, 502, 0, time.Millisecond)
	m.ObserveProxy(130, 200, time.Millisecond, time.Millisecond)
	fams := scrape(t, m)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"policyrouter_http_requests_total", map[string]string{"route": "/select", "code": "200"}, 3},
		{"policyrouter_http_requests_total", map[string]string{"route": "/select", "code": "503"}, 1},
		{"policyrouter_http_request_duration_seconds", map[string]string{"route": "/select", "method": "POST"}, 4},
		{"policyrouter_decision_duration_seconds", map[string]string{"endpoint": "select", "router": "idle_affinity"}, 3},
		{"policyrouter_decision_duration_seconds", map[string]string{"endpoint": "select", "router": "not_in_the_table"}, 1},
		{"policyrouter_affinity_decisions_total", map[string]string{"endpoint": "select", "router": "idle_affinity", "outcome": "hit"}, 3},
		{"policyrouter_affinity_decisions_total", map[string]string{"endpoint": "select", "router": "idle_affinity", "outcome": "fallback"}, 0},
		{"policyrouter_affinity_decisions_total", map[string]string{"endpoint": "assign", "router": "idle_affinity", "outcome": "hit"}, 4},
		{"policyrouter_affinity_decisions_total", map[string]string{"endpoint": "assign", "router": "idle_affinity", "outcome": "fallback"}, 2},
		{"policyrouter_affinity_decisions_total", map[string]string{"endpoint": "assign", "router": "not_in_the_table", "outcome": "fallback"}, 5},
		{"policyrouter_proxy_requests_total", map[string]string{"policy": "3", "code": "200"}, 2},
		{"policyrouter_proxy_requests_total", map[string]string{"policy": "3", "code": "502"}, 1},
		{"policyrouter_proxy_requests_total", map[string]string{"policy": "130", "code": "200"}, 1},
	} {
		if got := value(t, fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// A follower exports no policy-state series (its policies all read
// unknown: it does not poll), only that it does not lead; it exports them
// again when it leads.
func TestFollowerExportsNoPolicyStates(t *testing.T) {
	st := routing.New(routing.Options{Polled: true})
	if err := st.Update([]routing.Policy{{Index: 0, ID: "p0", URL: "http://127.0.0.1:9/p0"}}, routing.Topology{}); err != nil {
		t.Fatal(err)
	}
	m := New(st)
	m.SetLeader(false)
	families := scrape(t, m)
	for _, name := range []string{"policyrouter_policies", "policyrouter_leases", "policyrouter_node_capacity"} {
		if _, ok := families[name]; ok {
			t.Errorf("a follower exports %s", name)
		}
	}
	if got := value(t, families, "policyrouter_leader", nil); got != 0 {
		t.Errorf("policyrouter_leader = %v on a follower; want 0", got)
	}
	m.SetLeader(true)
	if got := value(t, scrape(t, m), "policyrouter_policies", map[string]string{"state": "unknown"}); got != 1 {
		t.Errorf("leading: policies unknown = %v; want 1", got)
	}
}

// Tokens by kind, completion tokens by version lag (3 and more together),
// and resumes by outcome.
func TestTokensAndResumes(t *testing.T) {
	m := New(routing.New(routing.Options{}))
	m.ObserveTokens(100, 10, 0)
	m.ObserveTokens(50, 5, 1)
	m.ObserveTokens(0, 7, 5)
	m.ObserveResume(ResumeResumed)
	m.ObserveResume(ResumeIncomplete)
	m.ObserveResume(ResumeIncomplete)
	f := scrape(t, m)
	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"policyrouter_proxy_tokens_total", map[string]string{"kind": "prompt"}, 150},
		{"policyrouter_proxy_tokens_total", map[string]string{"kind": "completion"}, 22},
		{"policyrouter_proxy_completion_tokens_by_lag_total", map[string]string{"lag": "0"}, 10},
		{"policyrouter_proxy_completion_tokens_by_lag_total", map[string]string{"lag": "1"}, 5},
		{"policyrouter_proxy_completion_tokens_by_lag_total", map[string]string{"lag": "2"}, 0},
		{"policyrouter_proxy_completion_tokens_by_lag_total", map[string]string{"lag": "3+"}, 7},
		{"policyrouter_resumes_total", map[string]string{"outcome": "resumed"}, 1},
		{"policyrouter_resumes_total", map[string]string{"outcome": "incomplete"}, 2},
	} {
		if got := value(t, f, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v; want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}

package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v4"
)

// promqlWords are the PromQL keywords and aggregation modifiers an
// expression may hold besides metric names, functions and labels.
var promqlWords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}

var (
	promqlLabels   = regexp.MustCompile(`\{[^}]*\}`) // label matchers
	promqlGrouping = regexp.MustCompile(`\b(by|without|on|ignoring)\s*\([^)]*\)`)
	promqlRange    = regexp.MustCompile(`\[[^\]]*\]`) // range selectors
	promqlIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?`)
)

// metricNames returns the metric names an expression selects: identifiers
// that are not functions (followed by "("), keywords, label matchers,
// grouping labels or range durations.
func metricNames(expr string) []string {
	expr = promqlLabels.ReplaceAllString(expr, " ")
	expr = promqlGrouping.ReplaceAllString(expr, " ")
	expr = promqlRange.ReplaceAllString(expr, " ")
	var names []string
	for _, m := range promqlIdent.FindAllString(expr, -1) {
		if strings.HasSuffix(m, "(") || slices.Contains(promqlWords, strings.TrimSpace(m)) {
			continue
		}
		names = append(names, strings.TrimSpace(m))
	}
	return names
}

func TestPromQLMetricNames(t *testing.T) {
	got := metricNames(`histogram_quantile(0.99, sum by (le) (rate(policyrouter_decision_duration_seconds_bucket{endpoint="select"}[1m]))) / on (node) policyrouter_node_capacity`)
	if want := []string{"policyrouter_decision_duration_seconds_bucket", "policyrouter_node_capacity"}; !slices.Equal(got, want) {
		t.Errorf("metricNames = %v; want %v", got, want)
	}
}

// TestGrafanaBoard checks the compose stack's Grafana: bound to loopback
// (see TestComposeServicesAndPorts), provisioned with the compose
// Prometheus and the board, and every PromQL expression of the board naming
// metric families that the router's /metrics exports.
func TestGrafanaBoard(t *testing.T) {
	p := loadCompose(t)
	g, ok := p.Services["grafana"]
	if !ok {
		t.Fatal("no grafana service")
	}
	root := mustAbs(t, composeRoot)
	mounts := map[string]string{}
	for _, v := range g.Volumes {
		mounts[v.Target] = v.Source
	}
	if got, want := mounts["/etc/grafana/provisioning"], filepath.Join(root, "deploy", "grafana", "provisioning"); got != want {
		t.Errorf("grafana mounts %q at /etc/grafana/provisioning; want %s", got, want)
	}
	if got, want := mounts["/etc/grafana/dashboards"], filepath.Join(root, "deploy", "grafana", "dashboards"); got != want {
		t.Errorf("grafana mounts %q at /etc/grafana/dashboards; want %s", got, want)
	}

	var ds struct {
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(root, "deploy", "grafana", "provisioning", "datasources", "prometheus.yml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Fatalf("datasources %+v; want the compose prometheus service", ds.Datasources)
	}
	var prov struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(root, "deploy", "grafana", "provisioning", "dashboards", "policyrouter.yml"), &prov)
	if len(prov.Providers) != 1 || prov.Providers[0].Options.Path != "/etc/grafana/dashboards" {
		t.Errorf("dashboard providers %+v; want one reading /etc/grafana/dashboards", prov.Providers)
	}

	data, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "dashboards", "policyrouter.json"))
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		Panels []struct {
			Title      string `json:"title"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &board); err != nil {
		t.Fatalf("policyrouter.json: %v", err)
	}
	// A router with a policy on a node, after one request of each kind:
	// what any running stack has. Series that need events (an /assign, a failed probe) are
	// exported at zero from the start.
	base := serveInProcess(t)
	if code, body := post(t, base+"/policies", "", `{"url": "http://127.0.0.1:9/p0", "index": 0, "node_id": "node-a"}`); code != http.StatusCreated {
		t.Fatalf("register: %d %s", code, body)
	}
	// One proxied request: proxy mode's series.
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"idle": true}`))
	}))
	defer backend.Close()
	if code, body := post(t, base+"/policies", "", `{"url": "`+backend.URL+`", "index": 1, "node_id": "node-a"}`); code != http.StatusCreated {
		t.Fatalf("register: %d %s", code, body)
	}
	if code, body := post(t, base+"/generate", "", `{"text": "hi"}`); code != http.StatusOK {
		t.Fatalf("proxied request: %d %s", code, body)
	}
	exported := exportedFamilies(t, base)
	exprs := 0
	for _, panel := range board.Panels {
		if panel.Datasource.UID != ds.Datasources[0].UID {
			t.Errorf("panel %q uses data source %q; want %q", panel.Title, panel.Datasource.UID, ds.Datasources[0].UID)
		}
		for _, target := range panel.Targets {
			exprs++
			names := metricNames(target.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: %q names no metric", panel.Title, target.Expr)
			}
			for _, name := range names {
				if !exported[name] {
					t.Errorf("panel %q: %q uses %s, which /metrics does not export", panel.Title, target.Expr, name)
				}
			}
		}
	}
	if exprs < 8 {
		t.Errorf("the board has %d expressions; it should show decisions, waits, utilisation, waiters, states, probes, affinity and requests", exprs)
	}
}

// exportedFamilies returns every series name the router at base exports:
// each family's name, and for histograms and summaries their _bucket,
// _sum and _count series.
func exportedFamilies(tb testing.TB, base string) map[string]bool {
	tb.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]bool{}
	for name, f := range fams {
		out[name] = true
		switch f.GetType().String() {
		case "HISTOGRAM", "SUMMARY":
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		}
	}
	return out
}

func readYAML(tb testing.TB, path string, v any) {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
}

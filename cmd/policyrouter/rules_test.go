package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/policyrouter/policyrouter/internal/prereq"
)

// TestAlertRules checks deploy/prometheus/rules.yml: promtool accepts it
// and passes its unit tests (rules_test.yml: a firing and a silent case
// per rule), every metric it uses is one the router exports, and the
// compose Prometheus loads it.
func TestAlertRules(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "prometheus")
	data, err := os.ReadFile(filepath.Join(dir, "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatalf("rules.yml: %v", err)
	}
	base := serveInProcess(t)
	if code, body := post(t, base+"/policies", "", `{"url": "http://127.0.0.1:9/p0", "index": 0, "node_id": "node-a"}`); code != http.StatusCreated {
		t.Fatalf("register: %d %s", code, body)
	}
	exported := exportedFamilies(t, base)
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			for _, name := range metricNames(r.Expr) {
				if !exported[name] {
					t.Errorf("rule %s: %q uses %s, which /metrics does not export", r.Alert, r.Expr, name)
				}
			}
		}
	}
	for _, want := range []string{"PolicyrouterPolicyUnhealthy", "PolicyrouterUpdateFailed", "PolicyrouterUpdatePhaseStuck",
		"PolicyrouterLeaseStuck", "PolicyrouterWaitersHigh", "PolicyrouterNoLeader"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no rule %s", want)
		}
	}

	prom, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		RuleFiles []string `yaml:"rule_files"`
	}
	if err := yaml.Unmarshal(prom, &cfg); err != nil || !slices.Contains(cfg.RuleFiles, "/etc/prometheus/rules.yml") {
		t.Errorf("deploy/prometheus.yml rule_files = %v (%v); want /etc/prometheus/rules.yml", cfg.RuleFiles, err)
	}
	p := loadCompose(t)
	mounted := false
	for _, v := range p.Services["prometheus"].Volumes {
		mounted = mounted || (v.Target == "/etc/prometheus/rules.yml" && v.Source == filepath.Join(mustAbs(t, composeRoot), "deploy", "prometheus", "rules.yml"))
	}
	if !mounted {
		t.Error("the compose prometheus does not mount deploy/prometheus/rules.yml at /etc/prometheus/rules.yml")
	}

	promtool := prereq.LookPath(t, "promtool", "Debian's prometheus package; .ci/run installs it")
	for _, args := range [][]string{{"check", "rules", "rules.yml"}, {"test", "rules", "rules_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

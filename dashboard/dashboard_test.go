package dashboard_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/dashboard"
)

func get(tb testing.TB, h http.Handler, method, path string, hdr map[string]string) (*http.Response, string) {
	tb.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return res, string(body)
}

func TestServesAssets(t *testing.T) {
	h := dashboard.Handler()
	tests := []struct {
		path        string
		contentType string
		contains    []string
	}{
		{"/", "text/html; charset=utf-8", []string{`<script src="dashboard.js"`, `href="dashboard.css"`, `id="nodes"`, `id="f-sticky"`, `id="rollout"`, "scope <code>read</code>",
			`id="floor-banner"`, `id="f-floor"`}},
		{"/dashboard.js", "text/javascript; charset=utf-8", []string{`"/stats"`, "fetch(STATS_URL", "Authorization", "sessionStorage", "401", "hit_rate", `"/updates/"`, "encodeURIComponent(sum.id)",
			`$("floor-banner")`, "floorAlarm(s)"}},
		{"/dashboard.css", "text/css; charset=utf-8", []string{".tile", ".s-unhealthy", ".p-updating", ".ro-wave.current", ".floor-banner"}},
		{"/ui/", "text/html; charset=utf-8", []string{"<title>policyrouter</title>"}}, // mounted under a prefix
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			res, body := get(t, h, http.MethodGet, tt.path, nil)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200", res.StatusCode)
			}
			if got := res.Header.Get("Content-Type"); got != tt.contentType {
				t.Errorf("Content-Type = %q, want %q", got, tt.contentType)
			}
			if got := res.Header.Get("Content-Security-Policy"); got != dashboard.ContentSecurityPolicy {
				t.Errorf("Content-Security-Policy = %q, want %q", got, dashboard.ContentSecurityPolicy)
			}
			if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options = %q, want nosniff", got)
			}
			for _, s := range tt.contains {
				if !strings.Contains(body, s) {
					t.Errorf("body lacks %q", s)
				}
			}
		})
	}
}

// TestPolicyIsStrict checks the CSP forbids what the page must never need:
// inline or remote script, remote styles and fetches, framing.
func TestPolicyIsStrict(t *testing.T) {
	directives := map[string]string{}
	for _, d := range strings.Split(dashboard.ContentSecurityPolicy, ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		directives[name] = value
	}
	want := map[string]string{
		"default-src":     "'self'",
		"script-src":      "'self'",
		"style-src":       "'self'",
		"connect-src":     "'self'",
		"object-src":      "'none'",
		"base-uri":        "'none'",
		"frame-ancestors": "'none'",
	}
	for name, value := range want {
		if got := directives[name]; got != value {
			t.Errorf("%s = %q, want %q", name, got, value)
		}
	}
	for name, value := range directives {
		if strings.Contains(value, "unsafe") || strings.Contains(value, "*") || strings.Contains(value, "http") {
			t.Errorf("%s allows %q", name, value)
		}
	}
}

// TestNoInlineCode checks the page holds no inline script, style or event
// handler, which the CSP would block, and loads nothing from elsewhere.
func TestNoInlineCode(t *testing.T) {
	_, page := get(t, dashboard.Handler(), http.MethodGet, "/", nil)
	lower := strings.ToLower(page)
	for _, bad := range []string{"<script>", "<style", " style=", " onclick=", " onload=", " onsubmit=", "http://", "https://", "javascript:"} {
		if strings.Contains(lower, bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	if n := strings.Count(lower, "<script"); n != 2 {
		t.Errorf("page has %d script elements, want 2 (charts.js, dashboard.js)", n)
	}
}

func TestConditionalAndErrors(t *testing.T) {
	h := dashboard.Handler()
	res, _ := get(t, h, http.MethodGet, "/dashboard.js", nil)
	etag := res.Header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	tests := []struct {
		name   string
		method string
		path   string
		hdr    map[string]string
		status int
	}{
		{"revalidate", http.MethodGet, "/dashboard.js", map[string]string{"If-None-Match": etag}, http.StatusNotModified},
		{"stale etag", http.MethodGet, "/dashboard.js", map[string]string{"If-None-Match": `"other"`}, http.StatusOK},
		{"head", http.MethodHead, "/", nil, http.StatusOK},
		{"post", http.MethodPost, "/", nil, http.StatusMethodNotAllowed},
		{"unknown file", http.MethodGet, "/secret.txt", nil, http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, _ := get(t, h, tt.method, tt.path, tt.hdr)
			if res.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", res.StatusCode, tt.status)
			}
			if res.Header.Get("Content-Security-Policy") == "" {
				t.Error("no Content-Security-Policy")
			}
		})
	}
}

// jsFunction returns the source of the arrow function dashboard.js
// declares as "  const name = (" at the top of its closure, to its
// closing "  };".
func jsFunction(tb testing.TB, js, name string) string {
	tb.Helper()
	start := strings.Index(js, "\n  const "+name+" = (")
	if start < 0 {
		tb.Fatalf("dashboard.js declares no %s", name)
	}
	end := strings.Index(js[start:], "\n  };\n")
	if end < 0 {
		tb.Fatalf("dashboard.js: %s has no end", name)
	}
	return js[start : start+end+len("\n  };\n")]
}

// TestFloorTexts runs the page's own floor functions (the banner's text
// and the floor figure) in Node on /stats documents, so that the banner
// is tested where the browser test skips (no Chromium). It skips without
// Node.
func TestFloorTexts(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("node not installed: %v", err)
	}
	_, js := get(t, dashboard.Handler(), http.MethodGet, "/dashboard.js", nil)
	cases := []struct {
		name   string
		stats  api.Stats
		figure string
		banner []string // in the banner; none: no banner
	}{
		{"no floor", api.Stats{Floor: &api.FloorStats{Met: true, Meeting: 4, Routable: 4, HighestVersion: 3}}, "none", nil},
		{"met", api.Stats{MinVersion: 3, Floor: &api.FloorStats{Met: true, Meeting: 1, Routable: 4, HighestVersion: 3}}, "3 · met by 1 of 4", nil},
		{"unmet", api.Stats{MinVersion: 45, Floor: &api.FloorStats{Met: false, Routable: 4, HighestVersion: 0}}, "45 · met by 0 of 4",
			[]string{"Weight floor 45 is unmet", "none of the 4 policies that can route has reached it", "the highest version is 0", "all routing waits", "PUT /weights"}},
		{"unmet by the only one", api.Stats{MinVersion: 45, Floor: &api.FloorStats{Met: false, Routable: 1, HighestVersion: 7}}, "45 · met by 0 of 1",
			[]string{"the one policy that can route has not reached it", "the highest version is 7"}},
		{"none can route", api.Stats{MinVersion: 45, Floor: &api.FloorStats{Met: true}}, "45 · met by 0 of 0", nil},
		{"an older router", api.Stats{MinVersion: 45}, "45", nil},
	}
	docs := make([]api.Stats, len(cases))
	for i, c := range cases {
		docs[i] = c.stats
	}
	in, err := json.Marshal(docs)
	if err != nil {
		t.Fatal(err)
	}
	script := jsFunction(t, js, "fmtFloor") + jsFunction(t, js, "floorAlarm") +
		`process.stdout.write(JSON.stringify(JSON.parse(process.argv[1]).map((s) => [fmtFloor(s), floorAlarm(s)])));`
	out, err := exec.Command(node, "-e", script, string(in)).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got [][2]string
	if err := json.Unmarshal(out, &got); err != nil || len(got) != len(cases) {
		t.Fatalf("node printed %s (%v); want %d pairs", out, err, len(cases))
	}
	for i, c := range cases {
		figure, banner := got[i][0], got[i][1]
		if figure != c.figure {
			t.Errorf("%s: floor figure %q, want %q", c.name, figure, c.figure)
		}
		if (banner == "") != (len(c.banner) == 0) {
			t.Errorf("%s: banner %q, want one: %v", c.name, banner, len(c.banner) > 0)
		}
		for _, w := range c.banner {
			if !strings.Contains(banner, w) {
				t.Errorf("%s: banner %q lacks %q", c.name, banner, w)
			}
		}
	}
}

// TestProbeTexts runs the page's own probe figures in Node on /stats
// documents: the poller figure and each policy's line count the recent
// window the router reports, not the probes since start; a router that
// reports no window gets the counts since start. It skips without Node.
func TestProbeTexts(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("node not installed: %v", err)
	}
	_, js := get(t, dashboard.Handler(), http.MethodGet, "/dashboard.js", nil)
	recent := api.Stats{
		Poller: &api.PollerStats{ProbesTotal: 900000, FailuresTotal: 40, ProbesRecent: 3000, FailuresRecent: 7, WindowSeconds: 300},
		Policies: []api.PolicyStats{{ProbesTotal: 450000, ProbeFailuresTotal: 40, ProbesRecent: 1500, ProbeFailuresRecent: 7,
			ConsecutiveFailures: 2}},
	}
	in, err := json.Marshal(recent)
	if err != nil {
		t.Fatal(err)
	}
	// A router from before the window: no *_recent, no window_seconds.
	older := `{"poller": {"probes_total": 900000, "failures_total": 40},
		"policies": [{"probes_total": 450000, "probe_failures_total": 40, "consecutive_failures": 0}]}`
	script := jsFunction(t, js, "probeCounts") + jsFunction(t, js, "fmtPolicyProbes") +
		`process.stdout.write(JSON.stringify(process.argv.slice(1).map((doc) => { const s = JSON.parse(doc); const c = probeCounts(s.poller);
			return [String(c.probes), String(c.failures), c.span, fmtPolicyProbes(s.policies[0], c.span)]; })));`
	out, err := exec.Command(node, "-e", script, string(in), older).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got [][4]string
	if err := json.Unmarshal(out, &got); err != nil || len(got) != 2 {
		t.Fatalf("node printed %s (%v); want 2 results", out, err)
	}
	want := [][4]string{
		{"3000", "7", "last 5 min", "probes in the last 5 min: 1500 (7 failed), 2 failing in a row; since start 450000 (40 failed)"},
		{"900000", "40", "since start", "probes 450000 (40 failed), 0 failing in a row"},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("document %d: got %q; want %q", i, got[i], want[i])
		}
	}
}

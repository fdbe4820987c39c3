package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/internal/poll"
)

// runBinary runs the built binary with args and returns its exit code,
// stdout and stderr.
func runCLI(tb testing.TB, args ...string) (int, string, string) {
	tb.Helper()
	cmd := exec.Command(binary, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	default:
		tb.Fatal(err)
		return 0, "", ""
	}
}

// The bare command and --help list the commands; nothing starts a server
// by surprise; stray arguments are refused; version, --version and -v
// print build info.
func TestCommandLine(t *testing.T) {
	commands := []string{"serve", "demo", "status", "token", "fake-policy", "version"}
	for _, tt := range []struct {
		args []string
		code int
		out  func(stdout, stderr string) string // where the usage goes
	}{
		{nil, 2, func(_, e string) string { return e }},
		{[]string{"--help"}, 0, func(o, _ string) string { return o }},
		{[]string{"help"}, 0, func(o, _ string) string { return o }},
	} {
		code, stdout, stderr := runCLI(t, tt.args...)
		if code != tt.code {
			t.Errorf("policyrouter %v: exit %d; want %d", tt.args, code, tt.code)
		}
		for _, c := range commands {
			if !strings.Contains(tt.out(stdout, stderr), "  "+c+" ") {
				t.Errorf("policyrouter %v does not list %s:\n%s%s", tt.args, c, stdout, stderr)
			}
		}
	}
	code, _, stderr := runCLI(t, "serve", "--addr", "127.0.0.1:0", "extra")
	if code != 2 || !strings.Contains(stderr, `unexpected argument "extra"`) {
		t.Errorf("serve with an extra argument: exit %d, %s; want 2 naming it", code, stderr)
	}
	code, _, stderr = runCLI(t, "frobnicate")
	if code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, %s", code, stderr)
	}
	code, version, _ := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(version, "policyrouter ") || !strings.Contains(version, "go1.") {
		t.Errorf("version: exit %d, %q; want the version and the Go version", code, version)
	}
	for _, flag := range []string{"--version", "-version", "-v"} {
		if code, stdout, stderr := runCLI(t, flag); code != 0 || stdout != version {
			t.Errorf("policyrouter %s: exit %d, %q%s; want what version prints, %q", flag, code, stdout, stderr, version)
		}
	}
	code, _, stderr = runCLI(t, "--version", "extra")
	if code != 2 || !strings.Contains(stderr, `unexpected argument "extra"`) {
		t.Errorf("--version with an extra argument: exit %d, %s; want 2 naming it", code, stderr)
	}
}

// status prints one line per policy from /stats, and exits 1 when one is
// unhealthy.
func TestStatusCommand(t *testing.T) {
	var failing atomic.Bool
	policy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			http.Error(w, "gone", http.StatusNotFound)
			return
		}
		fmt.Fprint(w, `{"idle": true}`)
	}))
	defer policy.Close()
	p := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--poll-interval", "20ms", "--fail-threshold", "2")
	base := "http://" + p.addr
	if code, body := post(t, base+"/policies", "", `{"url": "`+policy.URL+`", "index": 0, "node_id": "node-a"}`); code != http.StatusCreated {
		t.Fatalf("register: %d %s", code, body)
	}
	code, stdout, stderr := runCLI(t, "status", "--url", base)
	if code != 0 || !strings.Contains(stdout, "INDEX") || !strings.Contains(stdout, "node-a") || !strings.Contains(stdout, "idle") {
		t.Errorf("status of a healthy router: exit %d\n%s%s", code, stdout, stderr)
	}
	failing.Store(true)
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, stdout, _ = runCLI(t, "status", "--url", base)
		if code != 0 || time.Now().After(deadline) {
			break
		}
	}
	if code != 1 || !strings.Contains(stdout, "unhealthy") || !strings.Contains(stdout, "status 404") {
		t.Errorf("status with an unhealthy policy: exit %d\n%s; want 1 and the reason", code, stdout)
	}
	code, _, stderr = runCLI(t, "status", "--url", "http://127.0.0.1:1")
	if code != 2 || !strings.Contains(stderr, "127.0.0.1:1") {
		t.Errorf("status of no router: exit %d, %s", code, stderr)
	}
}

// status prints the weight-version floor and exits 1 while no policy
// that can route meets it; lowering the floor makes it 0 again.
func TestStatusFloorUnmet(t *testing.T) {
	policy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"idle": true, "version": 0}`)
	}))
	defer policy.Close()
	p := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--poll-interval", "20ms")
	base := "http://" + p.addr
	if code, body := post(t, base+"/policies", "", `{"url": "`+policy.URL+`", "index": 0}`); code != http.StatusCreated {
		t.Fatalf("register: %d %s", code, body)
	}
	var code int
	var stdout, stderr string
	poll.Until(t, "status of the router with its policy idle", func() bool {
		code, stdout, stderr = runCLI(t, "status", "--url", base)
		return code == 0 && strings.Contains(stdout, "idle")
	})
	if !strings.Contains(stdout, "weight floor: none") {
		t.Errorf("status without a floor:\n%s%s\nwant a line \"weight floor: none\"", stdout, stderr)
	}

	put(t, base+"/weights", `{"version": 45, "max_staleness": 0, "force": true}`)
	code, stdout, stderr = runCLI(t, "status", "--url", base)
	if code != 1 || !strings.Contains(stdout, "weight floor: 45 UNMET") || !strings.Contains(stdout, "(highest version 0)") {
		t.Errorf("status with floor 45 over version 0: exit %d\n%s%s\nwant 1, the floor unmet and the highest version", code, stdout, stderr)
	}

	put(t, base+"/weights", `{"version": 0, "max_staleness": 0}`)
	code, stdout, stderr = runCLI(t, "status", "--url", base)
	if code != 0 || strings.Contains(stdout, "UNMET") {
		t.Errorf("status with the floor lowered: exit %d\n%s%s\nwant 0", code, stdout, stderr)
	}
}

// put sends a JSON PUT and fails the test unless it answers 200.
func put(tb testing.TB, url, body string) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	if b, _ := io.ReadAll(res.Body); res.StatusCode != http.StatusOK {
		tb.Fatalf("PUT %s: %d %s", url, res.StatusCode, b)
	}
}

// status exits 1, naming each reason in its output, for an unhealthy
// policy, one a rolling update failed, and an unmet floor; a floor met,
// or one no policy can route to meet (the states say why), is no reason.
func TestStatusVerdict(t *testing.T) {
	healthy := api.StateCounts{Policies: 2, Idle: 2}
	for _, c := range []struct {
		name  string
		stats api.Stats
		want  []error // each must be in the answer; none: nil
		line  string  // in the output
	}{
		{"healthy, no floor", api.Stats{Totals: healthy, Floor: &api.FloorStats{Met: true, Meeting: 2, Routable: 2}}, nil, "weight floor: none"},
		{"floor met", api.Stats{Totals: healthy, MinVersion: 7, Floor: &api.FloorStats{Met: true, Meeting: 1, Routable: 2, HighestVersion: 8}},
			nil, "weight floor: 7, met by 1 of the 2 policies that can route (highest version 8)"},
		{"floor unmet", api.Stats{Totals: healthy, MinVersion: 45, Floor: &api.FloorStats{Routable: 2, HighestVersion: 3}},
			[]error{errFloorUnmet}, "weight floor: 45 UNMET: none of the 2 policies that can route has reached it (highest version 3)"},
		{"floor, none routable", api.Stats{Totals: api.StateCounts{Policies: 2, Draining: 2}, MinVersion: 45, Floor: &api.FloorStats{Met: true}},
			nil, "weight floor: 45; no policy can route"},
		{"an older router", api.Stats{Totals: healthy, MinVersion: 45}, nil, "weight floor: 45\n"},
		{"unhealthy", api.Stats{Totals: api.StateCounts{Policies: 2, Idle: 1, Unhealthy: 1}}, []error{errUnhealthy}, "1 unhealthy"},
		{"update failed", api.Stats{Totals: api.StateCounts{Policies: 2, Idle: 1, UpdateFailed: 1}}, []error{errUpdateFailed}, "1 update_failed;"},
		{"all three", api.Stats{Totals: api.StateCounts{Policies: 3, Idle: 1, Unhealthy: 1, UpdateFailed: 1}, MinVersion: 45,
			Floor: &api.FloorStats{Routable: 1}}, []error{errUnhealthy, errUpdateFailed, errFloorUnmet}, "UNMET"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			if err := printStatus(&out, c.stats); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), c.line) {
				t.Errorf("status prints:\n%s\nwant %q in it", out.String(), c.line)
			}
			err := statusVerdict(c.stats)
			if (err == nil) != (len(c.want) == 0) || (err != nil && !errors.Is(err, errAttention)) {
				t.Errorf("verdict %v; want %v, each wrapping errAttention (exit 1)", err, c.want)
			}
			for _, w := range c.want {
				if !errors.Is(err, w) {
					t.Errorf("verdict %v lacks %v", err, w)
				}
			}
		})
	}
}

// status says which replica leads when the router is one of several.
func TestStatusNamesTheLeader(t *testing.T) {
	for _, c := range []struct {
		replica *api.ReplicaStats
		want    string
	}{
		{nil, ""},
		{&api.ReplicaStats{Leading: true, Leader: "http://a:8080"}, "replica: the leader"},
		{&api.ReplicaStats{Leader: "http://a:8080"}, "the leader is http://a:8080"},
		{&api.ReplicaStats{Leader: "http://a:8080"}, "could not reach the leader"},
		{&api.ReplicaStats{Leader: "http://a:8080", StatsFrom: "http://a:8080"}, "as the leader http://a:8080 sees them"},
		{&api.ReplicaStats{}, "no leader is elected"},
	} {
		var out strings.Builder
		if err := printStatus(&out, api.Stats{Replica: c.replica}); err != nil {
			t.Fatal(err)
		}
		if got := out.String(); (c.want == "") != !strings.Contains(got, "replica:") || !strings.Contains(got, c.want) {
			t.Errorf("status with replica %+v:\n%s\nwant a line with %q", c.replica, got, c.want)
		}
	}
}

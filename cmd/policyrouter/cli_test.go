package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
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

// status says which replica leads when the router is one of several.
func TestStatusNamesTheLeader(t *testing.T) {
	for _, c := range []struct {
		replica *api.ReplicaStats
		want    string
	}{
		{nil, ""},
		{&api.ReplicaStats{Leading: true, Leader: "http://a:8080"}, "replica: the leader"},
		{&api.ReplicaStats{Leader: "http://a:8080"}, "the leader is http://a:8080"},
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

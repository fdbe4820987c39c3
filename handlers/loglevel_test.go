package handlers

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

func TestRequestLevel(t *testing.T) {
	for _, c := range []struct {
		status int
		want   slog.Level
	}{
		{200, slog.LevelDebug}, {201, slog.LevelDebug}, {400, slog.LevelDebug}, {401, slog.LevelDebug},
		{404, slog.LevelDebug}, {409, slog.LevelDebug}, {422, slog.LevelDebug},
		{503, slog.LevelDebug},
		{502, slog.LevelWarn}, {504, slog.LevelWarn},
		{500, slog.LevelError},
	} {
		if got := requestLevel(c.status, slog.LevelDebug); got != c.want {
			t.Errorf("requestLevel(%d) = %v, want %v", c.status, got, c.want)
		}
	}
}

// logLines returns the JSON log lines of buf.
func logLines(tb testing.TB, buf *bytes.Buffer) []map[string]any {
	tb.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			tb.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestRefusalsNotLoggedAtError provokes each expected refusal and checks
// that no log line is at ERROR, while a panic (a fault) is.
func TestRefusalsNotLoggedAtError(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st := routing.New(routing.Options{Polled: true, FailThreshold: 1, MaxWaiters: 1})
	ts := newTestServer(t, Config{State: st})
	ts.logger = logger
	leading := true
	ts.Leader = func() (bool, string) { return leading, "http://leader:8080" }
	ts.h = ts.Handler()

	codes := map[string]bool{}
	hit := func(method, path, body string, status int, code string) {
		t.Helper()
		rec := ts.do(t, method, path, body)
		if rec.Code != status {
			t.Fatalf("%s %s = %d %s, want %d", method, path, rec.Code, rec.Body, status)
		}
		var env api.ErrorResponse
		_ = json.Unmarshal(rec.Body.Bytes(), &env)
		if env.Error.Code != code {
			t.Fatalf("%s %s: code %q, want %q", method, path, env.Error.Code, code)
		}
		codes[code] = true
	}
	hit("POST", "/select", `{"timeout_ms": 0}`, 503, api.CodeNoPolicies)
	hit("GET", "/readyz", "", 503, api.CodeNoPolicies)
	ps := ts.register(t, 2)
	hit("POST", "/select", `{"timeout_ms": 0}`, 503, api.CodeNoIdlePolicy) // unknown: would wait
	now := time.Now()
	st.ObserveProbe(ps[0].ID, routing.Probe{SentAt: now, OK: true, Idle: false})
	st.ObserveFailure(ps[1].ID, now, "connection refused")
	hit("POST", "/select", `{"timeout_ms": 0, "min_version": 5}`, 503, api.CodeNoFreshPolicy)
	done := make(chan struct{})
	go func() { // one waiter fills --max-waiters
		defer close(done)
		ts.do(t, "POST", "/select", `{"timeout_ms": 300}`)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for st.Stats().Waiters == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	hit("POST", "/select", `{"timeout_ms": 300}`, 503, api.CodeOverloaded)
	<-done
	codes[api.CodeNoIdlePolicy] = true
	if err := st.SetDraining(ps[0].ID, true); err != nil {
		t.Fatal(err)
	}
	hit("POST", "/select", `{"timeout_ms": 0}`, 503, api.CodeAllUnavailable)
	hit("GET", "/readyz", "", 503, api.CodeAllUnavailable)
	hit("POST", "/select", `{`, 400, api.CodeBadRequest)
	hit("POST", "/select", `{"timeout_ms": -1}`, 422, api.CodeValidationFailed)
	hit("GET", "/policies/nope", "", 404, api.CodeNotFound)
	leading = false
	hit("POST", "/select", `{"timeout_ms": 0}`, 503, api.CodeNotLeader)
	hit("GET", "/readyz", "", 503, api.CodeNotLeader)
	leading = true
	ts.Stop()
	if err := st.SetDraining(ps[0].ID, false); err != nil {
		t.Fatal(err)
	}
	hit("POST", "/select", `{"timeout_ms": 1000}`, 503, api.CodeShuttingDown)

	lines := logLines(t, &buf)
	if len(lines) == 0 {
		t.Fatal("nothing logged")
	}
	for _, l := range lines {
		if l["level"] == "ERROR" {
			t.Errorf("an expected refusal logged at ERROR: %v", l)
		}
	}
	t.Logf("refusals provoked: %v; %d log lines", codes, len(lines))

	// A fault is still an ERROR, and the access log can be switched off
	// without losing it.
	buf.Reset()
	ts.NoAccessLog = true
	h := ts.logRequests(ts.recoverer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })))
	ok := ts.logRequests(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	for _, hh := range []http.Handler{h, ok} {
		hh.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/x", nil))
	}
	var requests, errorsLogged int
	for _, l := range logLines(t, &buf) {
		if l["msg"] == "request" {
			requests++
			if l["level"] != "ERROR" || l["status"] != float64(500) {
				t.Errorf("with the access log off, logged %v", l)
			}
		}
		if l["level"] == "ERROR" {
			errorsLogged++
		}
	}
	if requests != 1 || errorsLogged != 2 {
		t.Errorf("access log off: %d request lines, %d errors; want the 500's line and its panic", requests, errorsLogged)
	}
}

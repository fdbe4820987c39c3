package proxy

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

// --proxy-timeout bounds an attempt: a policy that never answers gets the
// upstream_timeout answer, a stream that stalls ends with an error event
// that says so, and both leases end unfinished (the engine may still be
// at work), with the failure counted.
func TestProxyTimeout(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	policy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if r.URL.Path == "/v1/completions" {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
			w.(http.Flusher).Flush()
		}
		select { // stalls until the test ends or the proxy leaves
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(policy.Close)
	l := &fakeLeaser{policies: []routing.Policy{{Index: 0, ID: "p0", URL: policy.URL}}}
	var ew errorWriter
	p := New(Config{Options: Options{Timeout: 100 * time.Millisecond}, Leaser: l, WriteError: ew.write})
	t.Cleanup(p.CloseIdleConnections)

	rec := httptest.NewRecorder()
	p.Forward(rec, httptest.NewRequest(http.MethodPost, "/generate", strings.NewReader(`{"text":"hi"}`)))
	var perr *Error
	if len(ew.errs) != 1 || !errors.As(ew.errs[0], &perr) || perr.Code != api.CodeUpstreamTimeout {
		t.Errorf("a policy that never answers: WriteError got %v; want one %s", ew.errs, api.CodeUpstreamTimeout)
	}

	rec = httptest.NewRecorder()
	p.Forward(rec, httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(`{"model":"m","prompt":"hi","stream":true}`)))
	if b := rec.Body.String(); rec.Code != http.StatusOK || !strings.HasPrefix(b, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n") ||
		!strings.Contains(b, "did not finish within --proxy-timeout") {
		t.Errorf("a stalled stream: %d %q; want its first event, then an error event naming --proxy-timeout", rec.Code, b)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if o, ok := l.released[1]; !ok || !o.Unfinished || o.Failure == nil {
		t.Errorf("lease 1 (no answer): released %v, %+v; want released unfinished, with a failure", ok, o)
	}
	// A generation longer than the bound is not the policy's fault.
	if o, ok := l.released[2]; !ok || !o.Unfinished || o.Failure != nil {
		t.Errorf("lease 2 (a stalled stream): released %v, %+v; want released unfinished, without a failure", ok, o)
	}
}

package handlers

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
)

// X-Select-Timeout-MS shortens a proxied request's wait for a policy: a
// floor no policy meets answers 503 after that wait, not the 30 s
// default.
func TestProxySelectTimeout(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 1) // version 0: below the floor below
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		req := ts.request("POST", "/generate", `{"input_ids":[1,2,3]}`)
		req.Header.Set(HeaderMinWeightVersion, "5")
		req.Header.Set(HeaderSelectTimeoutMS, "200")
		done <- ts.doReq(t, req)
	}()
	select {
	case rec := <-done:
		wantError(t, rec, http.StatusServiceUnavailable, api.CodeNoFreshPolicy, "")
	case <-time.After(15 * time.Second):
		t.Fatal("no answer within 15 s: the request waited as if X-Select-Timeout-MS were absent (30 s)")
	}
}

// The header is capped by --max-select-wait; a malformed one is a 422
// naming it.
func TestProxySelectWait(t *testing.T) {
	s := New(Config{MaxSelectWait: 5 * time.Second, DefaultSelectWait: 2 * time.Second, Logger: discardLogger()})
	for _, tt := range []struct {
		value string
		want  time.Duration
	}{
		{"", 2 * time.Second},
		{"200", 200 * time.Millisecond},
		{"0", 0},
		{"3600000", 5 * time.Second},
	} {
		h := http.Header{}
		if tt.value != "" {
			h.Set(HeaderSelectTimeoutMS, tt.value)
		}
		got, err := s.proxySelectWait(h)
		if err != nil || got != tt.want {
			t.Errorf("%s %q: %v, %v; want %v", HeaderSelectTimeoutMS, tt.value, got, err, tt.want)
		}
	}

	ts := newTestServer(t, Config{})
	ts.register(t, 1)
	for _, v := range []string{"soon", "-1", "3600001", "1.5"} {
		req := ts.request("POST", "/generate", `{}`)
		req.Header.Set(HeaderSelectTimeoutMS, v)
		wantError(t, ts.doReq(t, req), http.StatusUnprocessableEntity, api.CodeValidationFailed, HeaderSelectTimeoutMS)
	}
}

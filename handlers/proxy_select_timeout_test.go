package handlers

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/proxy"
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
		req.Header.Set(proxy.HeaderMinWeightVersion, "5")
		req.Header.Set(proxy.HeaderSelectTimeoutMS, "200")
		done <- ts.doReq(t, req)
	}()
	select {
	case rec := <-done:
		wantError(t, rec, http.StatusServiceUnavailable, api.CodeNoFreshPolicy, "")
	case <-time.After(15 * time.Second):
		t.Fatal("no answer within 15 s: the request waited as if X-Select-Timeout-MS were absent (30 s)")
	}
}

// A malformed X-Select-Timeout-MS is a 422 naming it (the cap by
// --max-select-wait is proxy's TestSelectWait).
func TestProxySelectWaitMalformed(t *testing.T) {
	ts := newTestServer(t, Config{})
	ts.register(t, 1)
	for _, v := range []string{"soon", "-1", "3600001", "1.5"} {
		req := ts.request("POST", "/generate", `{}`)
		req.Header.Set(proxy.HeaderSelectTimeoutMS, v)
		wantError(t, ts.doReq(t, req), http.StatusUnprocessableEntity, api.CodeValidationFailed, proxy.HeaderSelectTimeoutMS)
	}
}

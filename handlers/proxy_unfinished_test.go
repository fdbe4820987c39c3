package handlers

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/poller"
	"github.com/policyrouter/policyrouter/routing"
)

// A client that leaves a stream does not free its engine's slot while
// the engine runs on: an engine that does not notice a closed connection
// (the plain fake cannot cancel its work) keeps generating for the
// request, so the next request waits until a probe shows the work gone
// instead of making the engine run two on a capacity of one.
func TestProxyLeftStreamHoldsTheSlotWhileTheEngineRuns(t *testing.T) {
	st := routing.New(routing.Options{Polled: true})
	pl := poller.New(st, poller.Config{Interval: 20 * time.Millisecond, Timeout: 500 * time.Millisecond, Logger: discardLogger()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = pl.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	ts := newTestServer(t, Config{State: st, Poller: pl})
	// 40 tokens a second: the left stream's 20 tokens run for 0.5 s.
	f := fakeFleet(t, 1, fakepolicy.Options{TokensPerSecond: 40})
	idx, capacity := 0, 1
	body, _ := json.Marshal(api.PolicyRequest{URL: f.URL(0), Index: &idx, Capacity: &capacity})
	want(t, ts.do(t, "POST", "/policies", string(body)), http.StatusCreated, nil)
	poll.Until(t, "the policy idle", func() bool { return st.Stats().Policies[0].State == routing.StateIdle })
	srv := httptest.NewServer(ts.h)
	t.Cleanup(srv.Close)

	generate := func(ctx context.Context, tokens int, stream bool) *http.Response {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"input_ids": []int{1, 2, 3}, "sampling_params": map[string]any{"max_new_tokens": tokens}, "stream": stream})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/generate", strings.NewReader(string(b)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Select-Timeout-MS", "20000")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	left, leave := context.WithCancel(context.Background())
	res := generate(left, 20, true)
	if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	leave()
	res.Body.Close()
	poll.Until(t, "the left stream's lease to end", func() bool { return st.Stats().Leases == 0 })

	res = generate(context.Background(), 1, false)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("the next request: %d; want 200", res.StatusCode)
	}
	if peak := f.Policy(0).PeakLoad(); peak != 1 {
		t.Errorf("the engine ran %d requests at once; capacity 1 (the left stream's work was still running)", peak)
	}
	if got := f.Policy(0).Works(); got != 2 {
		t.Errorf("the engine got %d requests; want 2", got)
	}
}

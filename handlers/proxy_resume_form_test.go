package handlers

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/poller"
	"github.com/policyrouter/policyrouter/proxy"
	"github.com/policyrouter/policyrouter/routing"
)

// A stream aborted at its first chunk with tokens shows nothing of its
// chunks' form: its continuation takes the form the first engine's
// server info says (the poller read it), whatever the second engine's;
// without the info, SGLang's default, cumulative.
func TestProxyResumedStreamFormFromServerInfo(t *testing.T) {
	const n, tokens = 2, 40
	for _, tt := range []struct {
		name          string
		first, second bool // incremental chunks
		noInfo        bool // the first engine serves no server info
		want          bool // the client reads incremental chunks
	}{
		{"incremental then cumulative", true, false, false, true},
		{"cumulative then incremental", false, true, false, false},
		{"incremental without server info", true, true, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The first engine's first token would take 100 s: the abort
			// ends every stream at its first chunk.
			slow := fakeFleet(t, 1, fakepolicy.Options{Engine: engine.SGLang, TokensPerSecond: 0.01})
			fast := fakeFleet(t, 1, fakepolicy.Options{Engine: engine.SGLang, TokensPerSecond: 1000})
			slow.Policy(0).SetIncrementalStreaming(tt.first)
			slow.Policy(0).SetNoServerInfo(tt.noInfo)
			fast.Policy(0).SetIncrementalStreaming(tt.second)

			st := routing.New(routing.Options{Polled: true, Serves: engine.Serves})
			pl := poller.New(st, poller.Config{Interval: 10 * time.Millisecond, Logger: discardLogger()})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = pl.Run(ctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })
			ts := newTestServer(t, Config{State: st, Poller: pl, Proxy: proxy.Options{Resume: true, Retries: 2}})
			url := newHTTPServer(t, ts)

			register := func(index int, u string) routing.Policy {
				t.Helper()
				c := n
				body, _ := json.Marshal(api.PolicyRequest{URL: u, Index: &index, Capacity: &c, Engine: engine.SGLang})
				res, _ := post(t, url+"/policies", string(body))
				if res.StatusCode != 201 {
					t.Fatalf("POST /policies: %d", res.StatusCode)
				}
				var p routing.Policy
				poll.Until(t, "the policy probed and available", func() bool {
					for _, ps := range st.Stats().Policies {
						if ps.Policy.URL == u && ps.Available {
							p = ps.Policy
							return true
						}
					}
					return false
				})
				return p
			}
			p0 := register(0, slow.URL(0))
			if tt.noInfo {
				poll.Until(t, "the first engine asked for its server info", func() bool {
					return strings.Contains(strings.Join(slow.Policy(0).Calls(), " "), "/get_server_info")
				})
			} else {
				poll.Until(t, "the first engine's form known", func() bool { _, known := pl.IncrementalStreaming(p0); return known })
			}

			results := make([]streamResult, n)
			prompts := make([][]int64, n)
			lines := make([]atomic.Int64, n)
			var wg sync.WaitGroup
			for i := range n {
				prompts[i] = []int64{int64(i), 7, 8, 9}
				body, _ := json.Marshal(map[string]any{"input_ids": prompts[i], "return_logprob": true, "stream": true,
					"sampling_params": map[string]any{"max_new_tokens": tokens, "temperature": 0}})
				wg.Go(func() { results[i] = postStream(t, url, body, nil, &lines[i]) })
			}
			poll.Until(t, "every stream running on the first engine", func() bool { return slow.Policy(0).Load() == n })
			register(1, fast.URL(0))
			abortAllOn(t, slow.URL(0))
			wg.Wait()
			for i, r := range results {
				last, ok := checkWhole(t, i, r, prompts[i], tokens, tt.want)
				if !ok {
					continue
				}
				if segs := last.Meta.Segments; len(segs) != 2 || segs[0].End != 1 || segs[1].PolicyIndex != 1 || r.trailer.Get(proxy.HeaderResume) != "resumed" {
					t.Errorf("stream %d: segments %+v, trailers %v; want the first engine's one token, then the second's, resumed", i, segs, r.trailer)
				}
			}
		})
	}
}

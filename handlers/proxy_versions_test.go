package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
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

// An answer never resumed names its one segment's version in
// X-Weight-Versions, the label the engine writes in its own answers; a
// resumable stream names its segments in its trailer, one when it was
// never resumed, with the range of its tokens.
func TestProxyWeightVersionsOfAnswersNeverResumed(t *testing.T) {
	const tokens = 12
	for _, resume := range []bool{false, true} {
		t.Run("resume="+strconv.FormatBool(resume), func(t *testing.T) {
			f := fakeFleet(t, 1, fakepolicy.Options{Engine: engine.SGLang, TokensPerSecond: 1000})
			f.Policy(0).SetWeightVersion("step-7")
			st := routing.New(routing.Options{Polled: true, Serves: engine.Serves})
			pl := poller.New(st, poller.Config{Interval: 10 * time.Millisecond, Logger: discardLogger()})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = pl.Run(ctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })
			url := newHTTPServer(t, newTestServer(t, Config{State: st, Poller: pl, Proxy: proxy.Options{Resume: resume, Retries: 2}}))
			index, capacity := 0, 4
			body, _ := json.Marshal(api.PolicyRequest{URL: f.URL(0), Index: &index, Capacity: &capacity, Engine: engine.SGLang})
			if res, _ := post(t, url+"/policies", string(body)); res.StatusCode != http.StatusCreated {
				t.Fatalf("POST /policies: %d", res.StatusCode)
			}
			poll.Until(t, "the engine's version label read", func() bool {
				ps := st.Stats().Policies
				return len(ps) == 1 && ps[0].Available && ps[0].WeightVersion == "step-7"
			})

			gen, _ := json.Marshal(map[string]any{"input_ids": []int64{1, 2, 3}, "sampling_params": map[string]any{"max_new_tokens": tokens}})
			res, err := http.Post(url+"/generate", "application/json", bytes.NewReader(gen))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var ans struct {
				Meta struct {
					WeightVersion string     `json:"weight_version"`
					Segments      []any      `json:"segments"`
					Spans         []struct{} `json:"weight_versions"`
				} `json:"meta_info"`
			}
			if err := json.Unmarshal(b, &ans); err != nil || res.StatusCode != http.StatusOK {
				t.Fatalf("/generate: %d %v %s", res.StatusCode, err, b)
			}
			if got := res.Header.Get(proxy.HeaderWeightVersions); got != ans.Meta.WeightVersion || got != "step-7" ||
				res.Header.Get(proxy.HeaderWeightVersion) != "7" || ans.Meta.Segments != nil || res.Header.Get(proxy.HeaderResume) != "" {
				t.Errorf("/generate: %s %q, %s %q, meta_info.weight_version %q, segments %v; want step-7 and 7, the body as the engine wrote it",
					proxy.HeaderWeightVersions, got, proxy.HeaderWeightVersion, res.Header.Get(proxy.HeaderWeightVersion), ans.Meta.WeightVersion, ans.Meta.Segments)
			}

			stream, _ := json.Marshal(map[string]any{"input_ids": []int64{1, 2, 3}, "stream": true, "sampling_params": map[string]any{"max_new_tokens": tokens}})
			var lines atomic.Int64
			r := postStream(t, url, stream, nil, &lines)
			if r.err != nil || r.status != http.StatusOK || len(r.chunks) == 0 {
				t.Fatalf("stream: %d %v, %d chunks", r.status, r.err, len(r.chunks))
			}
			want, where := "step-7", r.header
			if resume {
				want, where = "step-7:0-"+strconv.Itoa(tokens), r.trailer
				if r.header.Get(proxy.HeaderWeightVersions) != "" {
					t.Errorf("resumable stream: %s %q in its head, announced as a trailer", proxy.HeaderWeightVersions, r.header.Get(proxy.HeaderWeightVersions))
				}
			}
			if got := where.Get(proxy.HeaderWeightVersions); got != want || where.Get(proxy.HeaderResume) != "" {
				t.Errorf("stream: %s %q, %s %q (header %v, trailer %v); want %q, nothing resumed", proxy.HeaderWeightVersions, got,
					proxy.HeaderResume, where.Get(proxy.HeaderResume), r.header, r.trailer, want)
			}
		})
	}
}

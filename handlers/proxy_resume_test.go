package handlers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/proxy"
)

// generateAnswer is what these tests read of a /generate answer.
type generateAnswer struct {
	Text      string  `json:"text"`
	OutputIDs []int64 `json:"output_ids"`
	Meta      struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		FinishReason     struct {
			Type   string
			Length int
		} `json:"finish_reason"`
		Logprobs       [][3]any     `json:"output_token_logprobs"`
		LogprobsLength int          `json:"output_token_logprobs_length"`
		Segments       []segment    `json:"segments"`
		WeightVersions []weightSpan `json:"weight_versions"`
	} `json:"meta_info"`
}

// segment is an entry of a resumed answer's meta_info.segments.
type segment struct {
	PolicyID      string `json:"policy_id"`
	PolicyIndex   int    `json:"policy_index"`
	WeightVersion string `json:"weight_version"`
	Start         int    `json:"start"`
	End           int    `json:"end"`
}

// weightSpan is an entry of meta_info.weight_versions (SGLang's
// WeightVersionSpan).
type weightSpan struct {
	Version string `json:"version"`
	Start   int    `json:"start"`
	End     int    `json:"end"`
}

type generateResult struct {
	status int
	header http.Header
	ans    generateAnswer
	err    error
}

// stepFleet is two simulated SGLang engines at 100 tokens/s, policy 0
// at "step-3" and policy 1 at "step-4".
func stepFleet(t *testing.T) *fakepolicy.Fleet {
	t.Helper()
	f, err := fakepolicy.New(2, rand.NewPCG(1, 2), fakepolicy.Options{Engine: fakepolicy.EngineSGLang, TokensPerSecond: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	f.Policy(0).SetWeightVersion("step-3")
	f.Policy(1).SetWeightVersion("step-4")
	return f
}

// joinPolicy1 registers the fleet's policy 1, of capacity n, with the
// router at url.
func joinPolicy1(t *testing.T, url string, f *fakepolicy.Fleet, n int) {
	t.Helper()
	reg, err := http.Post(url+"/policies", "application/json",
		strings.NewReader(`{"url":"`+f.URL(1)+`","index":1,"capacity":`+strconv.Itoa(n)+`}`))
	if err != nil {
		t.Fatal(err)
	}
	reg.Body.Close()
	if reg.StatusCode != http.StatusCreated {
		t.Fatalf("POST /policies: %d", reg.StatusCode)
	}
}

// abortedFleet is two simulated SGLang engines behind a router on a real
// listener: "step-3" (policy 0, which every request goes to first) and
// "step-4" (policy 1, registered once they run). It sends n /generate requests of `tokens` tokens
// each through the router, waits until they run on policy 0 and have
// generated some tokens, aborts them all there with POST /abort_request
// abort_all, and returns the answers and the prompts.
func abortedFleet(t *testing.T, n, tokens int, hdr map[string]string) ([]generateResult, [][]int64) {
	t.Helper()
	f := stepFleet(t)
	// Policy 1 joins once every request runs on policy 0.
	srv := proxyServer(t, Config{Proxy: proxy.Options{Resume: true, Retries: 2}}, n, f.URL(0))

	results := make([]generateResult, n)
	prompts := make([][]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		prompts[i] = []int64{int64(i), 7, 8, 9}
		body, _ := json.Marshal(map[string]any{"input_ids": prompts[i], "return_logprob": true,
			"sampling_params": map[string]any{"max_new_tokens": tokens, "temperature": 0}})
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/generate", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				results[i].err = err
				return
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			checkSpec(t, req, res.StatusCode, res.Header, b)
			var ans generateAnswer
			err = json.Unmarshal(b, &ans)
			results[i] = generateResult{status: res.StatusCode, header: res.Header, ans: ans, err: err}
		})
	}
	poll.Until(t, "every request running on policy 0", func() bool { return f.Policy(0).Load() == n })
	joinPolicy1(t, srv.URL, f, n)
	// A stream on policy 0 itself shows the generations have made
	// progress: its fifth token comes after five tokens' time.
	res, err := http.Post(f.URL(0)+"/generate", "application/json", strings.NewReader(`{"input_ids":[1],"stream":true,"sampling_params":{"max_new_tokens":1000}}`))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(res.Body)
	for events := 0; events < 5 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
		}
	}
	abort, err := http.Post(f.URL(0)+"/abort_request", "application/json", strings.NewReader(`{"abort_all":true}`))
	if err != nil {
		t.Fatal(err)
	}
	abort.Body.Close()
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	wg.Wait()
	return results, prompts
}

// Generations aborted on one engine continue on the other: each client
// gets one answer equal, token for token, to the uninterrupted
// generation, with its logprobs and counts, and the segments named.
func TestProxyResumesAbortedGenerations(t *testing.T) {
	const n, tokens = 8, 200
	results, prompts := abortedFleet(t, n, tokens, nil)
	for i, r := range results {
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d: %d %v", i, r.status, r.err)
		}
		a := r.ans
		wantIDs, wantLPs := fakepolicy.Continuation(prompts[i], tokens)
		if !slices.Equal(a.OutputIDs, wantIDs) || a.Text != fakepolicy.Detokenize(wantIDs) {
			t.Errorf("request %d: %d output_ids, first difference at %d; want the uninterrupted %d", i, len(a.OutputIDs), firstDiff(a.OutputIDs, wantIDs), len(wantIDs))
		}
		// The finish counts against the client's budget, not what was
		// left of it for the last segment.
		if a.Meta.PromptTokens != len(prompts[i]) || a.Meta.CompletionTokens != tokens || a.Meta.FinishReason.Type != "length" ||
			a.Meta.FinishReason.Length != tokens || len(a.Meta.Logprobs) != tokens || a.Meta.LogprobsLength != tokens {
			t.Errorf("request %d: prompt_tokens %d, completion_tokens %d, finish %+v, %d logprobs (length %d); want %d, %d, length %d, %d",
				i, a.Meta.PromptTokens, a.Meta.CompletionTokens, a.Meta.FinishReason, len(a.Meta.Logprobs), a.Meta.LogprobsLength,
				len(prompts[i]), tokens, tokens, tokens)
		}
		for j, lp := range a.Meta.Logprobs {
			if lp[0] != wantLPs[j] || lp[1] != float64(wantIDs[j]) {
				t.Errorf("request %d: output_token_logprobs[%d] = %v; want [%v, %d, null]", i, j, lp, wantLPs[j], wantIDs[j])
				break
			}
		}
		segs := a.Meta.Segments
		if len(segs) != 2 || segs[0].PolicyIndex != 0 || segs[0].WeightVersion != "step-3" || segs[1].PolicyIndex != 1 ||
			segs[1].WeightVersion != "step-4" || segs[0].Start != 0 || segs[0].End == 0 || segs[0].End != segs[1].Start || segs[1].End != tokens {
			t.Errorf("request %d: segments %+v; want step-3 on policy 0 from 0 to k > 0, then step-4 on policy 1 from k to %d", i, segs, tokens)
			continue
		}
		k := strconv.Itoa(segs[0].End)
		wantSpans := []weightSpan{{"step-3", 0, segs[0].End}, {"step-4", segs[0].End, tokens}}
		if got := r.header.Get(proxy.HeaderWeightVersions); got != "step-3:0-"+k+",step-4:"+k+"-"+strconv.Itoa(tokens) ||
			!slices.Equal(a.Meta.WeightVersions, wantSpans) || r.header.Get(proxy.HeaderResume) != "resumed" || r.header.Get(proxy.HeaderPolicyIndex) != "1" {
			t.Errorf("request %d: %s %q, weight_versions %+v, %s %q, %s %q; want step-3:0-%s,step-4:%s-%d, resumed, 1",
				i, proxy.HeaderWeightVersions, got, a.Meta.WeightVersions, proxy.HeaderResume, r.header.Get(proxy.HeaderResume),
				proxy.HeaderPolicyIndex, r.header.Get(proxy.HeaderPolicyIndex), k, k, tokens)
		}
	}
}

// With X-Resume-On-Abort: 0 the aborts pass through as the engine sent
// them.
func TestProxyResumeOptOut(t *testing.T) {
	const n, tokens = 4, 200
	results, prompts := abortedFleet(t, n, tokens, map[string]string{proxy.HeaderResumeOnAbort: "0"})
	for i, r := range results {
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d: %d %v", i, r.status, r.err)
		}
		a := r.ans
		wantIDs, _ := fakepolicy.Continuation(prompts[i], tokens)
		if a.Meta.FinishReason.Type != "abort" || len(a.OutputIDs) >= tokens || !slices.Equal(a.OutputIDs, wantIDs[:len(a.OutputIDs)]) ||
			a.Meta.Segments != nil || r.header.Get(proxy.HeaderResume) != "" || r.header.Get(proxy.HeaderWeightVersions) != "0" || r.header.Get(proxy.HeaderPolicyIndex) != "0" {
			t.Errorf("request %d: finish %q, %d output_ids, segments %v, headers %v; want policy 0's abort as it is",
				i, a.Meta.FinishReason.Type, len(a.OutputIDs), a.Meta.Segments, r.header)
		}
	}
}

// A text prompt's tokens are not known to the router: its abort passes
// through, and the answer says why it was not resumed. A malformed
// X-Resume-On-Abort is a 422 naming it.
func TestProxyResumeUnavailable(t *testing.T) {
	aborted := `{"text":" tok1","output_ids":[1],"meta_info":{"id":"a","finish_reason":{"type":"abort","message":"Aborted"},"completion_tokens":1}}`
	b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, aborted)
	})
	ts := newTestServer(t, Config{Proxy: proxy.Options{Resume: true, Retries: 2}})
	want(t, ts.do(t, "PUT", "/policies", `{"policies":[{"url":"`+b.URL+`","index":0}]}`), http.StatusOK, nil)
	for body, why := range map[string]string{
		`{"text":"hi"}`: "unavailable (text prompt)",
		`{"input_ids":[1,2],"stream":false,"sampling_params":{"regex":"a+"}}`: "unavailable (constrained decoding)",
		`{"input_ids":[[1,2],[3]]}`:                     "unavailable (batch request)",
		`{"input_ids":[1,2],"sampling_params":{"n":2}}`: "unavailable (n > 1)",
	} {
		rec := ts.do(t, "POST", "/generate", body)
		if rec.Code != http.StatusOK || rec.Body.String() != aborted || rec.Header().Get(proxy.HeaderResume) != why {
			t.Errorf("%s: %d %s, %s %q; want the abort as it is, %q", body, rec.Code, rec.Body, proxy.HeaderResume, rec.Header().Get(proxy.HeaderResume), why)
		}
	}
	req := ts.request("POST", "/generate", `{"input_ids":[1]}`)
	req.Header.Set(proxy.HeaderResumeOnAbort, "yes")
	wantError(t, ts.doReq(t, req), http.StatusUnprocessableEntity, "validation_failed", proxy.HeaderResumeOnAbort)
}

func firstDiff(a, b []int64) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A policy that dies in the middle of a non-streamed answer may have run
// the request, and what it generated is lost with the answer: it is a 502
// like any other, sent to no other policy (a POST never runs twice), and
// the death counts against the policy's health.
func TestProxyResumeAfterDeath(t *testing.T) {
	dies := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, `{"text":" tok1","output_ids":[1`)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection drops
	})
	good := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"text":" tok1 tok2","output_ids":[1,2],"meta_info":{"id":"b","finish_reason":{"type":"length","length":2},"completion_tokens":2}}`)
	})
	ts := newTestServer(t, Config{Proxy: proxy.Options{Resume: true, Retries: 2}})
	want(t, ts.do(t, "PUT", "/policies", `{"policies":[{"url":"`+dies.URL+`","index":0},{"url":"`+good.URL+`","index":1}]}`), http.StatusOK, nil)
	req := ts.request("POST", "/generate", `{"input_ids":[5,6],"sampling_params":{"max_new_tokens":2}}`)
	req.Header.Set(proxy.HeaderRouter, "simple")
	rec := ts.doReq(t, req)
	wantError(t, rec, http.StatusBadGateway, api.CodeUpstreamFailed, "")
	if !strings.Contains(rec.Body.String(), "mid-answer") {
		t.Errorf("answer %s; want it to say the policy failed mid-answer", rec.Body)
	}
	if dies.served.Load() != 1 || good.served.Load() != 0 {
		t.Fatalf("the dying policy served %d, the other %d; want 1 and 0", dies.served.Load(), good.served.Load())
	}
	ps, _ := ts.State.PolicyStats(ts.State.Snapshot().Policies()[0].ID)
	if ps.FailStreak != 1 || !strings.Contains(ps.LastError, "mid-answer") || ts.State.Stats().Leases != 0 {
		t.Errorf("dying policy: fail streak %d, last error %q, leases out %d; want 1, a mid-answer failure, 0", ps.FailStreak, ps.LastError, ts.State.Stats().Leases)
	}
}

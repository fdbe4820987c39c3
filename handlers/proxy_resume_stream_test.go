package handlers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/proxy"
)

// streamChunk is what these tests read of a streamed /generate chunk.
type streamChunk struct {
	Text      string  `json:"text"`
	OutputIDs []int64 `json:"output_ids"`
	Meta      struct {
		PromptTokens     int             `json:"prompt_tokens"`
		CompletionTokens int             `json:"completion_tokens"`
		FinishReason     json.RawMessage `json:"finish_reason"`
		Logprobs         [][3]any        `json:"output_token_logprobs"`
		LogprobsLength   int             `json:"output_token_logprobs_length"`
		Segments         []segment       `json:"segments"`
		WeightVersions   []weightSpan    `json:"weight_versions"`
	} `json:"meta_info"`
}

func (c streamChunk) finish() string {
	var f struct{ Type string }
	_ = json.Unmarshal(c.Meta.FinishReason, &f)
	return f.Type
}

// streamResult is one client's stream: status, header, chunks, whether it
// ended with [DONE], trailers.
type streamResult struct {
	status  int
	header  http.Header
	trailer http.Header
	chunks  []streamChunk
	done    int
	err     error
}

// streamFleet is abortedFleet for streams: n streamed /generate requests
// of `tokens` tokens run on policy 0 ("step-3") until end(policy 0) ends
// them; policy 1 ("step-4") is registered before, unless alone.
type streamFleet struct {
	n, tokens int
	hdr       map[string]string
	// setup adjusts the two simulated engines before the requests.
	setup func(f *fakepolicy.Fleet)
	// end ends the generations on policy 0.
	end   func(t *testing.T, f *fakepolicy.Fleet)
	alone bool // policy 1 is never registered
}

func (sf streamFleet) run(t *testing.T) ([]streamResult, [][]int64, *fakepolicy.Fleet) {
	t.Helper()
	f := stepFleet(t)
	if sf.setup != nil {
		sf.setup(f)
	}
	srv := proxyServer(t, Config{Proxy: proxy.Options{Resume: true, Retries: 2}}, sf.n, f.URL(0))

	results := make([]streamResult, sf.n)
	prompts := make([][]int64, sf.n)
	lines := make([]atomic.Int64, sf.n) // newlines each client has read
	var wg sync.WaitGroup
	for i := range sf.n {
		prompts[i] = []int64{int64(i), 7, 8, 9}
		body, _ := json.Marshal(map[string]any{"input_ids": prompts[i], "return_logprob": true, "stream": true,
			"sampling_params": map[string]any{"max_new_tokens": sf.tokens, "temperature": 0}})
		wg.Go(func() { results[i] = postStream(t, srv.URL, body, sf.hdr, &lines[i]) })
	}
	poll.Until(t, "every stream running on policy 0", func() bool { return f.Policy(0).Load() == sf.n })
	if !sf.alone {
		joinPolicy1(t, srv.URL, f, sf.n)
	}
	// A few chunks read by every client, so that each stream shows its
	// chunks' form (incremental or cumulative) before it is ended: the
	// first chunk alone cannot say.
	poll.Until(t, "three events read by every client", func() bool {
		for i := range lines {
			if lines[i].Load() < 6 { // an event is a data line and a blank one
				return false
			}
		}
		return true
	})
	sf.end(t, f)
	wg.Wait()
	return results, prompts, f
}

// postStream posts a streamed /generate and reads the whole stream,
// counting in lines the newlines read so far.
func postStream(tb testing.TB, url string, body []byte, hdr map[string]string, lines *atomic.Int64) streamResult {
	req, _ := http.NewRequest(http.MethodPost, url+"/generate", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return streamResult{err: err}
	}
	defer res.Body.Close()
	r := streamResult{status: res.StatusCode, header: res.Header}
	raw, err := io.ReadAll(lineCounter{res.Body, lines})
	if err != nil {
		r.err = err
		return r
	}
	r.trailer = res.Trailer
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		switch {
		case !ok:
		case data == "[DONE]":
			r.done++
		default:
			var c streamChunk
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				r.err = err
				return r
			}
			if r.done > 0 {
				r.err = errorString("a chunk after [DONE]")
			}
			r.chunks = append(r.chunks, c)
		}
	}
	if r.err == nil {
		r.err = sc.Err()
	}
	return r
}

// lineCounter counts the newlines read through it.
type lineCounter struct {
	r     io.Reader
	lines *atomic.Int64
}

func (c lineCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.lines.Add(int64(bytes.Count(p[:n], []byte{'\n'})))
	return n, err
}

type errorString string

func (e errorString) Error() string { return string(e) }

// checkWhole checks that a stream is one valid SGLang stream whose tokens
// are, token for token, the uninterrupted generation: incremental chunks
// add up to it, cumulative ones each extend the one before; one
// finish_reason, on the last chunk, and one [DONE].
func checkWhole(t *testing.T, i int, r streamResult, prompt []int64, tokens int, incremental bool) (last streamChunk, ok bool) {
	t.Helper()
	if r.err != nil || r.status != http.StatusOK || len(r.chunks) == 0 || r.done != 1 {
		t.Errorf("stream %d: %d, %d chunks, %d [DONE], %v", i, r.status, len(r.chunks), r.done, r.err)
		return last, false
	}
	wantIDs, wantLPs := fakepolicy.Continuation(prompt, tokens)
	var ids []int64
	var text string
	var lps [][3]any
	for j, c := range r.chunks {
		if f := c.finish(); (f != "") != (j == len(r.chunks)-1) {
			t.Errorf("stream %d, chunk %d of %d: finish_reason %s", i, j, len(r.chunks), c.Meta.FinishReason)
			return last, false
		}
		if incremental {
			ids, text, lps = append(ids, c.OutputIDs...), text+c.Text, append(lps, c.Meta.Logprobs...)
		} else {
			if !slices.Equal(c.OutputIDs[:min(len(ids), len(c.OutputIDs))], ids) || len(c.OutputIDs) < len(ids) {
				t.Errorf("stream %d, chunk %d: %d output_ids do not extend the %d before", i, j, len(c.OutputIDs), len(ids))
				return last, false
			}
			ids, text, lps = c.OutputIDs, c.Text, c.Meta.Logprobs
		}
		if c.Meta.CompletionTokens != len(ids) || c.Meta.LogprobsLength != len(lps) || c.Meta.PromptTokens != len(prompt) {
			t.Errorf("stream %d, chunk %d: completion_tokens %d, output_token_logprobs_length %d, prompt_tokens %d; want %d, %d, %d",
				i, j, c.Meta.CompletionTokens, c.Meta.LogprobsLength, c.Meta.PromptTokens, len(ids), len(lps), len(prompt))
			return last, false
		}
	}
	if !slices.Equal(ids, wantIDs) || text != fakepolicy.Detokenize(wantIDs) || len(lps) != tokens {
		t.Errorf("stream %d: %d output_ids, first difference at %d, %d logprobs; want the uninterrupted %d", i, len(ids), firstDiff(ids, wantIDs), len(lps), tokens)
		return last, false
	}
	for j, lp := range lps {
		if lp[0] != wantLPs[j] || lp[1] != float64(wantIDs[j]) {
			t.Errorf("stream %d: output_token_logprobs[%d] = %v; want [%v, %d, null]", i, j, lp, wantLPs[j], wantIDs[j])
			return last, false
		}
	}
	return r.chunks[len(r.chunks)-1], true
}

// checkResumed checks a resumed stream's last chunk and trailers: step-3
// on policy 0 then step-4 on policy 1.
func checkResumed(t *testing.T, i int, r streamResult, last streamChunk, tokens int) {
	t.Helper()
	segs := last.Meta.Segments
	if last.finish() != "length" || len(segs) != 2 || segs[0].PolicyIndex != 0 || segs[0].WeightVersion != "step-3" ||
		segs[1].PolicyIndex != 1 || segs[1].WeightVersion != "step-4" || segs[0].End == 0 || segs[0].End != segs[1].Start || segs[1].End != tokens {
		t.Errorf("stream %d: finish %q, segments %+v; want length, step-3 on policy 0 from 0 to k > 0, then step-4 on policy 1 from k to %d",
			i, last.finish(), segs, tokens)
		return
	}
	k := strconv.Itoa(segs[0].End)
	wantSpans := []weightSpan{{"step-3", 0, segs[0].End}, {"step-4", segs[0].End, tokens}}
	if got := r.trailer.Get(proxy.HeaderWeightVersions); got != "step-3:0-"+k+",step-4:"+k+"-"+strconv.Itoa(tokens) ||
		!slices.Equal(last.Meta.WeightVersions, wantSpans) || r.trailer.Get(proxy.HeaderResume) != "resumed" || r.header.Get(proxy.HeaderPolicyIndex) != "0" {
		t.Errorf("stream %d: trailers %v, weight_versions %+v, %s %q; want step-3:0-%s,step-4:%s-%d, resumed, the first policy's header",
			i, r.trailer, last.Meta.WeightVersions, proxy.HeaderPolicyIndex, r.header.Get(proxy.HeaderPolicyIndex), k, k, tokens)
	}
}

func abortAll(t *testing.T, f *fakepolicy.Fleet) { abortAllOn(t, f.URL(0)) }

// Streams aborted on one engine go on from the other: each client reads
// one stream whose tokens are the uninterrupted generation's, in the
// chunks' form of the first engine, whatever the second's.
func TestProxyResumesAbortedStreams(t *testing.T) {
	const n, tokens = 6, 150
	for _, tt := range []struct {
		name                 string
		first, second        bool // incremental chunks
		clientSeesIncrements bool
	}{
		{"cumulative", false, false, false},
		{"incremental", true, true, true},
		{"cumulative then incremental", false, true, false},
		{"incremental then cumulative", true, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			results, prompts, _ := streamFleet{n: n, tokens: tokens, end: abortAll, setup: func(f *fakepolicy.Fleet) {
				f.Policy(0).SetIncrementalStreaming(tt.first)
				f.Policy(1).SetIncrementalStreaming(tt.second)
			}}.run(t)
			for i, r := range results {
				if last, ok := checkWhole(t, i, r, prompts[i], tokens, tt.clientSeesIncrements); ok {
					checkResumed(t, i, r, last, tokens)
				}
			}
		})
	}
}

// An engine that dies mid-stream: the tokens it streamed stand, the rest
// comes from the other engine, and the death counts against the first.
func TestProxyResumesStreamsAfterDeath(t *testing.T) {
	const n, tokens = 4, 150
	results, prompts, _ := streamFleet{n: n, tokens: tokens, end: func(t *testing.T, f *fakepolicy.Fleet) {
		f.Policy(0).DropGenerations()
	}}.run(t)
	for i, r := range results {
		last, ok := checkWhole(t, i, r, prompts[i], tokens, false)
		if !ok {
			continue
		}
		if segs := last.Meta.Segments; len(segs) != 2 || segs[0].End == 0 || segs[1].PolicyIndex != 1 || r.trailer.Get(proxy.HeaderResume) != "resumed" {
			t.Errorf("stream %d: segments %+v, trailers %v; want policy 0's tokens, then policy 1's, resumed", i, segs, r.trailer)
		}
	}
}

// With X-Resume-On-Abort: 0 an aborted stream passes through as the engine
// sent it.
func TestProxyResumeStreamOptOut(t *testing.T) {
	const n, tokens = 3, 150
	results, prompts, _ := streamFleet{n: n, tokens: tokens, end: abortAll, hdr: map[string]string{proxy.HeaderResumeOnAbort: "0"}}.run(t)
	for i, r := range results {
		if r.err != nil || r.status != http.StatusOK || len(r.chunks) == 0 || r.done != 1 {
			t.Fatalf("stream %d: %d, %d chunks, %d [DONE], %v", i, r.status, len(r.chunks), r.done, r.err)
		}
		last := r.chunks[len(r.chunks)-1]
		wantIDs, _ := fakepolicy.Continuation(prompts[i], tokens)
		if last.finish() != "abort" || len(last.OutputIDs) >= tokens || !slices.Equal(last.OutputIDs, wantIDs[:len(last.OutputIDs)]) ||
			last.Meta.Segments != nil || len(r.trailer) != 0 || r.header.Get("Trailer") != "" {
			t.Errorf("stream %d: finish %q, %d output_ids, segments %v, trailers %v; want policy 0's abort as it is",
				i, last.finish(), len(last.OutputIDs), last.Meta.Segments, r.trailer)
		}
	}
}

// With no other engine to go on, the stream ends with the tokens it has,
// aborted, its one segment named, and the trailer saying why.
func TestProxyResumeStreamNowhere(t *testing.T) {
	const n, tokens = 2, 150
	results, prompts, _ := streamFleet{n: n, tokens: tokens, end: abortAll, alone: true}.run(t)
	for i, r := range results {
		if r.err != nil || r.status != http.StatusOK || len(r.chunks) == 0 || r.done != 1 {
			t.Fatalf("stream %d: %d, %d chunks, %d [DONE], %v", i, r.status, len(r.chunks), r.done, r.err)
		}
		last := r.chunks[len(r.chunks)-1]
		wantIDs, _ := fakepolicy.Continuation(prompts[i], tokens)
		segs := last.Meta.Segments
		if last.finish() != "abort" || len(last.OutputIDs) == 0 || !slices.Equal(last.OutputIDs, wantIDs[:len(last.OutputIDs)]) ||
			len(segs) != 1 || segs[0].End != len(last.OutputIDs) || r.trailer.Get(proxy.HeaderResume) != "incomplete (aborted; no other policy available)" {
			t.Errorf("stream %d: finish %q, %d output_ids, segments %+v, trailers %v; want the tokens so far, aborted, incomplete",
				i, last.finish(), len(last.OutputIDs), segs, r.trailer)
		}
	}
}

// A client that leaves a resumed stream ends it everywhere: the
// continuation's upstream request is cancelled (the engine aborts it) and
// no lease is left out.
func TestProxyResumedStreamClientLeaves(t *testing.T) {
	f, err := fakepolicy.New(2, rand.NewPCG(1, 2), fakepolicy.Options{Engine: fakepolicy.EngineSGLang, TokensPerSecond: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ts := newTestServer(t, Config{Proxy: proxy.Options{Resume: true, Retries: 2}})
	want(t, ts.do(t, "PUT", "/policies", `{"policies":[{"url":"`+f.URL(0)+`","index":0},{"url":"`+f.URL(1)+`","index":1}]}`), http.StatusOK, nil)
	url := newHTTPServer(t, ts)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/generate",
		strings.NewReader(`{"input_ids":[1,2],"stream":true,"sampling_params":{"max_new_tokens":100000}}`))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	first, _ := strconv.Atoi(res.Header.Get(proxy.HeaderPolicyIndex))
	readEvents(t, res.Body, 3)
	abortAllOn(t, f.URL(first))
	readEvents(t, res.Body, 3)
	if n := f.Policy(1 - first).Load(); n != 1 {
		t.Fatalf("policy %d: load %d while the stream goes on there; want 1", 1-first, n)
	}
	cancel()
	poll.Until(t, "both engines idle and no lease out", func() bool {
		return f.Policy(0).Load() == 0 && f.Policy(1).Load() == 0 && ts.State.Stats().Leases == 0
	})
}

func abortAllOn(t *testing.T, url string) {
	res, err := http.Post(url+"/abort_request", "application/json", strings.NewReader(`{"abort_all":true}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
}

// An engine that dies mid-stream with no other to go on: the stream ends
// with the tokens it had, a last chunk aborted saying why, and [DONE].
func TestProxyResumeStreamDeathNowhere(t *testing.T) {
	const n, tokens = 2, 150
	results, prompts, _ := streamFleet{n: n, tokens: tokens, alone: true, end: func(t *testing.T, f *fakepolicy.Fleet) {
		f.Policy(0).DropGenerations()
	}}.run(t)
	for i, r := range results {
		if r.err != nil || r.status != http.StatusOK || len(r.chunks) < 2 || r.done != 1 {
			t.Fatalf("stream %d: %d, %d chunks, %d [DONE], %v", i, r.status, len(r.chunks), r.done, r.err)
		}
		last, before := r.chunks[len(r.chunks)-1], r.chunks[len(r.chunks)-2]
		wantIDs, _ := fakepolicy.Continuation(prompts[i], tokens)
		var finish struct{ Type, Message string }
		_ = json.Unmarshal(last.Meta.FinishReason, &finish)
		if finish.Type != "abort" || !strings.Contains(finish.Message, "mid-answer") || !slices.Equal(last.OutputIDs, before.OutputIDs) ||
			!slices.Equal(last.OutputIDs, wantIDs[:len(last.OutputIDs)]) || len(last.Meta.Segments) != 1 ||
			!strings.HasPrefix(r.trailer.Get(proxy.HeaderResume), "incomplete (failed mid-answer: ") ||
			!strings.HasSuffix(r.trailer.Get(proxy.HeaderResume), "; no other policy available)") {
			t.Errorf("stream %d: finish %s, %d output_ids (%d before), segments %+v, trailers %v; want the tokens streamed, aborted for the death, incomplete",
				i, last.Meta.FinishReason, len(last.OutputIDs), len(before.OutputIDs), last.Meta.Segments, r.trailer)
		}
	}
}

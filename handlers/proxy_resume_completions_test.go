package handlers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/proxy"
)

// completionAnswer is what these tests read of a /v1/completions answer.
type completionAnswer struct {
	Choices []struct {
		Text           string    `json:"text"`
		TokenIDs       []int64   `json:"token_ids"`
		PromptTokenIDs []int64   `json:"prompt_token_ids"`
		FinishReason   string    `json:"finish_reason"`
		Segments       []segment `json:"segments"`
		Logprobs       struct {
			Tokens        []string  `json:"tokens"`
			TokenLogprobs []float64 `json:"token_logprobs"`
			TextOffset    []int     `json:"text_offset"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

// A /v1/completions whose prompt is token ids and that asks for
// return_token_ids, aborted by a pause of its engine, continues on the
// other: one answer, token for token the uninterrupted one, its text,
// logprobs and usage joined. Without return_token_ids its abort passes
// through, saying why.
func TestProxyResumesAbortedCompletions(t *testing.T) {
	const n, tokens = 4, 120
	f, err := fakepolicy.New(2, rand.NewPCG(1, 2), fakepolicy.Options{Engine: fakepolicy.EngineVLLM, TokensPerSecond: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ts := newTestServer(t, Config{Proxy: proxy.Options{Resume: true, Retries: 2}})
	// Policy 1 joins once every request runs on policy 0.
	want(t, ts.do(t, "PUT", "/policies", `{"policies":[{"url":"`+f.URL(0)+`","index":0,"engine":"vllm","version":3,"capacity":8}]}`), http.StatusOK, nil)
	url := newHTTPServer(t, ts)

	type result struct {
		status int
		header http.Header
		ans    completionAnswer
		err    error
	}
	results := make([]result, n+1)
	prompts := make([][]int64, n)
	var wg sync.WaitGroup
	send := func(i int, body []byte) {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			results[i].err = err
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		checkSpec(t, req, res.StatusCode, res.Header, b)
		results[i].status, results[i].header = res.StatusCode, res.Header
		results[i].err = json.Unmarshal(b, &results[i].ans)
	}
	for i := range n {
		prompts[i] = []int64{int64(i), 3, 5}
		body, _ := json.Marshal(map[string]any{"model": fakepolicy.ModelName, "prompt": prompts[i], "max_tokens": tokens,
			"return_token_ids": true, "logprobs": 1, "temperature": 0})
		wg.Go(func() { send(i, body) })
	}
	wg.Go(func() { // a text prompt: not resumable
		send(n, []byte(`{"model":"fake-policy","prompt":"hello there","max_tokens":120,"return_token_ids":true}`))
	})
	poll.Until(t, "every request running on policy 0", func() bool { return f.Policy(0).Load() == n+1 })
	want(t, ts.do(t, "POST", "/policies", `{"url":"`+f.URL(1)+`","index":1,"engine":"vllm","version":4,"capacity":8}`), http.StatusCreated, nil)
	// A few tokens generated: a generation of policy 0's own has had
	// five.
	res, err := http.Post(f.URL(0)+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"x","stream":true,"max_tokens":1000}`))
	if err != nil {
		t.Fatal(err)
	}
	readEvents(t, res.Body, 5)
	abort, err := http.Post(f.URL(0)+"/pause?mode=abort", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	abort.Body.Close()
	res.Body.Close()
	wg.Wait()

	for i := range n {
		r := results[i]
		if r.err != nil || r.status != http.StatusOK || len(r.ans.Choices) != 1 {
			t.Fatalf("request %d: %d %v %+v", i, r.status, r.err, r.ans)
		}
		c := r.ans.Choices[0]
		wantIDs, wantLPs := fakepolicy.Continuation(prompts[i], tokens)
		if !slices.Equal(c.TokenIDs, wantIDs) || c.Text != fakepolicy.Detokenize(wantIDs) || c.FinishReason != "length" || !slices.Equal(c.PromptTokenIDs, prompts[i]) {
			t.Errorf("request %d: %d token_ids (first difference at %d), finish %q, prompt_token_ids %v; want the uninterrupted %d, length, %v",
				i, len(c.TokenIDs), firstDiff(c.TokenIDs, wantIDs), c.FinishReason, c.PromptTokenIDs, tokens, prompts[i])
		}
		at, offsets := 0, make([]int, tokens)
		for j, id := range wantIDs {
			offsets[j] = at
			at += len(fakepolicy.Detokenize([]int64{id}))
		}
		if !slices.Equal(c.Logprobs.TokenLogprobs, wantLPs) || !slices.Equal(c.Logprobs.TextOffset, offsets) || len(c.Logprobs.Tokens) != tokens {
			t.Errorf("request %d: logprobs %d, text_offset %v; want the uninterrupted ones, offsets %v", i, len(c.Logprobs.TokenLogprobs), c.Logprobs.TextOffset, offsets)
		}
		if u := r.ans.Usage; u.PromptTokens != len(prompts[i]) || u.CompletionTokens != tokens || u.TotalTokens != len(prompts[i])+tokens {
			t.Errorf("request %d: usage %+v; want %d + %d", i, u, len(prompts[i]), tokens)
		}
		segs := c.Segments
		if len(segs) != 2 || segs[0].PolicyIndex != 0 || segs[0].WeightVersion != "3" || segs[1].PolicyIndex != 1 || segs[1].WeightVersion != "4" ||
			segs[0].End == 0 || segs[0].End != segs[1].Start || segs[1].End != tokens || r.header.Get(proxy.HeaderResume) != "resumed" ||
			!strings.HasPrefix(r.header.Get(proxy.HeaderWeightVersions), "3:0-") {
			t.Errorf("request %d: segments %+v, headers %v; want version 3 on policy 0, then 4 on policy 1, resumed", i, segs, r.header)
		}
	}
	if r := results[n]; r.err != nil || r.status != http.StatusOK || len(r.ans.Choices) != 1 || r.ans.Choices[0].FinishReason != "abort" ||
		r.header.Get(proxy.HeaderResume) != "unavailable (text prompt)" {
		t.Errorf("text prompt: %d %v %+v, %s %q; want the abort as it is, unavailable (text prompt)", r.status, r.err, r.ans, proxy.HeaderResume, r.header.Get(proxy.HeaderResume))
	}
}

// readEvents reads n server-sent events of body.
func readEvents(tb testing.TB, body io.Reader, n int) {
	tb.Helper()
	sc := bufio.NewScanner(body)
	for events := 0; events < n; {
		if !sc.Scan() {
			tb.Fatalf("the stream ended after %d events: %v", events, sc.Err())
		}
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
		}
	}
}

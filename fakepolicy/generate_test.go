package fakepolicy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/internal/poll"
)

// A simulated engine aborts the generation of a client that disconnects,
// streamed or not, on every generate endpoint: its load drops at once
// instead of at the generation's end. A plain policy keeps the work, as a
// server that cannot cancel.
func TestDisconnectAbortsGeneration(t *testing.T) {
	for _, engine := range []string{EngineSGLang, EngineVLLM, ""} {
		f, err := New(1, rand.NewPCG(1, 2), Options{Engine: engine, TokensPerSecond: 10})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		p := f.Policy(0)
		for _, tt := range []struct{ path, body string }{
			{"/generate", `{"input_ids":[1,2],"sampling_params":{"max_new_tokens":10000}}`},
			{"/generate", `{"input_ids":[1,2],"stream":true,"sampling_params":{"max_new_tokens":10000}}`},
			{"/v1/completions", `{"model":"m","prompt":"hi","max_tokens":10000}`},
			{"/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":10000,"messages":[{"role":"user","content":"hi"}]}`},
		} {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			before := p.Works() // before the request can start: a fast start is not missed
			go func() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.URL(0)+tt.path, strings.NewReader(tt.body))
				res, err := http.DefaultClient.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
				done <- err
			}()
			poll.Until(t, "the generation running", func() bool { return p.Works() > before && p.Load() == 1 })
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("engine %q %s %s: %v; want the client's cancellation", engine, tt.path, tt.body, err)
			}
			if engine == "" {
				if n := p.Load(); n != 1 {
					t.Errorf("plain policy, %s: load %d after the client left; want 1 (it cannot cancel)", tt.path, n)
				}
				p.abortWork() // the next case starts from nothing
				continue
			}
			poll.Until(t, "engine "+engine+" "+tt.path+": the load back to 0 after the client left", func() bool { return p.Load() == 0 })
		}
	}
}

// The SGLang fake's meta_info.weight_version is the version its
// /model_info reports, before and after an update of the version.
func TestSGLangAnswerWeightVersion(t *testing.T) {
	f, err := New(1, rand.NewPCG(1, 2), Options{Engine: EngineSGLang, TokensPerSecond: 10000})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info := func() string {
		t.Helper()
		var v struct {
			WeightVersion string `json:"weight_version"`
		}
		getJSON(t, f.URL(0)+"/model_info", &v)
		return v.WeightVersion
	}
	answer := func(stream bool) string {
		t.Helper()
		body := `{"input_ids":[1],"sampling_params":{"max_new_tokens":3}}`
		if stream {
			body = `{"input_ids":[1],"stream":true,"sampling_params":{"max_new_tokens":3}}`
		}
		chunks := generate(t, f.URL(0), body)
		return chunks[len(chunks)-1].Meta.WeightVersion
	}
	for _, set := range []string{"", "step-7"} {
		if set != "" {
			post(t, f.URL(0)+"/update_weight_version", `{"new_version":"`+set+`"}`)
		}
		want := info()
		if set != "" && want != set {
			t.Fatalf("/model_info weight_version %q after the update to %q", want, set)
		}
		for _, stream := range []bool{false, true} {
			if got := answer(stream); got != want {
				t.Errorf("stream %v: meta_info.weight_version %q; /model_info says %q", stream, got, want)
			}
		}
	}
}

// With incremental streaming each chunk has only its new tokens, whose
// concatenation is the whole generation; the counts still count them all.
// By default each chunk has every token so far.
func TestSGLangStreamingModes(t *testing.T) {
	f, err := New(1, rand.NewPCG(1, 2), Options{Engine: EngineSGLang, TokensPerSecond: 10000})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prompt := []int64{4, 5, 6}
	wantIDs, wantLPs := Continuation(prompt, 6)
	body := `{"input_ids":[4,5,6],"stream":true,"return_logprob":true,"sampling_params":{"max_new_tokens":6}}`
	for _, incremental := range []bool{false, true} {
		f.Policy(0).SetIncrementalStreaming(incremental)
		chunks := generate(t, f.URL(0), body)
		if len(chunks) != 6 {
			t.Fatalf("incremental %v: %d chunks; want 6", incremental, len(chunks))
		}
		var ids []int64
		var text string
		var lps []float64
		for i, c := range chunks {
			if c.Meta.CompletionTokens != i+1 || c.Meta.LogprobsLength != i+1 {
				t.Errorf("incremental %v, chunk %d: completion_tokens %d, output_token_logprobs_length %d; want %d",
					incremental, i, c.Meta.CompletionTokens, c.Meta.LogprobsLength, i+1)
			}
			if !incremental {
				ids, text, lps = nil, "", nil
			}
			ids = append(ids, c.OutputIDs...)
			text += c.Text
			for _, lp := range c.Meta.Logprobs {
				lps = append(lps, lp[0].(float64))
			}
		}
		if !slices.Equal(ids, wantIDs) || text != Detokenize(wantIDs) || !slices.Equal(lps, wantLPs) {
			t.Errorf("incremental %v: output_ids %v, text %q, logprobs %v; want %v, %q, %v", incremental, ids, text, lps, wantIDs, Detokenize(wantIDs), wantLPs)
		}
	}
}

// The SGLang fake's server info says how it streams, at /get_server_info
// and its newer name /server_info; an older fake (SetLegacy) has only the
// first, and SetNoServerInfo takes both away.
func TestSGLangServerInfoStreamForm(t *testing.T) {
	f, err := New(1, rand.NewPCG(1, 2), Options{Engine: EngineSGLang, TokensPerSecond: 10000})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	status := func(path string) (int, *bool) {
		t.Helper()
		res, err := http.Get(f.URL(0) + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var v struct {
			Incremental *bool `json:"incremental_streaming_output"`
		}
		_ = json.NewDecoder(res.Body).Decode(&v)
		return res.StatusCode, v.Incremental
	}
	body := `{"input_ids":[4,5,6],"stream":true,"sampling_params":{"max_new_tokens":3}}`
	for _, incremental := range []bool{false, true} {
		f.Policy(0).SetIncrementalStreaming(incremental)
		for _, path := range []string{"/server_info", "/get_server_info"} {
			if code, v := status(path); code != http.StatusOK || v == nil || *v != incremental {
				t.Errorf("incremental %v: GET %s: %d, incremental_streaming_output %v", incremental, path, code, v)
			}
		}
		// The chunks have the form the info says: the second one has one
		// output id when incremental, two when cumulative.
		chunks := generate(t, f.URL(0), body)
		if want := map[bool]int{true: 1, false: 2}[incremental]; len(chunks) < 2 || len(chunks[1].OutputIDs) != want {
			t.Errorf("incremental %v: chunks %+v; want %d output ids in the second", incremental, chunks, want)
		}
	}
	f.Policy(0).SetLegacy(true)
	if code, _ := status("/server_info"); code != http.StatusNotFound {
		t.Errorf("legacy: GET /server_info: %d; want 404", code)
	}
	if code, v := status("/get_server_info"); code != http.StatusOK || v == nil {
		t.Errorf("legacy: GET /get_server_info: %d, %v; want 200 with the flag", code, v)
	}
	f.Policy(0).SetNoServerInfo(true)
	for _, path := range []string{"/server_info", "/get_server_info"} {
		if code, _ := status(path); code != http.StatusNotFound {
			t.Errorf("no server info: GET %s: %d; want 404", path, code)
		}
	}
}

// DropGenerations ends a stream in the middle, as a dying engine does:
// no finish reason, no [DONE], the connection cut.
func TestDropGenerations(t *testing.T) {
	f, err := New(1, rand.NewPCG(1, 2), Options{Engine: EngineSGLang, TokensPerSecond: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := http.Post(f.URL(0)+"/generate", "application/json", strings.NewReader(`{"input_ids":[1],"stream":true,"sampling_params":{"max_new_tokens":10000}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "data: {") {
		t.Fatalf("first line %q, %v; want a chunk", sc.Text(), sc.Err())
	}
	f.Policy(0).DropGenerations()
	var last string
	for sc.Scan() {
		if sc.Text() != "" {
			last = sc.Text()
		}
	}
	if sc.Err() == nil || strings.Contains(last, "[DONE]") || strings.Contains(last, `"finish_reason":{`) {
		t.Errorf("stream after the drop: last line %q, error %v; want a cut connection before any finish", last, sc.Err())
	}
	if n := f.Policy(0).Load(); n != 0 {
		t.Errorf("load %d after the drop; want 0", n)
	}
}

// nativeChunk is what these tests read of a native /generate answer or
// chunk.
type nativeChunk struct {
	Text      string  `json:"text"`
	OutputIDs []int64 `json:"output_ids"`
	Meta      struct {
		CompletionTokens int      `json:"completion_tokens"`
		LogprobsLength   int      `json:"output_token_logprobs_length"`
		Logprobs         [][3]any `json:"output_token_logprobs"`
		WeightVersion    string   `json:"weight_version"`
	} `json:"meta_info"`
}

// generate posts a native /generate and returns its answer, or its
// stream's chunks.
func generate(tb testing.TB, url, body string) []nativeChunk {
	tb.Helper()
	res, err := http.Post(url+"/generate", "application/json", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		tb.Fatalf("POST /generate %s: %d", body, res.StatusCode)
	}
	var out []nativeChunk
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		var c nativeChunk
		if err := json.NewDecoder(res.Body).Decode(&c); err != nil {
			tb.Fatal(err)
		}
		return append(out, c)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c nativeChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			tb.Fatalf("chunk %q: %v", data, err)
		}
		out = append(out, c)
	}
	return out
}

func getJSON(tb testing.TB, url string, v any) {
	tb.Helper()
	res, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
}

// /v1/completions with a prompt of token ids and return_token_ids answers
// as vLLM does: the deterministic tokens in token_ids, the prompt's in
// prompt_token_ids, their text, and with logprobs the OpenAI lists.
func TestCompletionTokenIDs(t *testing.T) {
	f, err := New(1, rand.NewPCG(1, 2), Options{Engine: EngineVLLM, TokensPerSecond: 10000})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := http.Post(f.URL(0)+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","prompt":[4,5],"max_tokens":3,"return_token_ids":true,"logprobs":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var ans struct {
		Choices []struct {
			Text           string  `json:"text"`
			TokenIDs       []int64 `json:"token_ids"`
			PromptTokenIDs []int64 `json:"prompt_token_ids"`
			Logprobs       struct {
				Tokens        []string  `json:"tokens"`
				TokenLogprobs []float64 `json:"token_logprobs"`
				TextOffset    []int     `json:"text_offset"`
			} `json:"logprobs"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(res.Body).Decode(&ans); err != nil || len(ans.Choices) != 1 {
		t.Fatalf("answer %+v, %v", ans, err)
	}
	c := ans.Choices[0]
	ids, lps := Continuation([]int64{4, 5}, 3)
	first := Detokenize(ids[:1])
	if !slices.Equal(c.TokenIDs, ids) || !slices.Equal(c.PromptTokenIDs, []int64{4, 5}) || c.Text != Detokenize(ids) || ans.Usage.PromptTokens != 2 ||
		!slices.Equal(c.Logprobs.TokenLogprobs, lps) || !slices.Equal(c.Logprobs.Tokens, []string{first, Detokenize(ids[1:2]), Detokenize(ids[2:])}) ||
		!slices.Equal(c.Logprobs.TextOffset, []int{0, len(first), len(first) + len(Detokenize(ids[1:2]))}) {
		t.Errorf("choice %+v, usage %+v; want token_ids %v, prompt_token_ids [4 5], text %q, logprobs %v", c, ans.Usage, ids, Detokenize(ids), lps)
	}
}

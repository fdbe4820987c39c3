package fakepolicy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The simulated policies also serve the generate endpoints an inference
// server offers, so that proxy mode carries real-looking traffic in the
// demo and the benchmarks:
//
//   - POST /v1/completions and POST /v1/chat/completions in the OpenAI
//     format that vLLM and SGLang serve: a "text_completion" or
//     "chat.completion" object, or with "stream": true server-sent events
//     of "text_completion" / "chat.completion.chunk" objects ending with
//     "data: [DONE]" (OpenAI API reference, "The chat completion chunk
//     object"; vLLM vllm/entrypoints/openai/serving_chat.py).
//   - POST /generate in SGLang's native format: {"text", "meta_info":
//     {"id", "finish_reason": {"type": "length"}, "completion_tokens",
//     "weight_version"}}, or with "stream": true events whose "text" is
//     cumulative, then "data: [DONE]" (sglang
//     python/sglang/srt/entrypoints/http_server.py, generate_request).
//   - GET /v1/models: one model, "fake-policy".
//
// A generation of n tokens (max_tokens, or sampling_params.max_new_tokens;
// default 16) keeps the policy busy for n / Options.TokensPerSecond, or,
// when that is 0, for a work item's random duration; tokens are sent
// evenly over it. The answer also carries this project's fields (index,
// busy_ms, load, prefix_hit) for the simulations that read them.

// ModelName is the model the simulated policies serve.
const ModelName = "fake-policy"

// genRequest is what the simulated server reads of a generate request.
type genRequest struct {
	Stream         bool   `json:"stream"`
	MaxTokens      *int   `json:"max_tokens"`
	SessionID      string `json:"session_id"`
	SamplingParams struct {
		MaxNewTokens *int `json:"max_new_tokens"`
	} `json:"sampling_params"`
	// SGLang's GenerateReqInput (python/sglang/srt/managers/io_struct.py,
	// commit 001067fffe33): the prompt as token ids or text, and whether
	// to return logprobs.
	InputIDs      json.RawMessage `json:"input_ids"`
	Text          json.RawMessage `json:"text"`
	ReturnLogprob bool            `json:"return_logprob"`
	// vLLM's CompletionRequest (vllm/entrypoints/openai/completion/
	// protocol.py): the prompt as text or token ids, logprobs (how many
	// top logprobs; any asks for them) and return_token_ids.
	Prompt         json.RawMessage `json:"prompt"`
	Logprobs       *int            `json:"logprobs"`
	ReturnTokenIDs bool            `json:"return_token_ids"`
	// The messages of a chat completion, for the KV block cache.
	Messages []chatMessage `json:"messages"`
}

func (g genRequest) tokens() int {
	switch {
	case g.MaxTokens != nil:
		return max(*g.MaxTokens, 1)
	case g.SamplingParams.MaxNewTokens != nil:
		return max(*g.SamplingParams.MaxNewTokens, 1)
	}
	return 16
}

// kind is the wire format of one endpoint.
type kind int

const (
	kindCompletion kind = iota
	kindChat
	kindGenerate
)

func (p *Policy) serveCompletions(w http.ResponseWriter, r *http.Request) {
	p.generate(w, r, kindCompletion)
}
func (p *Policy) serveChat(w http.ResponseWriter, r *http.Request) { p.generate(w, r, kindChat) }

func (p *Policy) serveModels(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{
		map[string]any{"id": ModelName, "object": "model", "created": 0, "owned_by": "policyrouter"},
	}})
}

// generate simulates one generation in the format of k.
func (p *Policy) generate(w http.ResponseWriter, r *http.Request, k kind) {
	var req genRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil && len(body) > 0 {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": "invalid JSON body: " + err.Error(), "type": "BadRequestError", "code": 400}})
		return
	}
	n := req.tokens()
	session := req.SessionID
	if s := r.URL.Query().Get("session"); s != "" {
		session = s
	}
	if !p.gate(r) { // paused: it starts at the resume
		return
	}
	var prompt, output []int64
	var logprobs []float64
	switch k {
	case kindGenerate:
		prompt = promptTokens(req.InputIDs, req.Text)
	case kindCompletion:
		prompt = promptTokens(req.Prompt, req.Prompt)
	default:
		if p.blocks.blocks != nil {
			prompt = chatTokens(req.Messages)
		}
	}
	if k != kindChat {
		output, logprobs = Continuation(prompt, n)
	}
	// The prefill comes first (blockcache.go): a request waiting for it,
	// or in it, is not yet in the load the engine reports.
	cached, ok := p.blocks.run(p, r, prompt, output)
	if !ok {
		return
	}
	d, hit := p.prefix.generation(session, p.genDuration(n))
	abort := p.nextAbort()
	item, end := p.startWork(d)
	if p.fleet.opts.Engine == EngineSGLang || p.fleet.opts.Engine == EngineVLLM {
		// A disconnected client's request is aborted (SGLang's
		// ResponseEmitter and its streams' abort task,
		// tokenizer_manager_components/response_emitter.py, commit
		// 5bf23cf6bf99; vLLM's serving endpoints' with_cancellation).
		defer func() {
			if r.Context().Err() != nil {
				p.cancelWork(item)
			}
		}()
	}
	id := fmt.Sprintf("gen-%d-%d", p.index, p.works.Load())
	g := &generation{p: p, k: k, id: id, n: n, busy: d, hit: hit, cached: cached}
	switch k {
	case kindGenerate:
		g.prompt, g.ids, g.logprobs = prompt, output, logprobs
		g.returnLogprob = req.ReturnLogprob
		g.incremental = req.Stream && p.engine.incremental.Load()
	case kindCompletion:
		g.prompt, g.ids, g.logprobs = prompt, output, logprobs
		g.returnLogprob, g.returnTokenIDs = req.Logprobs != nil, req.ReturnTokenIDs
	}
	if !req.Stream {
		start := time.Now()
		switch p.waitEnd(r, end, abort.done) {
		case genAborted:
			if abort.drop {
				panic(http.ErrAbortHandler) // the engine died: no answer
			}
			g.aborted = true
			g.n = min(n, int(time.Since(start)*time.Duration(n)/max(d, 1)))
		case genGone:
			if r.Context().Err() == nil {
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "shutting down"})
			}
			return
		}
		writeJSON(w, http.StatusOK, g.final())
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	step := d / time.Duration(n)
	for i := 1; i <= n; i++ {
		outcome := p.waitThawed(r, abort.done)
		if outcome == genDone {
			outcome = p.waitGen(r, step, abort.done)
		}
		switch outcome {
		case genGone:
			return
		case genAborted:
			if abort.drop {
				panic(http.ErrAbortHandler) // the engine died mid-stream
			}
			g.aborted, g.n = true, i
		}
		b, _ := json.Marshal(g.event(i))
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
		if g.aborted {
			break
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// Outcomes of waitGen.
const (
	genDone    = iota // the time passed
	genAborted        // an abort pause ended the generation
	genGone           // the client left, or the fleet closed
)

// waitGen waits for d, as wait does, or until abort is closed.
func (p *Policy) waitGen(r *http.Request, d time.Duration, abort <-chan struct{}) int {
	select {
	case <-abort:
		return genAborted
	default:
	}
	if d <= 0 {
		return genDone
	}
	t := time.NewTimer(d)
	defer t.Stop()
	return waitUntil(p, r, t.C, abort)
}

// waitUntil waits for done, or until abort is closed, the client leaves
// or the fleet closes, and says which.
func waitUntil[T any](p *Policy, r *http.Request, done <-chan T, abort <-chan struct{}) int {
	select {
	case <-done:
		return genDone
	case <-abort:
		return genAborted
	case <-r.Context().Done():
	case <-p.fleet.closed:
	}
	return genGone
}

// genDuration is how long n tokens take.
func (p *Policy) genDuration(n int) time.Duration {
	if tps := p.fleet.opts.TokensPerSecond; tps > 0 {
		return time.Duration(float64(n) / tps * float64(time.Second))
	}
	return p.fleet.workDuration()
}

// generation renders one simulated generation.
type generation struct {
	p    *Policy
	k    kind
	id   string
	n    int // tokens: all of them, or those before an abort
	busy time.Duration
	hit  bool
	// cached is how many prompt tokens the KV block cache held.
	cached int
	// aborted: an abort pause ended it after n tokens.
	aborted bool
	// prompt, ids and logprobs are a native generation's prompt tokens and
	// the tokens it generates (tokens.go); returnLogprob asks for them.
	prompt         []int64
	ids            []int64
	logprobs       []float64
	returnLogprob  bool
	returnTokenIDs bool
	// incremental streams each chunk's new tokens only
	// (SetIncrementalStreaming); sent is how many went out before.
	incremental bool
	sent        int
}

// text is the text of tokens from to to: of the tokens generated
// (Detokenize), or " tok<i>" for each position when there are none (chat).
func (g *generation) text(from, to int) string {
	if g.ids != nil {
		return Detokenize(g.ids[from:to])
	}
	var b strings.Builder
	for t := from; t < to; t++ {
		b.WriteString(" tok")
		b.WriteString(strconv.Itoa(t))
	}
	return b.String()
}

// finish is the OpenAI finish_reason after token i: "length" at the end,
// "abort" when an abort pause ended it (SGLang's and vLLM's OpenAI servers
// report an aborted request so).
func (g *generation) finish(i int) any {
	switch {
	case i < g.n:
		return nil
	case g.aborted:
		return "abort"
	}
	return "length"
}

// event is the streamed event after token i (1-based).
func (g *generation) event(i int) map[string]any {
	switch g.k {
	case kindChat:
		return map[string]any{"id": g.id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": ModelName,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": g.text(i-1, i)}, "finish_reason": g.finish(i)}}}
	case kindCompletion:
		return map[string]any{"id": g.id, "object": "text_completion", "created": time.Now().Unix(), "model": ModelName,
			"choices": []any{map[string]any{"index": 0, "text": g.text(i-1, i), "finish_reason": g.finish(i)}}}
	}
	return g.native(i)
}

// native is SGLang's /generate answer after token i: cumulative text,
// output_ids and logprobs, as SGLang streams them by default and as its
// final answer has them; with --incremental-streaming-output a streamed
// chunk has only the tokens since the previous chunk in text, output_ids
// and the output logprob lists, while completion_tokens and
// output_token_logprobs_length still count them all (output_processor.py,
// _build_out_dict_str, commit 29ff63a5fbf7; logprob_ops.py
// slice_streaming_output_meta_info, commit 229224a3f405). An abort ends
// with FINISH_ABORT's {"type": "abort", "message", "status_code",
// "err_type"} (schedule_batch.py).
func (g *generation) native(i int) map[string]any {
	from := 0
	if g.incremental && g.k == kindGenerate {
		from, g.sent = g.sent, i
	}
	meta := map[string]any{"id": g.id, "prompt_tokens": len(g.prompt), "completion_tokens": i, "cached_tokens": g.cached,
		"weight_version": g.p.nativeVersion(), "finish_reason": nil}
	switch {
	case i == g.n && g.aborted:
		meta["finish_reason"] = map[string]any{"type": "abort", "message": "Abort in running batch.", "status_code": nil, "err_type": nil}
	case i == g.n:
		meta["finish_reason"] = map[string]any{"type": "length", "length": g.n}
	}
	if g.returnLogprob {
		lps := make([]any, 0, i-from)
		for j := from; j < i; j++ {
			lps = append(lps, []any{g.logprobs[j], g.ids[j], nil})
		}
		meta["output_token_logprobs"] = lps
		meta["output_token_logprobs_length"] = i
		meta["input_token_logprobs"] = []any{}
	}
	return map[string]any{"text": Detokenize(g.ids[from:i]), "output_ids": g.ids[from:i], "meta_info": meta, "index": g.p.index,
		"busy_ms": ms(g.busy), "load": g.p.Load(), "prefix_hit": g.hit}
}

// nativeVersion is the weight_version of a native answer: the simulated
// engine's version string, or the /idle version of a plain policy.
func (p *Policy) nativeVersion() string {
	if p.fleet.opts.Engine == EngineSGLang || p.fleet.opts.Engine == EngineVLLM {
		return p.WeightVersion()
	}
	return strconv.FormatInt(p.version.Load(), 10)
}

// final is the whole answer of a request that did not stream.
func (g *generation) final() map[string]any {
	usage := map[string]any{"prompt_tokens": 0, "completion_tokens": g.n, "total_tokens": g.n}
	if g.p.fleet.opts.PromptTokensDetails {
		// vLLM's UsageInfo.prompt_tokens_details (blockcache.go).
		usage["prompt_tokens_details"] = map[string]any{"cached_tokens": g.cached}
	}
	switch g.k {
	case kindChat:
		return map[string]any{"id": g.id, "object": "chat.completion", "created": time.Now().Unix(), "model": ModelName, "usage": usage,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": g.text(0, g.n)}, "finish_reason": g.finish(g.n)}}}
	case kindCompletion:
		usage["prompt_tokens"], usage["total_tokens"] = len(g.prompt), len(g.prompt)+g.n
		return map[string]any{"id": g.id, "object": "text_completion", "created": time.Now().Unix(), "model": ModelName, "usage": usage,
			"choices": []any{g.completionChoice()}}
	}
	return g.native(g.n)
}

// completionChoice is the choice of a /v1/completions answer, as vLLM
// builds it (vllm/entrypoints/openai/completion/serving.py
// request_output_to_completion_response and _create_completion_logprobs,
// commit 030ea52effcb): with return_token_ids, prompt_token_ids and the
// output's token_ids; with logprobs, tokens, token_logprobs, top_logprobs
// and text_offset (in characters, from 0).
func (g *generation) completionChoice() map[string]any {
	choice := map[string]any{"index": 0, "text": g.text(0, g.n), "finish_reason": g.finish(g.n), "stop_reason": nil}
	if g.returnTokenIDs {
		choice["prompt_token_ids"], choice["token_ids"] = g.prompt, g.ids[:g.n]
	}
	if g.returnLogprob {
		tokens, offsets, top := make([]string, g.n), make([]int, g.n), make([]map[string]float64, g.n)
		at := 0
		for i := range g.n {
			tokens[i], offsets[i] = Detokenize(g.ids[i:i+1]), at
			top[i] = map[string]float64{tokens[i]: g.logprobs[i]}
			at += len(tokens[i]) // ASCII: characters are bytes
		}
		choice["logprobs"] = map[string]any{"tokens": tokens, "token_logprobs": g.logprobs[:g.n], "top_logprobs": top, "text_offset": offsets}
	}
	return choice
}

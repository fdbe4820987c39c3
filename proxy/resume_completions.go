package proxy

import (
	"encoding/json"
	"net/http"
	"slices"
	"unicode/utf8"

	"github.com/policyrouter/policyrouter/routing"
)

// Resuming a non-streaming POST /v1/completions. It can be exact when the
// prompt is token ids and the answer returns the output's token ids, which
// vLLM does with "return_token_ids": true (vllm-project/vllm
// vllm/entrypoints/openai/completion/protocol.py CompletionRequest, and
// serving.py request_output_to_completion_response, commit 030ea52effcb:
// choices[].token_ids and prompt_token_ids): the continuation's prompt is
// the prompt's ids + the tokens so far, as for /generate, and its text is
// decoded by the engine with those tokens before it. An aborted request
// ends with finish_reason "abort" (vllm/v1/engine/__init__.py
// FINISH_REASON_STRINGS). A request without return_token_ids, with a text
// prompt, echo, n > 1 or constrained decoding, and every stream (whose
// chunks carry text deltas, and token ids only with return_token_ids), is
// not resumed: the abort passes through, with X-Resume: unavailable (why).
//
// The merged answer is the last answer's, with choices[0]'s text,
// token_ids and logprobs (tokens, token_logprobs, top_logprobs, and
// text_offset counted on from the text before) of every segment joined,
// prompt_token_ids the first's, usage counted over all, and the segments
// in choices[0].segments.

// vllmDefaultMaxTokens is CompletionRequest.max_tokens' default.
const vllmDefaultMaxTokens = 16

// completionState is what resuming a /v1/completions adds to its
// resumeState.
type completionState struct {
	promptIDs    json.RawMessage // the first answer's prompt_token_ids
	promptTokens json.RawMessage // and its usage.prompt_tokens
	logprobs     *completionLogprobs
	last         map[string]json.RawMessage // the last answer
	choice       map[string]json.RawMessage // and its choices[0]
}

// completionLogprobs is an OpenAI completion choice's logprobs.
type completionLogprobs struct {
	Tokens        []json.RawMessage `json:"tokens"`
	TokenLogprobs []json.RawMessage `json:"token_logprobs"`
	TopLogprobs   []json.RawMessage `json:"top_logprobs"`
	TextOffset    []int             `json:"text_offset"`
}

// parseResumableCompletion reads a CompletionRequest; it returns why the
// request cannot be resumed, or its state.
func parseResumableCompletion(f *fields) (*resumeState, string) {
	// Most requests are not resumable for a reason that two fields tell
	// (a stream, a text prompt): only the others are decoded whole, which
	// costs several times more.
	if why := completionHead(f); why != "" {
		return nil, why
	}
	body := f.raw
	rs := &resumeState{completion: &completionState{}}
	if json.Unmarshal(body, &rs.req) != nil || rs.req == nil {
		return nil, "not a JSON object"
	}
	var p struct {
		Stream         bool            `json:"stream"`
		Echo           bool            `json:"echo"`
		N              int             `json:"n"`
		BestOf         int             `json:"best_of"`
		ReturnTokenIDs bool            `json:"return_token_ids"`
		MaxTokens      *int            `json:"max_tokens"`
		MinTokens      int             `json:"min_tokens"`
		Suffix         json.RawMessage `json:"suffix"`
	}
	if json.Unmarshal(body, &p) != nil {
		return nil, "fields not understood"
	}
	switch {
	case p.Stream:
		return nil, "streaming"
	case isNull(rs.req["prompt"]):
		return nil, "no prompt"
	case json.Unmarshal(rs.req["prompt"], &rs.prompt) != nil:
		var text string
		if json.Unmarshal(rs.req["prompt"], &text) == nil {
			return nil, "text prompt"
		}
		return nil, "batch request"
	case !p.ReturnTokenIDs:
		return nil, "no return_token_ids"
	case p.Echo:
		return nil, "echo"
	case p.N > 1 || p.BestOf > 1:
		return nil, "n > 1"
	case !isNull(p.Suffix):
		return nil, "suffix"
	}
	for _, k := range []string{"response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar"} {
		if !isNull(rs.req[k]) {
			return nil, "constrained decoding"
		}
	}
	rs.minNew = p.MinTokens
	rs.maxNew = tokenBudget(rs.req["max_tokens"], p.MaxTokens, vllmDefaultMaxTokens)
	return rs, ""
}

// addCompletion records a /v1/completions answer (raw) as a segment
// when it is one to resume: aborted, or a continuation's. ok is false
// when it passes through as it is instead. OpenAI answers name no weight
// version: the segment's is the router's at dispatch.
func (rs *resumeState) addCompletion(res *http.Response, d routing.Decision, raw []byte) (aborted, ok bool) {
	var ans map[string]json.RawMessage
	var choices []map[string]json.RawMessage
	if json.Unmarshal(raw, &ans) != nil || json.Unmarshal(ans["choices"], &choices) != nil || len(choices) != 1 {
		return false, false
	}
	choice := choices[0]
	var finish string
	_ = json.Unmarshal(choice["finish_reason"], &finish)
	aborted = finish == "abort"
	if !aborted && len(rs.segs) == 0 {
		return false, false
	}
	var ids []int64
	if json.Unmarshal(choice["token_ids"], &ids) != nil || ids == nil {
		rs.noIDs(res, "token_ids")
		return false, false
	}
	cs := rs.completion
	rs.addSegment(d, nil, nil, choice["finish_reason"], len(rs.ids), len(ids))
	var text string
	_ = json.Unmarshal(choice["text"], &text)
	at := utf8.RuneCountInString(rs.text.String()) // text_offset counts characters
	var lp *completionLogprobs
	if !isNull(choice["logprobs"]) && json.Unmarshal(choice["logprobs"], &lp) != nil {
		lp = nil
	}
	switch {
	case len(rs.segs) == 1:
		var usage struct {
			PromptTokens json.RawMessage `json:"prompt_tokens"`
		}
		_ = json.Unmarshal(ans["usage"], &usage)
		cs.promptIDs, cs.promptTokens, cs.logprobs = choice["prompt_token_ids"], usage.PromptTokens, lp
	case cs.logprobs != nil && lp != nil:
		cs.logprobs.Tokens = append(cs.logprobs.Tokens, lp.Tokens...)
		cs.logprobs.TokenLogprobs = append(cs.logprobs.TokenLogprobs, lp.TokenLogprobs...)
		cs.logprobs.TopLogprobs = append(cs.logprobs.TopLogprobs, lp.TopLogprobs...)
		for _, o := range lp.TextOffset {
			cs.logprobs.TextOffset = append(cs.logprobs.TextOffset, o+at)
		}
	default:
		cs.logprobs = nil // a segment without them: none for the whole
	}
	rs.ids = append(rs.ids, ids...)
	rs.text.WriteString(text)
	cs.last, cs.choice = ans, choice
	return aborted, true
}

// completionContinuation is the request that goes on from the tokens so
// far: prompt = the prompt's ids + them, max_tokens and min_tokens reduced
// by their number; prompt logprobs are the first answer's.
func (rs *resumeState) completionContinuation() []byte {
	req := clone(rs.req, 0)
	req["prompt"], _ = json.Marshal(append(slices.Clip(rs.prompt), rs.ids...))
	rs.setBounds(req, "max_tokens", "min_tokens")
	delete(req, "prompt_logprobs")
	b, _ := json.Marshal(req)
	return b
}

// mergedCompletion is the one answer of every segment.
func (rs *resumeState) mergedCompletion() []byte {
	cs := rs.completion
	out, choice := clone(cs.last, 0), clone(cs.choice, 2)
	choice["text"], _ = json.Marshal(rs.text.String())
	choice["token_ids"], _ = json.Marshal(rs.ids)
	if cs.promptIDs != nil {
		choice["prompt_token_ids"] = cs.promptIDs
	}
	if cs.logprobs != nil {
		choice["logprobs"], _ = json.Marshal(cs.logprobs)
	} else if _, ok := choice["logprobs"]; ok {
		choice["logprobs"] = json.RawMessage(`null`)
	}
	choice["segments"], _ = json.Marshal(rs.segs)
	choice["weight_versions"], _ = json.Marshal(rs.spans)
	out["choices"], _ = json.Marshal([]map[string]json.RawMessage{choice})
	var usage map[string]json.RawMessage
	if json.Unmarshal(out["usage"], &usage) == nil && usage != nil {
		var prompt int
		_ = json.Unmarshal(cs.promptTokens, &prompt)
		usage["prompt_tokens"], _ = json.Marshal(prompt)
		usage["completion_tokens"], _ = json.Marshal(len(rs.ids))
		usage["total_tokens"], _ = json.Marshal(prompt + len(rs.ids))
		out["usage"], _ = json.Marshal(usage)
	}
	b, _ := json.Marshal(out)
	return b
}

// completionHead tells from the top-level "stream" and "prompt" of a
// completion request whether it is a stream or has a text prompt (the
// reason, else ""), as decoding the body into struct{ Stream bool;
// Prompt json.RawMessage } would: keys matched without regard to case,
// the last one winning, and nothing told when the body is not a JSON
// object or "stream" is not a boolean or null. It scans the top-level
// keys instead of decoding; keys it cannot read by bytes go to
// encoding/json.
func completionHead(f *fields) string {
	switch {
	case !f.valid:
		return ""
	case !f.scanned:
		return completionHeadJSON(f.raw)
	case f.streamFoldBad:
		return ""
	case string(f.streamFold) == "true":
		return "streaming"
	case len(f.promptFold) > 0 && f.promptFold[0] == '"':
		return "text prompt"
	}
	return ""
}

// completionHeadJSON is completionHead by encoding/json alone.
func completionHeadJSON(body []byte) string {
	var head struct {
		Stream bool            `json:"stream"`
		Prompt json.RawMessage `json:"prompt"`
	}
	if json.Unmarshal(body, &head) == nil {
		switch {
		case head.Stream:
			return "streaming"
		case len(head.Prompt) > 0 && head.Prompt[0] == '"':
			return "text prompt"
		}
	}
	return ""
}

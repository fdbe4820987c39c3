package proxy

import (
	"bytes"
	"net/http"
	"slices"
	"strconv"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/prefix"
)

// Prefix-cache affinity (--prefix-affinity, X-Prefix-Affinity): the
// proxy hashes each request's prompt into blocks (package prefix) before
// its decision, outside the routing lock; the Leaser scores the policies
// by the blocks they hold and records the attempt's as pending; Release
// confirms them when the policy answered whole, with the prompt tokens
// the engine said it had cached (the key "cached_tokens": SGLang's
// meta_info.cached_tokens, vLLM's usage.prompt_tokens_details.cached_tokens,
// the latter only with --enable-prompt-tokens-details), or drops them.
//
// The prompt, by route: /generate's input_ids (or its text), a
// /v1/completions prompt of token ids (or a string), a
// /v1/chat/completions's messages, message by message. A batch, or a
// prompt in another form, is routed without affinity.

// Headers of prefix-cache affinity.
const (
	// HeaderPrefixAffinity opts a request out (0) of prefix-cache
	// affinity, or in (1, the default under --prefix-affinity).
	HeaderPrefixAffinity = "X-Prefix-Affinity"
	// HeaderPrefixMatch is what the router expected cached on the chosen
	// policy, from blocks an answer confirmed: prompt tokens, or bytes of
	// a text prompt (of the chat encoding, for messages).
	HeaderPrefixMatch = "X-Prefix-Match"
	// HeaderPrefixOutcome is the scorer's outcome of the decision.
	HeaderPrefixOutcome = "X-Prefix-Outcome"
)

var canonicalPrefixAffinity = http.CanonicalHeaderKey(HeaderPrefixAffinity)

// prompt is a request's prompt in blocks.
type prompt struct {
	hashes []prefix.Hash
	kind   prefix.Kind
	msgs   []prefix.Message // a chat's, to count its matched bytes
	// capped: the engine's count of cached tokens says less than it holds
	// (cacheReportCapped), and is not read.
	capped bool
}

// cacheReportCapped reports whether the engine's count of a request's
// cached prompt tokens is capped below what its cache holds, so that it
// must not cut the policy's index back: SGLang matches at most
// logprob_start_len tokens of a request that asks for input logprobs from
// there (return_logprob with logprob_start_len >= 0;
// Req._compute_max_prefix_len, python/sglang/srt/managers/
// schedule_batch.py, v0.5.18), and vLLM does not read its prefix cache
// for a request that asks for prompt_logprobs (SamplingParams:
// skip_reading_prefix_cache = prompt_logprobs is not None,
// vllm/sampling_params.py). A body the scan could not read is taken as
// capped.
func cacheReportCapped(f *fields) bool {
	if !f.scanned {
		return true
	}
	start := -1 // SGLang's default: output logprobs only
	inputLogprobs := string(f.returnLogprob) == "true" && f.logprobStart != nil && intValue(&start, f.logprobStart) && start >= 0
	return inputLogprobs || !isNull(f.promptLogprobs)
}

// units is how many prompt tokens (bytes, for text and chat) blocks
// matched blocks hold.
func (pr *prompt) units(blocks int) int {
	switch pr.kind {
	case prefix.Tokens:
		return blocks * prefix.BlockTokens
	case prefix.Chat:
		return prefix.ChatBytes(pr.msgs, blocks)
	}
	return blocks * prefix.TextBlockBytes
}

// promptOf reads the prompt of a proxied request, nil when it has no
// full block or is in a form the proxy does not hash (or the scan could
// not read the body). ids, when not nil, are its token ids read already
// (resuming). The prompt is hashed through memo.
func promptOf(path string, f *fields, ids []int64, memo *prefix.Memo) *prompt {
	var text, list, msgs []byte
	if ids == nil {
		if !f.scanned {
			return nil
		}
		switch path {
		case engine.RouteGenerate:
			list, text = f.inputIDs, f.text
		case engine.RouteCompletions:
			list, text = f.prompt, f.prompt
		case engine.RouteChat:
			msgs = f.messages
		}
		if len(list) > 0 && list[0] == '[' {
			ids, _ = tokenIDs(list)
		}
	}
	pr := &prompt{}
	switch {
	case ids != nil:
		pr.kind, pr.hashes = prefix.Tokens, memo.TokenHashes(ids)
	case len(text) > 0 && text[0] == '"':
		t, ok := jsonString(text)
		if !ok {
			return nil
		}
		pr.kind, pr.hashes = prefix.Text, memo.TextHashes(t)
	case len(msgs) > 0 && msgs[0] == '[':
		ms, ok := chatMessages(msgs)
		if !ok {
			return nil
		}
		pr.msgs = ms
		pr.kind, pr.hashes = prefix.Chat, memo.ChatHashes(pr.msgs)
	}
	if len(pr.hashes) == 0 {
		return nil
	}
	pr.capped = cacheReportCapped(f)
	return pr
}

// The keys of the tokens an engine counted, in SGLang's meta_info and in
// OpenAI's usage (its prompt_tokens_details holds cached_tokens).
var (
	cachedKey     = []byte(`"cached_tokens":`)
	promptKey     = []byte(`"prompt_tokens":`)
	completionKey = []byte(`"completion_tokens":`)
)

// noteUsage reads the last counts of cached, prompt and completion tokens
// in b, an answer's bytes, into the attempt. A stream's chunks count
// cumulatively: the last one read says the whole.
func (a *attempt) noteUsage(b []byte) {
	if n, ok := lastCount(b, cachedKey); ok {
		a.cached, a.cachedKnown = n, true
	}
	if n, ok := lastCount(b, promptKey); ok {
		a.promptN = n
	}
	if n, ok := lastCount(b, completionKey); ok {
		a.complete = n
	}
}

// lastCount is the number after the last key in b, when one is there
// whole.
func lastCount(b, key []byte) (int, bool) {
	i := bytes.LastIndex(b, key)
	if i < 0 {
		return 0, false
	}
	j := skipSpace(b, i+len(key))
	k := j
	for k < len(b) && b[k] >= '0' && b[k] <= '9' {
		k++
	}
	if k == j || k == len(b) {
		return 0, false // no digits, or perhaps more in the next read
	}
	n, err := strconv.Atoi(string(b[j:k]))
	return n, err == nil
}

// promptFor is the prompt of a request under prefix-cache affinity, nil
// when affinity is off for it; a malformed X-Prefix-Affinity is a 422.
func (p *Proxy) promptFor(r *http.Request, f *fields, rs *resumeState) (*prompt, error) {
	on, err := onOff(r.Header, canonicalPrefixAffinity, HeaderPrefixAffinity, p.PrefixAffinity)
	if !on || err != nil {
		return nil, err
	}
	var ids []int64
	if rs != nil {
		ids = rs.prompt
	}
	return promptOf(r.URL.Path, f, ids, p.memo), nil
}

// noteOutput extends the attempt's blocks by the tokens the policy
// generated after the prompt's ids: the engine caches prompt + output,
// and the next turn of a conversation sends them back as the start of its
// prompt, so Release records them too.
func (a *attempt) noteOutput(promptIDs, output []int64) {
	pr := a.prompt
	if pr == nil || pr.kind != prefix.Tokens || len(output) == 0 || len(promptIDs) < len(pr.hashes)*prefix.BlockTokens {
		return
	}
	whole := len(pr.hashes) * prefix.BlockTokens
	tail := append(slices.Clip(promptIDs[whole:]), output...)
	a.chain = prefix.AppendTokenHashes(slices.Clip(pr.hashes), tail, 0)
}

// topLevelIDs is the list of token ids under a top-level key of a JSON
// answer, nil when there is none.
func topLevelIDs(b []byte, key string) []int64 {
	var raw []byte
	if !scanTopLevel(b, func(k, v []byte) {
		if string(k) == key {
			raw = v
		}
	}) || len(raw) == 0 || raw[0] != '[' {
		return nil
	}
	ids, _ := tokenIDs(raw)
	return ids
}

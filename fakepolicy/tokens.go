package fakepolicy

import (
	"encoding/json"
	"strconv"
	"strings"
)

// The simulated SGLang engine generates a deterministic token sequence:
// each next token is a function of every token before it (the prompt's
// input_ids, then the tokens generated so far), so that a generation
// continued on another policy from input_ids + the tokens it had yields
// the very tokens the uninterrupted one would have. That is what a proxy
// that resumes aborted generations is checked against (a real model with
// greedy sampling and the same weights behaves so too).
//
// The answers carry the fields of SGLang's /generate answer
// (sgl-project/sglang python/sglang/srt/managers/tokenizer_manager_components/
// output_processor.py, commit 7a464c40fc21: "text", "output_ids",
// "meta_info" with "id", "finish_reason", "prompt_tokens",
// "completion_tokens", "cached_tokens", "weight_version"; logprob_ops.py,
// commit 229224a3f405: with return_logprob, "output_token_logprobs" as
// [logprob, token_id, null] triples and "output_token_logprobs_length").

// vocabSize is the simulated model's vocabulary.
const vocabSize = 32000

// tokenHash is the state of the sequence so far (FNV-1a over the tokens).
type tokenHash uint64

func newTokenHash(prompt []int64) tokenHash {
	h := tokenHash(14695981039346656037)
	for _, t := range prompt {
		h = h.add(t)
	}
	return h
}

func (h tokenHash) add(t int64) tokenHash {
	return (h ^ tokenHash(uint64(t))) * 1099511628211
}

// next is the token and its logprob that follow the sequence h hashes.
func (h tokenHash) next() (int64, float64) {
	x := uint64(h)
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return int64(x % vocabSize), -float64((x>>32)%5000) / 1000
}

// Continuation returns the n tokens the simulated engine generates after
// prompt, and their logprobs.
func Continuation(prompt []int64, n int) ([]int64, []float64) {
	ids, lps := make([]int64, n), make([]float64, n)
	h := newTokenHash(prompt)
	for i := range n {
		ids[i], lps[i] = h.next()
		h = h.add(ids[i])
	}
	return ids, lps
}

// Detokenize is the simulated text of tokens: " tok<id>" each.
func Detokenize(ids []int64) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(" tok")
		b.WriteString(strconv.FormatInt(id, 10))
	}
	return b.String()
}

// promptTokens is a request's prompt as tokens: its input_ids when they
// are one flat list, else its text's words hashed to token ids.
func promptTokens(inputIDs, text json.RawMessage) []int64 {
	var ids []int64
	if len(inputIDs) > 0 && json.Unmarshal(inputIDs, &ids) == nil {
		return ids
	}
	var s string
	if len(text) > 0 && json.Unmarshal(text, &s) == nil {
		for _, w := range strings.Fields(s) { // stable, not a real tokenizer
			h := newTokenHash(nil)
			for i := range len(w) {
				h = h.add(int64(w[i]))
			}
			ids = append(ids, int64(uint64(h)%vocabSize))
		}
	}
	return ids
}

package fakepolicy

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// A blockCache simulates an engine's prefix cache of KV blocks, as SGLang's
// radix cache and vLLM's block pool keep one: a prompt's tokens in blocks
// of kvBlockTokens, each block named by the hash of every token up to its
// end, so that a block is reused only after the very same prefix. It is an
// LRU bounded by the engine's KV size (Options.KVTokens), the size the fake
// reports: SGLang's max_total_num_tokens (GET /v1/loads, and GET
// /get_server_info, which merges the scheduler's get_init_info into the
// server's arguments: sgl-project/sglang python/sglang/srt/managers/
// scheduler.py get_init_info, python/sglang/srt/entrypoints/http_server.py
// get_server_info, commit 9c0549b727fe); vLLM's num_gpu_blocks and
// block_size, the labels of its vllm:cache_config_info gauge
// (vllm-project/vllm vllm/v1/metrics/loggers.py log_metrics_info, commit
// 005a810bc40f).
//
// A request's prefill looks up its prompt's leading blocks (the cached
// tokens, reported as each engine does: SGLang's meta_info.cached_tokens,
// tokens.go; vLLM's usage.prompt_tokens_details.cached_tokens, only with
// Options.PromptTokensDetails, as vLLM's --enable-prompt-tokens-details:
// PromptTokenUsageInfo in vllm/entrypoints/openai/engine/protocol.py,
// commit d7e52523a55c), then holds every block of the prompt and of the
// tokens it generates, so that the next turn, which resends both, finds
// them. Prefills run one at a time, each taking Options.PrefillPerToken per
// uncached token. A weight update, a sleep, SGLang's /flush_cache and
// vLLM's /reset_prefix_cache empty it. A chat prompt is its messages'
// words tokenised as a text prompt is (tokens.go); the reply's blocks are
// not held, since the next turn sends it back as text.
type blockCache struct {
	blocks   *lru.Cache[tokenHash, struct{}] // nil: no cache simulated
	perToken time.Duration
	prefill  sync.Mutex // one prefill at a time

	cached, prompt, flushes atomic.Uint64
}

// kvBlockTokens is the simulated engines' block size: vLLM's default
// block_size, and the router's prefix.BlockTokens.
const kvBlockTokens = 16

// init sets the cache up for kvTokens tokens (none when 0).
func (c *blockCache) init(kvTokens int, perToken time.Duration) {
	c.perToken = perToken
	if n := kvTokens / kvBlockTokens; n > 0 {
		c.blocks, _ = lru.New[tokenHash, struct{}](n) // n > 0: no error
	}
}

// blockKeys returns the keys of the full blocks of tokens.
func blockKeys(tokens []int64) []tokenHash {
	keys := make([]tokenHash, 0, len(tokens)/kvBlockTokens)
	h := newTokenHash(nil)
	for i, t := range tokens {
		h = h.add(t)
		if (i+1)%kvBlockTokens == 0 {
			keys = append(keys, h)
		}
	}
	return keys
}

// run prefills prompt on policy p and holds the blocks of prompt +
// output: it returns how many of prompt's tokens were cached, after
// waiting PrefillPerToken for each of the others, one prefill at a time.
// It reports false when the request ended or the fleet closed during the
// wait.
func (c *blockCache) run(p *Policy, r *http.Request, prompt, output []int64) (int, bool) {
	if c.blocks == nil {
		return 0, true
	}
	if c.perToken > 0 {
		c.prefill.Lock()
		defer c.prefill.Unlock()
	}
	keys := blockKeys(prompt)
	hit := 0
	for hit < len(keys) && c.blocks.Contains(keys[hit]) {
		hit++
	}
	cached := hit * kvBlockTokens
	c.cached.Add(uint64(cached))
	c.prompt.Add(uint64(len(prompt)))
	all := keys
	if len(output) > 0 {
		all = blockKeys(append(prompt[:len(prompt):len(prompt)], output...))
	}
	// The first block last: the least recent blocks, evicted first, are
	// the ends of chains, as the engines evict leaves first.
	for i := len(all) - 1; i >= 0; i-- {
		c.blocks.Add(all[i], struct{}{})
	}
	if c.perToken > 0 && !p.wait(r, time.Duration(len(prompt)-cached)*c.perToken) {
		return cached, false
	}
	return cached, true
}

// flush empties the cache.
func (c *blockCache) flush() {
	if c.blocks != nil {
		c.blocks.Purge()
		c.flushes.Add(1)
	}
}

// BlockCacheStats counts a policy's (or a fleet's) prompt tokens and those
// of them its simulated KV cache held (Options.KVTokens).
type BlockCacheStats struct {
	CachedTokens uint64 `json:"cached_tokens"`
	PromptTokens uint64 `json:"prompt_tokens"`
	// Blocks is how many blocks are cached now; Flushes how many times
	// the cache was emptied.
	Blocks  int    `json:"blocks"`
	Flushes uint64 `json:"flushes"`
}

// BlockCacheStats returns the policy's KV block cache counters.
func (p *Policy) BlockCacheStats() BlockCacheStats {
	s := BlockCacheStats{CachedTokens: p.blocks.cached.Load(), PromptTokens: p.blocks.prompt.Load(), Flushes: p.blocks.flushes.Load()}
	if p.blocks.blocks != nil {
		s.Blocks = p.blocks.blocks.Len()
	}
	return s
}

// BlockCacheStats returns the sum of the policies' KV block cache
// counters.
func (f *Fleet) BlockCacheStats() BlockCacheStats {
	var s BlockCacheStats
	for _, p := range f.policies {
		ps := p.BlockCacheStats()
		s.CachedTokens += ps.CachedTokens
		s.PromptTokens += ps.PromptTokens
		s.Blocks += ps.Blocks
		s.Flushes += ps.Flushes
	}
	return s
}

// FlushCache empties the policy's KV block cache, as an engine's cache
// flush does.
func (p *Policy) FlushCache() { p.blocks.flush() }

// chatMessage is what the simulated server reads of a chat message.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// chatTokens tokenises chat messages as one text prompt: each message's
// role, then its content's words (a content that is not a string counts
// as its JSON).
func chatTokens(msgs []chatMessage) []int64 {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Role)
		b.WriteByte(' ')
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			b.WriteString(s)
		} else {
			b.Write(m.Content)
		}
		b.WriteByte('\n')
	}
	text, _ := json.Marshal(b.String())
	return promptTokens(nil, text)
}

// serveSGLangFlushCache answers POST /flush_cache as SGLang's flush_cache
// does (python/sglang/srt/entrypoints/http_server.py, commit 9c0549b727fe):
// 200 with a plain-text message.
func (p *Policy) serveSGLangFlushCache(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	p.FlushCache()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n"))
}

// serveVLLMResetPrefixCache answers POST /reset_prefix_cache as vLLM's
// dev-mode endpoint does: 200 without a body.
func (p *Policy) serveVLLMResetPrefixCache(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	p.FlushCache()
	w.WriteHeader(http.StatusOK)
}

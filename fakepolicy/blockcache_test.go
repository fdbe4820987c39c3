package fakepolicy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// ids returns n token ids from first on.
func ids(first, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(first + i)
	}
	return out
}

// postBody posts body to url and decodes the JSON answer into v.
func postBody(tb testing.TB, url, body string, v any) {
	tb.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			tb.Fatalf("POST %s: %v in %s", url, err, b)
		}
	}
}

// generateCached sends a native /generate of prompt and returns its
// meta_info.cached_tokens and output_ids.
func generateCached(tb testing.TB, url string, prompt []int64, n int) (int, []int64) {
	tb.Helper()
	body, _ := json.Marshal(map[string]any{"input_ids": prompt, "sampling_params": map[string]any{"max_new_tokens": n}})
	var ans struct {
		OutputIDs []int64 `json:"output_ids"`
		Meta      struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"meta_info"`
	}
	postBody(tb, url+"/generate", string(body), &ans)
	return ans.Meta.CachedTokens, ans.OutputIDs
}

func TestBlockCacheSGLang(t *testing.T) {
	f := newFleet(t, 1, Options{Engine: EngineSGLang, TokensPerSecond: 1e5, KVTokens: 64 * kvBlockTokens})
	url := f.URL(0)
	prompt := ids(100, 40) // 2 full blocks and 8 tokens
	steps := []struct {
		name   string
		prompt func() []int64
		before func()
		want   int
	}{
		{"first sight", func() []int64 { return prompt }, nil, 0},
		{"the same prompt", func() []int64 { return prompt }, nil, 32},
		{"the next turn: prompt, output and 10 new tokens", func() []int64 {
			_, out := generateCached(t, url, prompt, 20)
			return append(append(append([]int64{}, prompt...), out...), ids(9000, 10)...)
		}, nil, 48},
		{"another prompt", func() []int64 { return ids(5000, 40) }, nil, 0},
		{"after /flush_cache", func() []int64 { return prompt }, func() { postBody(t, url+"/flush_cache", "", nil) }, 0},
		{"after a weight update", func() []int64 { return prompt }, func() {
			postBody(t, url+"/update_weights_from_disk", `{"model_path": "m", "weight_version": "v2"}`, nil)
		}, 0},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		if got, _ := generateCached(t, url, s.prompt(), 20); got != s.want {
			t.Errorf("%s: cached_tokens %d, want %d", s.name, got, s.want)
		}
	}
	st := f.BlockCacheStats()
	if st.Flushes != 2 || st.CachedTokens != 32+48+32 || st.Blocks == 0 {
		t.Errorf("stats %+v: want 2 flushes and 112 cached tokens", st)
	}
	var loads struct {
		Loads []struct {
			MaxTotal int `json:"max_total_num_tokens"`
		} `json:"loads"`
	}
	_, body := do(t, http.DefaultClient, "GET", url+"/v1/loads")
	if err := json.Unmarshal([]byte(body), &loads); err != nil || loads.Loads[0].MaxTotal != 64*kvBlockTokens {
		t.Errorf("/v1/loads: %v %s", err, body)
	}
	var info map[string]any
	_, body = do(t, http.DefaultClient, "GET", url+"/get_server_info")
	if err := json.Unmarshal([]byte(body), &info); err != nil || info["max_total_num_tokens"] != float64(64*kvBlockTokens) {
		t.Errorf("/get_server_info: %v %s", err, body)
	}
}

// TestBlockCacheLRU: the cache holds KVTokens, and the blocks that go are
// the ends of chains, a prompt's first block last.
func TestBlockCacheLRU(t *testing.T) {
	f := newFleet(t, 1, Options{Engine: EngineSGLang, TokensPerSecond: 1e5, KVTokens: 4 * kvBlockTokens})
	url := f.URL(0)
	a, b := ids(0, 48), ids(7000, 48) // 3 blocks each with their 1-token output
	generateCached(t, url, a, 1)
	generateCached(t, url, b, 1)
	if got, _ := generateCached(t, url, a, 1); got != kvBlockTokens {
		t.Errorf("a after b: cached %d, want its first block only", got)
	}
	if got := f.Policy(0).BlockCacheStats().Blocks; got != 4 {
		t.Errorf("%d blocks held, want the 4 of KVTokens", got)
	}
}

func TestBlockCacheVLLM(t *testing.T) {
	for _, details := range []bool{false, true} {
		t.Run(fmt.Sprintf("details=%v", details), func(t *testing.T) {
			f := newFleet(t, 1, Options{Engine: EngineVLLM, TokensPerSecond: 1e5, KVTokens: 100 * kvBlockTokens, PromptTokensDetails: details})
			url := f.URL(0)
			prompt, _ := json.Marshal(map[string]any{"prompt": ids(1, 35), "max_tokens": 4})
			var ans map[string]any
			for range 2 {
				ans = nil
				postBody(t, url+"/v1/completions", string(prompt), &ans)
			}
			usage := ans["usage"].(map[string]any)
			d, ok := usage["prompt_tokens_details"].(map[string]any)
			if ok != details || details && d["cached_tokens"] != float64(32) {
				t.Errorf("usage %v: want prompt_tokens_details.cached_tokens 32 only with the option", usage)
			}
			chat := `{"messages": [{"role": "system", "content": "` + strings.Repeat("word ", 40) + `"}, {"role": "user", "content": "hi"}]}`
			postBody(t, url+"/v1/chat/completions", chat, nil)
			ans = nil
			postBody(t, url+"/v1/chat/completions", chat, &ans)
			if d, _ := ans["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any); details && d["cached_tokens"] != float64(32) {
				t.Errorf("chat usage %v: want 32 cached tokens (43 words)", ans["usage"])
			}
			_, metrics := do(t, http.DefaultClient, "GET", url+"/metrics")
			if !strings.Contains(metrics, `vllm:cache_config_info{block_size="16",enable_prefix_caching="True",engine="0",num_gpu_blocks="100"} 1.0`) {
				t.Errorf("/metrics has no cache_config_info of 100 blocks:\n%s", metrics)
			}
			postBody(t, url+"/reset_prefix_cache", "", nil)
			if st := f.BlockCacheStats(); st.Blocks != 0 || st.Flushes != 1 {
				t.Errorf("after /reset_prefix_cache: %+v", st)
			}
		})
	}
}

// TestBlockCacheOff: without KVTokens nothing is cached nor reported.
func TestBlockCacheOff(t *testing.T) {
	f := newFleet(t, 1, Options{Engine: EngineSGLang, TokensPerSecond: 1e5})
	url := f.URL(0)
	for range 2 {
		if got, _ := generateCached(t, url, ids(0, 64), 2); got != 0 {
			t.Errorf("cached_tokens %d without a cache", got)
		}
	}
	_, metrics := do(t, http.DefaultClient, "GET", url+"/v1/loads")
	if !strings.Contains(metrics, `"max_total_num_tokens":0`) {
		t.Errorf("/v1/loads reports a KV size without one: %s", metrics)
	}
}

// TestPrefillGivesUp: a prefill waits for its uncached tokens unless the
// request ends first.
func TestPrefillGivesUp(t *testing.T) {
	f := newFleet(t, 1, Options{Engine: EngineSGLang, KVTokens: 1024, PrefillPerToken: time.Hour})
	p := f.Policy(0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequestWithContext(ctx, "POST", "/generate", nil)
	if cached, ok := p.blocks.run(p, r, ids(0, 32), nil); ok || cached != 0 {
		t.Errorf("run = %d, %v; want the request given up", cached, ok)
	}
	// The fake holds a prompt's blocks from the start of its prefill.
	if cached, _ := p.blocks.run(p, r, ids(0, 32), nil); cached != 32 {
		t.Errorf("second run: cached %d, want 32", cached)
	}
}

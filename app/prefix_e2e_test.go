package app

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/prefix"
	"github.com/policyrouter/policyrouter/proxy"
)

// Multi-turn episodes without a routing key through the proxy, on SGLang
// stand-ins that keep a block prefix cache, with a rolling update of the
// weights in their middle: X-Prefix-Match, what the router expects cached
// on the chosen policy from confirmed blocks, is at most what the engine
// then reports cached (meta_info.cached_tokens) plus one block on at least
// 95% of the answers (the index is cleared for a policy whose weights
// changed, when the engine's cache is), and the later turns find their
// conversation cached without a session key.
func TestPrefixMatchHoldsAcrossRollingUpdate(t *testing.T) {
	const episodes, turns, updateAfter = 8, 6, 3
	fleet, err := fakepolicy.New(2, rand.NewPCG(3, 4), fakepolicy.Options{
		Engine: fakepolicy.EngineSGLang, TokensPerSecond: 2000, KVTokens: 1 << 16,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	for i := range 2 {
		fleet.Policy(i).SetWeightVersion("1")
	}
	cfg := DefaultConfig()
	cfg.Addr = ""
	cfg.PollTimeout = 5 * time.Second
	a, base := serveWith(t, cfg, func(*http.Server) {})
	registerSGLangPair(t, a, base, fleet, 8)

	type answer struct {
		turn, match, cached int
		outcome             string
	}
	var (
		mu      sync.Mutex
		answers []answer
		reached sync.WaitGroup // every episode through updateAfter turns
		updated = make(chan struct{})
	)
	reached.Add(episodes)
	turn := func(prompt []int64) ([]int64, answer, error) {
		req, _ := json.Marshal(map[string]any{"input_ids": prompt, "sampling_params": map[string]any{"max_new_tokens": 24, "temperature": 0}})
		res, err := http.Post(base+"/generate", "application/json", strings.NewReader(string(req)))
		if err != nil {
			return nil, answer{}, err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		var ans struct {
			OutputIDs []int64 `json:"output_ids"`
			Meta      struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"meta_info"`
		}
		if res.StatusCode != http.StatusOK || json.Unmarshal(b, &ans) != nil {
			return nil, answer{}, fmt.Errorf("%d %s", res.StatusCode, b)
		}
		m, err := strconv.Atoi(res.Header.Get(proxy.HeaderPrefixMatch))
		if err != nil {
			return nil, answer{}, fmt.Errorf("X-Prefix-Match %q", res.Header.Get(proxy.HeaderPrefixMatch))
		}
		return ans.OutputIDs, answer{match: m, cached: ans.Meta.CachedTokens, outcome: res.Header.Get(proxy.HeaderPrefixOutcome)}, nil
	}
	var wg sync.WaitGroup
	for e := range episodes {
		wg.Go(func() {
			prompt := make([]int64, 0, 2048)
			for i := range 40 { // a system prompt of its own, then turns
				prompt = append(prompt, int64(1000*(e+1)+i))
			}
			for n := range turns {
				if n == updateAfter {
					reached.Done()
					<-updated
				}
				out, ans, err := turn(prompt)
				if err != nil {
					t.Errorf("episode %d, turn %d: %v", e, n, err)
					if n < updateAfter {
						reached.Done()
					}
					return
				}
				ans.turn = n
				mu.Lock()
				answers = append(answers, ans)
				mu.Unlock()
				prompt = append(prompt, out...)
				for i := range 20 { // the environment's answer, then the next turn
					prompt = append(prompt, int64(50000+100*e+10*n+i))
				}
			}
		})
	}
	reached.Wait()
	var u struct{ ID, State string }
	_, b := call(t, base, "POST", "/updates", `{"version": 2, "model_path": "/ckpt/2", "max_unavailable": 1}`)
	if err := json.Unmarshal(b, &u); err != nil || u.ID == "" {
		t.Fatalf("POST /updates: %s", b)
	}
	poll.Until(t, "the update to succeed", func() bool {
		_, b := call(t, base, "GET", "/updates/"+u.ID, "")
		_ = json.Unmarshal(b, &u)
		return u.State == "succeeded"
	})
	close(updated)
	wg.Wait()

	within, matched := 0, 0
	for _, ans := range answers {
		if ans.match <= ans.cached+prefix.BlockTokens {
			within++
		}
		if ans.turn > 0 && ans.turn != updateAfter && ans.match > 0 {
			matched++
		}
	}
	t.Logf("%d answers, %d with X-Prefix-Match <= cached + 1 block, %d later turns matched", len(answers), within, matched)
	if len(answers) != episodes*turns || within*100 < 95*len(answers) {
		t.Errorf("%d of %d answers with X-Prefix-Match <= cached tokens + %d; want all %d answers, 95%% within",
			within, len(answers), prefix.BlockTokens, episodes*turns)
	}
	// Turns after the first, but for the first after the update (whose
	// engine's cache the update flushed), find their conversation.
	if later := episodes * (turns - 2); matched*10 < 9*later {
		t.Errorf("%d of %d later turns matched a cached prefix; want 90%%", matched, later)
	}
}

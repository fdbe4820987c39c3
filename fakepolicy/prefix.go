package fakepolicy

import (
	"net/http"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// A prefixCache simulates a policy server's KV cache of prompt prefixes:
// an LRU of the last K session keys the policy generated for. A request
// whose session is in it is a hit and runs faster (Options.PrefixSpeedup),
// as a server that only has to prefill the new turn's tokens.
type prefixCache struct {
	keys         *lru.Cache[string, struct{}] // nil: no cache simulated
	hits, misses atomic.Uint64
	speedup      float64
}

// init sets the cache up for k keys (none when k is 0).
func (c *prefixCache) init(k int, speedup float64) {
	c.speedup = speedup
	if k > 0 {
		c.keys, _ = lru.New[string, struct{}](k) // k > 0: no error
	}
}

// generation returns how long a generation of base for session takes and
// whether it hit the cache, recording the session as most recent.
func (c *prefixCache) generation(session string, base time.Duration) (time.Duration, bool) {
	if c.keys == nil || session == "" {
		return base, false
	}
	hit, _ := c.keys.ContainsOrAdd(session, struct{}{})
	if hit {
		c.keys.Get(session) // most recent
		c.hits.Add(1)
		return time.Duration(float64(base) / c.speedup), true
	}
	c.misses.Add(1)
	return base, false
}

// PrefixStats counts a policy's (or a fleet's) generations that named a
// session, by whether the session's prefix was cached.
type PrefixStats struct {
	Hits   uint64 `json:"hits"`
	Misses uint64 `json:"misses"`
	// Size is how many session keys are cached now.
	Size int `json:"size"`
}

// PrefixStats returns the policy's prefix-cache counters.
func (p *Policy) PrefixStats() PrefixStats {
	s := PrefixStats{Hits: p.prefix.hits.Load(), Misses: p.prefix.misses.Load()}
	if p.prefix.keys != nil {
		s.Size = p.prefix.keys.Len()
	}
	return s
}

// PrefixStats returns the sum of the policies' prefix-cache counters.
func (f *Fleet) PrefixStats() PrefixStats {
	var s PrefixStats
	for _, p := range f.policies {
		ps := p.PrefixStats()
		s.Hits += ps.Hits
		s.Misses += ps.Misses
		s.Size += ps.Size
	}
	return s
}

// serveCache answers GET /cache with the policy's PrefixStats.
func (p *Policy) serveCache(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, p.PrefixStats())
}

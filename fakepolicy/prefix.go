package fakepolicy

import (
	"encoding/json"
	"io"
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

// generateBody is the optional body of POST /generate.
type generateBody struct {
	// SessionID names the trajectory or group whose prefix the request
	// extends.
	SessionID string `json:"session_id"`
}

// sessionOf reads the session key of a /generate request: the JSON body's
// session_id, else the session query parameter; "" for none. A body that
// is not such JSON names none.
func sessionOf(r *http.Request) string {
	if s := r.URL.Query().Get("session"); s != "" {
		return s
	}
	var b generateBody
	if r.Body != nil {
		_ = json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&b)
	}
	return b.SessionID
}

// serveCache answers GET /cache with the policy's PrefixStats.
func (p *Policy) serveCache(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, p.PrefixStats())
}

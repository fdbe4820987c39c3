package fakepolicy

import "sync"

// callLog records calls in order; safe for concurrent use.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (c *callLog) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.calls) < 10000 {
		c.calls = append(c.calls, s)
	}
}

func (c *callLog) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

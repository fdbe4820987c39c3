// Package fakeclock is a settable clock for the tests of packages whose
// time source is replaceable (a Now func() time.Time field).
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a time that moves only when told. It is safe for concurrent
// use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Start is where New's clocks start: a fixed instant, so that tests print
// the same times run after run.
var Start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// New returns a clock at Start.
func New() *Clock { return At(Start) }

// At returns a clock at t.
func At(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time; pass it as a Now field.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Package poll waits in tests for a condition that other goroutines or
// processes make true.
package poll

import (
	"testing"
	"time"
)

// Timeout bounds Until: long enough for a loaded CI machine, so that a
// failure means the condition never came, not that it came late.
const Timeout = 30 * time.Second

// Until polls cond every few milliseconds until it is true, and fails the
// test, naming what it waited for, when Timeout passes first.
func Until(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", Timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

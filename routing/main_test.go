package routing

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine (a /select waiter, for
// example) outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

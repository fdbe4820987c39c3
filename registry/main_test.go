package registry

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine (a waiting /select,
// a proxied stream, a probe) outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

package fakepolicy

import (
	"testing"

	"github.com/policyrouter/policyrouter/engine"
)

// Every engine of the table has a fake serving its own endpoints, and
// every fake is an engine of the table.
func TestEveryEngineHasAFake(t *testing.T) {
	for _, name := range engine.Names() {
		if _, ok := engineRoutes[name]; !ok && name != engine.Native {
			t.Errorf("engine %q has no fake: add its routes to engineRoutes", name)
		}
	}
	for name := range engineRoutes {
		if !engine.Is(name) || name == engine.Native {
			t.Errorf("fake %q is not an engine of the table other than the native one", name)
		}
	}
}

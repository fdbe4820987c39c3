package engine

import (
	"context"
	"errors"

	"github.com/policyrouter/policyrouter/routing"
)

// MaxCapacity is the largest capacity an engine's report is taken at: the
// bound of a registration's capacity (api.PolicyRequest).
const MaxCapacity = 65536

// capacityReporter is an engine that can ask its server how many requests
// it runs at once, each in its own file. Engines without one (the native
// /idle protocol) have a capacity of 1 unless registered with another.
type capacityReporter interface {
	// reportedCapacity asks s once; an error names the endpoint.
	reportedCapacity(ctx context.Context, c *Client, s *Server) (int, error)
	// defaultCapacity is the capacity of a server that does not say.
	defaultCapacity() int
}

// errNoCapacity: the engine has no way to report a capacity.
var errNoCapacity = errors.New("the engine reports no capacity")

// DefaultCapacity returns the capacity of a server of the named engine
// that does not report its own (e.g. SGLangDefaultCapacity), or 1: the
// native protocol, and names not in the table.
func DefaultCapacity(name string) int {
	if cr, ok := table[name].(capacityReporter); ok {
		return cr.defaultCapacity()
	}
	return 1
}

// Capacity asks the server of pol (its URL, engine and keys; its capacity
// is ignored) how many requests it runs at once, bounded by ctx: SGLang's
// max_running_requests summed over its data-parallel ranks, vLLM's
// max_num_seqs: each engine's file says where it reads it. When the server does not say (not up yet,
// an older release, vLLM outside dev mode) it returns DefaultCapacity of
// the engine and the reason as err, which the caller may log: the capacity
// returned is usable either way. Safe for concurrent use.
func (c *Client) Capacity(ctx context.Context, pol routing.Policy) (int, error) {
	fallback := DefaultCapacity(pol.EngineName())
	s, err := NewServer(pol)
	if err != nil {
		return fallback, err
	}
	cr, ok := Of(pol).(capacityReporter)
	if !ok {
		return fallback, errNoCapacity
	}
	n, err := cr.reportedCapacity(ctx, c, s)
	if err != nil {
		return fallback, err
	}
	return min(n, MaxCapacity), nil
}

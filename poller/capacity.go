package poller

import (
	"context"

	"github.com/policyrouter/policyrouter/routing"
)

// EngineCapacity asks the server of pol how many requests it runs at once
// (engine.Client.Capacity), with the poller's client and bounded by its
// probe timeout. The capacity returned is usable even with an error, which
// says why the engine's default was taken. Safe for concurrent use, with
// or without Run.
func (p *Poller) EngineCapacity(ctx context.Context, pol routing.Policy) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return p.client.Capacity(ctx, pol)
}

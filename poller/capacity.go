package poller

import (
	"context"
	"errors"

	"github.com/policyrouter/policyrouter/routing"
)

// Capacities of the engines' servers when they do not say theirs: what a
// registration that names no capacity gets (DefaultCapacity). An engine
// batches hundreds of requests, so a capacity of 1 would serialise it.
const (
	// SGLangDefaultCapacity is SMG's own answer to an SGLang worker that
	// reports no max_running_requests: slots_per_worker, whose default is
	// 64 (model_gateway/src/worker/capacity.rs, smg-project/smg commit
	// f8daa8835a8b, CapacityTrackerSettings::default).
	SGLangDefaultCapacity = 64
	// VLLMDefaultCapacity is vLLM's default max_num_seqs for the OpenAI
	// API server on most GPUs (EngineArgs.get_batch_defaults in
	// vllm/engine/arg_utils.py: UsageContext.OPENAI_API_SERVER: 256; 1024 on
	// GPUs of 70 GiB or more other than the A100).
	VLLMDefaultCapacity = 256
)

// MaxCapacity is the largest capacity an engine's report is taken at: the
// bound of a registration's capacity (api.PolicyRequest).
const MaxCapacity = 65536

// capacityReporter is an engine that can ask its server how many requests
// it runs at once. Engines without one (the native /idle protocol) have a
// capacity of 1 unless registered with another.
type capacityReporter interface {
	// reportedCapacity asks m's server once; an error names the endpoint.
	reportedCapacity(ctx context.Context, p *Poller, m *member) (int, error)
}

// errNoCapacity: the engine has no way to report a capacity.
var errNoCapacity = errors.New("the engine reports no capacity")

// DefaultCapacity returns the capacity of a server of the named engine
// that does not report its own: SGLangDefaultCapacity,
// VLLMDefaultCapacity, or 1 (the native protocol, and names not in the
// table).
func DefaultCapacity(engine string) int {
	switch engine {
	case EngineSGLang:
		return SGLangDefaultCapacity
	case EngineVLLM:
		return VLLMDefaultCapacity
	}
	return 1
}

// EngineCapacity asks the server of pol (its URL, engine and keys; its
// capacity is ignored) how many requests it runs at once, bounded by the
// poller's probe timeout: SGLang's max_running_requests summed over its
// data-parallel ranks (engine_sglang.go), vLLM's max_num_seqs
// (engine_vllm.go). When the server does not say (not up yet, an older
// release, vLLM outside dev mode) it returns DefaultCapacity of the engine
// and the reason as err, which the caller may log: the capacity returned
// is usable either way. Safe for concurrent use, with or without Run.
func (p *Poller) EngineCapacity(ctx context.Context, pol routing.Policy) (int, error) {
	fallback := DefaultCapacity(pol.EngineName())
	m := newMember(pol)
	if m.err != nil {
		return fallback, m.err
	}
	cr, ok := m.eng.(capacityReporter)
	if !ok {
		return fallback, errNoCapacity
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	n, err := cr.reportedCapacity(ctx, p, m)
	if err != nil {
		return fallback, err
	}
	return min(n, MaxCapacity), nil
}

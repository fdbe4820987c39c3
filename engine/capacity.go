package engine

import (
	"context"
	"errors"
	"fmt"

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
	// reportedCapacity asks s once; an error names the endpoint.
	reportedCapacity(ctx context.Context, c *Client, s *Server) (int, error)
}

// errNoCapacity: the engine has no way to report a capacity.
var errNoCapacity = errors.New("the engine reports no capacity")

// DefaultCapacity returns the capacity of a server of the named engine
// that does not report its own: SGLangDefaultCapacity,
// VLLMDefaultCapacity, or 1 (the native protocol, and names not in the
// table).
func DefaultCapacity(name string) int {
	switch name {
	case SGLang:
		return SGLangDefaultCapacity
	case VLLM:
		return VLLMDefaultCapacity
	}
	return 1
}

// Capacity asks the server of pol (its URL, engine and keys; its capacity
// is ignored) how many requests it runs at once, bounded by ctx: SGLang's
// max_running_requests summed over its data-parallel ranks (sglang.go),
// vLLM's max_num_seqs (vllm.go). When the server does not say (not up yet,
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

// sglangCapacity is the part of GET /v1/loads (without include=core, the
// whole LoadSnapshot.to_dict of each DP rank) that says how many requests
// a rank runs at once: max_running_requests, the scheduler's limit. SMG
// reads the same field for its own capacity (SchedulerLoadSnapshot in
// crates/protocols/src/worker.rs, smg-project/smg commit f8daa8835a8b).
type sglangCapacity struct {
	Loads []struct {
		MaxRunningRequests *int `json:"max_running_requests"`
	} `json:"loads"`
}

var _ capacityReporter = sglang{}

// reportedCapacity sums max_running_requests over the server's DP ranks.
func (sglang) reportedCapacity(ctx context.Context, c *Client, s *Server) (int, error) {
	var v sglangCapacity
	if err := c.getJSON(ctx, s, "/v1/loads", &v); err != nil {
		return 0, err
	}
	n := 0
	for i, l := range v.Loads {
		if l.MaxRunningRequests == nil || *l.MaxRunningRequests < 1 {
			return 0, endpointError(s, "/v1/loads", fmt.Errorf(`loads[%d] has no positive "max_running_requests"`, i))
		}
		n += min(*l.MaxRunningRequests, MaxCapacity)
	}
	if n == 0 {
		return 0, endpointError(s, "/v1/loads", errors.New(`answer has no "loads"`))
	}
	return n, nil
}

// vllmServerInfo is the part of GET /server_info?config_format=json that
// says how many requests the server runs at once: show_server_info in
// vllm/entrypoints/serve/instrumentator/server_info.py (vllm-project/vllm
// commit 09cb327f1183; in later releases vllm/entrypoints/serve/dev/
// server_info, served in dev mode only, VLLM_SERVER_DEV_MODE=1) answers
// {"vllm_config": PydanticVllmConfig.dump_python(vllm_config, mode="json"),
// "vllm_env", "system_env"}, whose scheduler_config.max_num_seqs is the
// most sequences one engine core schedules at once. A data-parallel server
// is taken at one core's count: less than it can run, never more.
type vllmServerInfo struct {
	VLLMConfig *struct {
		SchedulerConfig *struct {
			MaxNumSeqs *int `json:"max_num_seqs"`
		} `json:"scheduler_config"`
	} `json:"vllm_config"`
}

var _ capacityReporter = vllm{}

func (vllm) reportedCapacity(ctx context.Context, c *Client, s *Server) (int, error) {
	const path = "/server_info?config_format=json"
	var v vllmServerInfo
	if err := c.getJSON(ctx, s, path, &v); err != nil {
		return 0, err
	}
	if v.VLLMConfig == nil || v.VLLMConfig.SchedulerConfig == nil || v.VLLMConfig.SchedulerConfig.MaxNumSeqs == nil ||
		*v.VLLMConfig.SchedulerConfig.MaxNumSeqs < 1 {
		return 0, endpointError(s, path, errors.New(`answer has no positive "vllm_config.scheduler_config.max_num_seqs"`))
	}
	return *v.VLLMConfig.SchedulerConfig.MaxNumSeqs, nil
}

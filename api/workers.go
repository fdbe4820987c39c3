package api

// The worker API of SGLang Model Gateway (SMG, formerly sgl-router), served
// so that a framework written against it (slime, and the forks of that
// router miles, SkyRL and Prime-RL run) can use policyrouter unchanged.
// Shapes as smg-project/smg has them:
//
//   - current: model_gateway/src/server.rs (routes), worker/service.rs
//     (answers, status codes) and crates/protocols/src/worker.rs
//     (WorkerSpec, WorkerInfo), commit f8daa8835a8b;
//   - legacy /add_worker, /remove_worker, /list_workers: src/server.rs and
//     src/core/worker_manager.rs at commit 51fc5680dec7, the last before
//     3baa9aeb0 removed them.
//
// A worker is a policy: its SMG id is the policy's id (a UUID unless the
// policy was registered through /policies with one of its own).

// WorkerSpecRequest is the body of POST /workers: SMG's WorkerSpec, of
// which policyrouter reads the fields below. Like SMG (serde without
// deny_unknown_fields) it ignores the others (bootstrap_port, dp_*, kv_*,
// health, http_pool, resilience, max_connection_attempts, ...).
type WorkerSpecRequest struct {
	URL string `json:"url" validate:"required,max=2048"`
	// WorkerType: "regular" (default) only; SMG's prefill, decode and
	// encode pools (disaggregated serving) have no counterpart here.
	WorkerType string `json:"worker_type,omitempty"`
	// ConnectionMode: "http" (default) only.
	ConnectionMode string `json:"connection_mode,omitempty"`
	// RuntimeType names the engine, a name of engine.Names() (ours is
	// "policyrouter"); absent or "unspecified" is the server's
	// --default-engine. SMG also accepts the key "runtime" (Runtime).
	RuntimeType string `json:"runtime_type,omitempty"`
	Runtime     string `json:"runtime,omitempty"`
	// Labels are the policy's labels.
	Labels map[string]string `json:"labels,omitempty" validate:"omitempty,max=64,dive,keys,min=1,max=128,endkeys,max=1024"`
	// APIKey is the worker's key: the policy's api_key, write-only.
	APIKey *string `json:"api_key,omitempty" validate:"omitempty,max=4096,printascii"`
	// Models are the policy's models (their ids); absent, the policy
	// serves what its engine's /v1/models lists, as in SMG.
	Models []WorkerModelCard `json:"models,omitempty" validate:"omitempty,max=64,dive"`
	// Priority and Cost weigh workers in SMG; policyrouter does not, and
	// takes only their defaults (50 and 1.0) rather than ignore others.
	Priority *int     `json:"priority,omitempty"`
	Cost     *float64 `json:"cost,omitempty"`
	// Capacity and NodeID are policyrouter's own: the policy's capacity
	// (default: the engine's own, read from the server) and node.
	Capacity *int   `json:"capacity,omitempty" validate:"omitempty,min=1,max=65536"`
	NodeID   string `json:"node_id,omitempty" validate:"omitempty,max=253,printascii"`
}

// WorkerModelCard is the part of SMG's ModelCard read: its id.
type WorkerModelCard struct {
	ID string `json:"id" validate:"max=512"`
}

// WorkerAccepted is the answer of POST /workers and DELETE /workers/{id}:
// SMG's 202 (CreateWorkerResult, DeleteWorkerResult). SMG answers before
// the worker is registered (a background job); policyrouter has
// registered (or removed) it, durably, by the time it answers, and has
// waited for its first probe. URL and Location are absent on DELETE.
type WorkerAccepted struct {
	Status   string `json:"status"` // "accepted"
	WorkerID string `json:"worker_id"`
	URL      string `json:"url,omitempty"`
	Location string `json:"location,omitempty"`
	Message  string `json:"message"`
}

// WorkerInfo is a worker as GET /workers and GET /workers/{id} show it:
// SMG's WorkerInfo with its WorkerSpec flattened in, for a policy.
type WorkerInfo struct {
	ID string `json:"id"`
	// ModelID is SMG's primary model: the policy's first model; absent
	// while none is known, as for SMG's wildcard workers.
	ModelID        string            `json:"model_id,omitempty"`
	URL            string            `json:"url"`
	WorkerType     string            `json:"worker_type"`     // "regular"
	ConnectionMode string            `json:"connection_mode"` // "http"
	RuntimeType    string            `json:"runtime_type"`    // the policy's engine
	Labels         map[string]string `json:"labels,omitempty"`
	Priority       int               `json:"priority"` // SMG's default, 50
	Cost           float64           `json:"cost"`     // SMG's default, 1.0
	// IsHealthy is true while the policy is routable as far as health
	// goes: idle or busy (status "ready").
	IsHealthy bool `json:"is_healthy"`
	// Status is SMG's WorkerStatus of the policy's state: pending
	// (unknown: not yet heard from), ready (idle, busy), not_ready
	// (unhealthy and any other state), draining.
	Status string `json:"status"`
	// Load is the policy's occupancy: the most of its engine's load and
	// the router's work out on it (SMG: its in-flight count).
	Load int64 `json:"load"`
	// Index, Capacity and NodeID are policyrouter's own.
	Index    int    `json:"index"`
	Capacity int    `json:"capacity"`
	NodeID   string `json:"node_id,omitempty"`
}

// WorkerList is the answer of GET /workers (SMG's ListWorkersResult).
type WorkerList struct {
	Workers []WorkerInfo     `json:"workers"`
	Total   int              `json:"total"`
	Stats   WorkerCountStats `json:"stats"`
}

// WorkerCountStats counts the listed workers by type.
type WorkerCountStats struct {
	PrefillCount int `json:"prefill_count"`
	DecodeCount  int `json:"decode_count"`
	RegularCount int `json:"regular_count"`
}

// WorkerURLList is the answer of the legacy GET /list_workers.
type WorkerURLList struct {
	URLs []string `json:"urls"`
}

// FinishSessionResponse is the answer of POST /finish_session.
type FinishSessionResponse struct {
	Status    string `json:"status"` // "ok"
	SessionID string `json:"session_id"`
}

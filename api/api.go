// Package api holds the wire types of the policyrouter HTTP API: request and
// response bodies with their json and validate tags, and the error
// envelope. It has no logic; openapi.yaml at the repository root is the
// written contract these types implement.
package api

import (
	"encoding/json"
	"time"

	"github.com/policyrouter/policyrouter/prefix"
	"github.com/policyrouter/policyrouter/routing"
)

// RouterSimple is the wire name of the "simple" router, the default
// (routing.DefaultRouter). The names requests may give come from the
// routing package's table of routers.
const RouterSimple = "simple"

// PolicyRequest registers one policy (POST /policies, and each entry of PUT
// /policies).
type PolicyRequest struct {
	URL    string `json:"url" validate:"required,max=2048,http_url"`
	NodeID string `json:"node_id,omitempty" validate:"omitempty,max=253,printascii"`
	// Index is the seed's policy index; default the lowest free one.
	Index *int `json:"index,omitempty" validate:"omitempty,min=0,max=1048575"`
	// ID defaults to a new UUID.
	ID       string            `json:"id,omitempty" validate:"omitempty,max=128,printascii,excludesall=/?#%"`
	Capacity *int              `json:"capacity,omitempty" validate:"omitempty,min=1,max=65536"`
	Labels   map[string]string `json:"labels,omitempty" validate:"omitempty,max=64,dive,keys,min=1,max=128,endkeys,max=1024"`
	// Version is the policy's weight version at registration; its /idle
	// answers replace it with the version they report. Default 0.
	Version *int64 `json:"version,omitempty" validate:"omitempty,min=0"`
	// AllowSharedURL registers the policy even when another index has the
	// same URL; without it that is a conflict (a copy-paste slip more often
	// than one server meant as two policies).
	AllowSharedURL bool `json:"allow_shared_url,omitempty"`
	// Engine is the kind of server, a name of engine.Names():
	// "policyrouter" (it serves GET /idle) or an inference engine's;
	// default the server's --default-engine.
	Engine string `json:"engine,omitempty" validate:"omitempty,engine"`
	// APIKey and AdminAPIKey are sent to the policy's server as
	// "Authorization: Bearer" (APIKey on probes, AdminAPIKey on weight
	// updates; each falls back on the other). Write-only: no answer shows
	// them. Absent keeps the key of the policy registered with the same
	// id; "" removes it.
	APIKey      *string `json:"api_key,omitempty" validate:"omitempty,max=4096,printascii"`
	AdminAPIKey *string `json:"admin_api_key,omitempty" validate:"omitempty,max=4096,printascii"`
	// Models are the model ids the policy serves (a request's "model" goes
	// only to policies serving it); absent means those its engine lists
	// at GET /v1/models.
	Models []string `json:"models,omitempty" validate:"omitempty,max=64,dive,min=1,max=512,printascii"`
}

// ReplacePoliciesRequest is the body of PUT /policies.
type ReplacePoliciesRequest struct {
	Policies []PolicyRequest `json:"policies" validate:"max=100000,dive"`
}

// Policy is a registered policy.
type Policy struct {
	Index int    `json:"index"`
	ID    string `json:"id"`
	URL   string `json:"url"`
	// NodeID is the node as registered, or the topology's node for the
	// policy's index when it was registered without one.
	NodeID   string            `json:"node_id"`
	Capacity int               `json:"capacity"`
	Labels   map[string]string `json:"labels"`
	Draining bool              `json:"draining"`
	// State is the live state, as in GET /stats: idle, busy, unhealthy,
	// draining or unknown.
	State string `json:"state"`
	// Version is the policy's weight version: registered, or reported by
	// its /idle answers.
	Version int64 `json:"version"`
	// Engine is the kind of server (a name of engine.Names()), and
	// WeightVersion the version string it last reported ("" before any).
	Engine        string `json:"engine"`
	WeightVersion string `json:"weight_version"`
	// Models are the model ids the policy serves: registered, else (live)
	// those its engine lists; empty when neither is known (any model).
	Models []string `json:"models"`
	// LastError, UnhealthySince and LastOK are the policy's health, as in
	// GET /stats.
	LastError      string     `json:"last_error"`
	UnhealthySince *time.Time `json:"unhealthy_since"`
	LastOK         *time.Time `json:"last_ok"`
}

// RegistrationRequest is the body of PUT /registration: every policy and
// the topology, replaced at once.
type RegistrationRequest struct {
	Policies []PolicyRequest `json:"policies" validate:"max=100000,dive"`
	// Topology is the seed's component_distribution; decoded by the
	// handler, which names the path of any mistake in it.
	Topology json.RawMessage `json:"topology"`
}

// Registration is the body of GET /registration and the answer to PUT
// /registration.
type Registration struct {
	Policies []Policy         `json:"policies"`
	Topology routing.Topology `json:"topology"`
}

// PolicyList is the body of GET /policies and the answer to PUT /policies.
type PolicyList struct {
	Policies []Policy `json:"policies"`
}

// AssignRequest is the body of POST /assign.
// Its rules (bounds, names) are stated once, in handlers' table of it
// (handlers/requests.go), from routing's constants.
type AssignRequest struct {
	NumTasks *int `json:"num_tasks"`
	// CurrentLoads, when present, is the seed's stateless mode: one load per
	// policy index. Absent means the server's tracked loads.
	// Each load must be in [-536870912, 536870912]; the routing core checks
	// that, once, instead of the validator reflecting over every element.
	CurrentLoads []int64 `json:"current_loads"`
	// EnvIDs, when present, has num_tasks entries.
	EnvIDs []string `json:"env_ids"`
	Router string   `json:"router,omitempty"`
	// MinVersion, when present, is this request's weight-version floor
	// instead of the one PUT /weights set.
	MinVersion *int64 `json:"min_version,omitempty"`
	// SessionIDs, when present, has num_tasks entries: each task's session
	// key (at most 256 bytes; null or "" for none). Tasks of a session go
	// to its home on the consistent-hashing ring, under the load bound.
	SessionIDs []*string `json:"session_ids,omitempty"`
	// AssignTTLMS is how long the tracked tasks count in their policies'
	// loads unless /complete reports them first; default the server's
	// --assign-ttl.
	AssignTTLMS *int `json:"assign_ttl_ms,omitempty"`
	// LoadFactor is c of the homes' load bound ⌈c · (total + 1) /
	// available⌉; absent means the server's --sticky-load-factor.
	LoadFactor *float64 `json:"load_factor,omitempty"`
	// PrefixHashes, when present, are the block hashes of the prompt the
	// tasks share (openapi.yaml PrefixHashes; at most prefix.MaxBlocks
	// are used): they are recorded pending on each policy a task goes to,
	// so that the next /select or /assign with the same prompt matches.
	PrefixHashes []prefix.Hash `json:"prefix_hashes,omitempty"`
}

// PolicyRef is the short form of a policy in answers.
type PolicyRef struct {
	ID     string `json:"id"`
	URL    string `json:"url"`
	NodeID string `json:"node_id"`
}

// AssignResponse is the answer to POST /assign.
type AssignResponse struct {
	// Assignments holds one policy index per task.
	Assignments []int `json:"assignments"`
	// Policies resolves each index that appears in Assignments (as a
	// decimal string key) to its registered policy. Indices with no
	// registration (stateless mode) are absent.
	Policies map[string]PolicyRef `json:"policies"`
	// Sticky says per task, when session_ids were given, where the task
	// landed: "home", "moved" or "spilled"; null for a task without one.
	Sticky []*string `json:"sticky,omitempty"`
	// EnvUnmapped is true when one of env_ids names no env worker of the
	// topology: no router could prefer its node.
	EnvUnmapped bool `json:"env_unmapped,omitempty"`
}

// SelectRequest is the body of POST /select.
// Its rules (bounds, names) are stated once, in handlers' table of it
// (handlers/requests.go), from routing's constants.
type SelectRequest struct {
	EnvID  string `json:"env_id,omitempty"`
	Router string `json:"router,omitempty"`
	// TimeoutMS bounds the wait for an idle policy; default 30000, capped by
	// the server's maximum. 0 means do not wait.
	TimeoutMS *int `json:"timeout_ms,omitempty"`
	// MinVersion, when present, is this request's weight-version floor
	// instead of the one PUT /weights set.
	MinVersion *int64 `json:"min_version,omitempty"`
	// LeaseTTLMS ends the lease this long after the hand-out unless it is
	// released before; absent or 0 means the server's --lease-ttl.
	LeaseTTLMS *int `json:"lease_ttl_ms,omitempty"`
	// SessionID, when present, is the request's session key, at most 256
	// bytes: a trajectory id for multi-turn stickiness, or a GRPO group id
	// so that the group's samples share one policy's prefix cache. The
	// session goes to its home on the consistent-hashing ring.
	SessionID string `json:"session_id,omitempty"`
	// StickyWaitMS is how long a session waits for its busy home before it
	// spills to the router's pick; default 0 (spill at once).
	StickyWaitMS *int `json:"sticky_wait_ms,omitempty"`
	// LoadFactor is c of the home's load bound ⌈c · (total + 1) /
	// available⌉; absent means the server's --sticky-load-factor.
	LoadFactor *float64 `json:"load_factor,omitempty"`
	// Release is what may end the lease besides its TTL: "explicit" (the
	// default: only POST /release) or "on_idle" (the seed's contract: an
	// idle answer may end it too).
	Release string `json:"release,omitempty"`
	// PrefixHashes, when present, are the block hashes of the prompt
	// (openapi.yaml PrefixHashes): the policy expected to hold the longest
	// prefix of them is preferred, within a load bound. A longer list than
	// prefix.MaxBlocks is used up to it.
	PrefixHashes []prefix.Hash `json:"prefix_hashes,omitempty"`
}

// SelectResponse is the answer to POST /select.
type SelectResponse struct {
	Index  int    `json:"index"`
	ID     string `json:"id"`
	URL    string `json:"url"`
	NodeID string `json:"node_id"`
	// LeaseID identifies the hand-out for POST /release. The round-robin
	// router (node_affinity) does not track busy policies and issues none.
	LeaseID string `json:"lease_id,omitempty"`
	// Version is the policy's weight version at dispatch.
	Version int64 `json:"version"`
	// WeightVersion is that version as the policy's server writes it
	// (SGLang's weight_version, e.g. "step-3"), when it reports one.
	WeightVersion string `json:"weight_version,omitempty"`
	// Sticky says, when the request named a session, where it landed:
	// "home", "moved" or "spilled".
	Sticky string `json:"sticky,omitempty"`
	// EnvUnmapped is true when the request's env_id names no env worker of
	// the topology: no router could prefer its node.
	EnvUnmapped bool `json:"env_unmapped,omitempty"`
	// PrefixMatch is, when the request carried prefix_hashes, the blocks
	// of them the chosen policy is expected to hold cached (16 tokens a
	// block); PrefixOutcome is "hit", "miss" or "balanced".
	PrefixMatch   *int   `json:"prefix_match,omitempty"`
	PrefixOutcome string `json:"prefix_outcome,omitempty"`
}

// ReleaseRequest is the body of POST /release: a lease id, or a policy
// index whose oldest lease is released.
// Its rules (bounds, names) are stated once, in handlers' table of it
// (handlers/requests.go), from routing's constants.
type ReleaseRequest struct {
	LeaseID string `json:"lease_id,omitempty"`
	Index   *int   `json:"index,omitempty"`
	// PrefixHashes, when present, are the block hashes of the prompt and
	// the tokens generated after it: the released policy holds them now,
	// so that the next turn, which resends both, matches.
	PrefixHashes []prefix.Hash `json:"prefix_hashes,omitempty"`
}

// ReleaseResponse is the answer to POST /release. Released is false for a
// lease that had already ended (released before, or freed when the poller
// saw its policy idle): releasing is idempotent. Index and ID name the
// policy when Released is true.
type ReleaseResponse struct {
	Released bool   `json:"released"`
	LeaseID  string `json:"lease_id"`
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	// Reason says why a lease that had already ended ended, when the
	// router knows: "aborted" for one a rolling update in pause mode abort
	// ended (its engine aborted the work: resubmit elsewhere).
	Reason string `json:"reason,omitempty"`
	// How says how a lease that had already ended ended: release, ttl,
	// probe, removed or aborted. Absent when this call ended it.
	How string `json:"how,omitempty"`
}

// ReleaseReasonAborted is ReleaseResponse.Reason for a lease ended by an
// update's abort.
const ReleaseReasonAborted = "aborted"

// CompleteRequest is the body of POST /complete.
type CompleteRequest struct {
	Index *int `json:"index" validate:"required,min=0,max=1048575"`
	// Count defaults to 1.
	Count *int `json:"count,omitempty" validate:"omitempty,min=1,max=1048576"`
}

// CompleteResponse is the answer to POST /complete.
type CompleteResponse struct {
	Index int   `json:"index"`
	Load  int64 `json:"load"`
}

// PolicyStats is one policy in GET /stats.
type PolicyStats struct {
	// Policy is the policy as GET /policies shows it, with its live state
	// (idle, busy, unhealthy, draining, unknown, or update_failed), node,
	// version and health.
	Policy
	Load     int64 `json:"load"`
	Inflight int   `json:"inflight"`
	// Leases is the number of leases out on the policy (proxied requests
	// in flight included; the same figure as Inflight). EngineLoad is the
	// engine's own load as last reported (null before any report),
	// OutsideLoad its load last seen while the router had nothing out on
	// it, and Occupancy max(engine_load, outside_load + leases): the
	// policy is handed out only while Occupancy is below its capacity.
	Leases      int    `json:"leases"`
	EngineLoad  *int64 `json:"engine_load"`
	OutsideLoad int64  `json:"outside_load"`
	Occupancy   int64  `json:"occupancy"`
	// SelectedTotal counts hand-outs by /select, AssignedTotal tasks by
	// /assign, CompletedTotal tasks reported by /complete.
	SelectedTotal  uint64 `json:"selected_total"`
	AssignedTotal  uint64 `json:"assigned_total"`
	CompletedTotal uint64 `json:"completed_total"`
	// LastPoll is when the last /idle probe was sent; null before the first.
	LastPoll            *time.Time `json:"last_poll"`
	LatencyMS           float64    `json:"latency_ms"`
	ConsecutiveFailures int        `json:"consecutive_failures"`
	// LastErrorKind is the cause kind of last_error: connect_refused,
	// timeout, status_<code>, decode, tls, dns or other; "" without one.
	LastErrorKind      string `json:"last_error_kind"`
	ProbesTotal        uint64 `json:"probes_total"`
	ProbeFailuresTotal uint64 `json:"probe_failures_total"`
	// ProbesRecent and ProbeFailuresRecent count the same over the last
	// PollerStats.WindowSeconds (0 without a poller).
	ProbesRecent        uint64 `json:"probes_recent"`
	ProbeFailuresRecent uint64 `json:"probe_failures_recent"`
	// ExpiredTotal counts leases ended by their TTL.
	ExpiredTotal uint64 `json:"expired_total"`
	// TasksExpiredTotal counts tracked /assign tasks that expired
	// (assign_ttl_ms) before /complete reported them.
	TasksExpiredTotal uint64 `json:"tasks_expired_total"`
	// UpdateError is why the latest rolling update failed this policy (the
	// engine's message), while it stays drained: State is then
	// "update_failed".
	UpdateError string `json:"update_error,omitempty"`
}

// StateUpdateFailed is the /stats state of a policy a rolling update
// failed and left drained (quarantined) until an operator resumes it.
const StateUpdateFailed = "update_failed"

// StateCounts counts policies by state.
type StateCounts struct {
	Policies  int `json:"policies"`
	Idle      int `json:"idle"`
	Busy      int `json:"busy"`
	Unhealthy int `json:"unhealthy"`
	Draining  int `json:"draining"`
	Unknown   int `json:"unknown"`
	// UpdateFailed counts the policies quarantined by a failed update
	// (state update_failed), not counted as draining.
	UpdateFailed int `json:"update_failed"`
	// Paused and Asleep count the policies whose engine says so.
	Paused   int   `json:"paused"`
	Asleep   int   `json:"asleep"`
	Load     int64 `json:"load"`
	Inflight int   `json:"inflight"`
	Capacity int   `json:"capacity"`
	// SelectedTotal and AssignedTotal add up the policies' counters.
	SelectedTotal uint64 `json:"selected_total"`
	AssignedTotal uint64 `json:"assigned_total"`
}

// PollerStats describes the idle poller.
type PollerStats struct {
	IntervalMS  float64 `json:"interval_ms"`
	TimeoutMS   float64 `json:"timeout_ms"`
	Concurrency int     `json:"concurrency"`
	// Policies is the number of policies probed each period.
	Policies int `json:"policies"`
	// Sweeps counts completed passes over all policies.
	Sweeps        uint64 `json:"sweeps"`
	ProbesTotal   uint64 `json:"probes_total"`
	FailuresTotal uint64 `json:"failures_total"`
	// ProbesRecent and FailuresRecent count the same over the last
	// WindowSeconds: what a dashboard shows, where the counts since start
	// would hide a recent run of failures.
	ProbesRecent   uint64  `json:"probes_recent"`
	FailuresRecent uint64  `json:"failures_recent"`
	WindowSeconds  float64 `json:"window_seconds"`
	// SkippedTotal counts due probes not sent because the policy's
	// previous probe was still in flight.
	SkippedTotal uint64 `json:"skipped_total"`
	InFlight     int    `json:"in_flight"`
	// LastPeriodMS is how long the last complete pass over all policies
	// took: above IntervalMS when the poller falls behind.
	LastPeriodMS float64 `json:"last_period_ms"`
}

// Stats is the body of GET /stats.
type Stats struct {
	Policies []PolicyStats          `json:"policies"`
	Nodes    map[string]StateCounts `json:"nodes"`
	Totals   StateCounts            `json:"totals"`
	// Waiters is the number of /select calls waiting for an idle policy,
	// Leases the number of leases out.
	Waiters int `json:"waiters"`
	Leases  int `json:"leases"`
	// LeasesEnded counts the leases that ended since the start, by how:
	// release, ttl, probe (an idle answer ended an on_idle lease),
	// removed (its policy left the registration, or the router reset),
	// aborted (a weight update aborted its work).
	LeasesEnded map[string]uint64 `json:"leases_ended"`
	// OldestLeaseSeconds is the age of the oldest lease out,
	// OldestTaskSeconds of the oldest tracked /assign task neither
	// completed nor expired; 0 when there is none. A figure that keeps
	// growing is a worker that hangs.
	OldestLeaseSeconds float64 `json:"oldest_lease_seconds"`
	OldestTaskSeconds  float64 `json:"oldest_task_seconds"`
	Router             string  `json:"router"`
	// MinVersion is the weight-version floor in force (PUT /weights).
	MinVersion int64 `json:"min_version"`
	// Floor says whether a routable policy meets MinVersion. Every router
	// that has it sets it; nil from an older router.
	Floor     *FloorStats   `json:"floor"`
	Decisions DecisionStats `json:"decisions"`
	Poller    *PollerStats  `json:"poller"`
	Sticky    StickyStats   `json:"sticky"`
	// Update summarises the running rolling update, else the latest one;
	// null when there has been none.
	Update *UpdateSummary `json:"update"`
	// Replica says, for one of several routers on an etcd store, whether
	// it leads and which one does; null for a router on a store of its own.
	Replica *ReplicaStats `json:"replica"`
	// EnvUnmapped counts the env ids of node-affine decisions that map to
	// no node: requests that got no node affinity.
	EnvUnmapped EnvUnmappedStats `json:"env_unmapped"`
	// Prefix is the prefix index and the score stage's decisions.
	Prefix        PrefixStats `json:"prefix"`
	UptimeSeconds float64     `json:"uptime_seconds"`
	Time          time.Time   `json:"time"`
}

// PrefixStats is /stats' prefix: the router's index of what each policy's
// engine is expected to cache, and the decisions of its score stage.
type PrefixStats struct {
	// Policies are the indexed policies, by id order.
	Policies []PrefixPolicyStats `json:"policies"`
	// Decisions counts the decisions by outcome: hit, miss, balanced,
	// none.
	Decisions map[string]uint64 `json:"decisions"`
	// MatchedTokens are the prompt tokens expected cached on the chosen
	// policies, PromptTokens the prompt tokens of the decisions with
	// hashes, both as blocks of 16 (text prompts too, for now).
	MatchedTokens uint64 `json:"matched_tokens"`
	PromptTokens  uint64 `json:"prompt_tokens"`
	// IndexBytes is the index's estimated memory, MaxBytes its cap.
	IndexBytes int64 `json:"index_bytes"`
	MaxBytes   int64 `json:"max_bytes"`
}

// PrefixPolicyStats is one policy's part of the prefix index.
type PrefixPolicyStats struct {
	ID string `json:"id"`
	// IndexedTokens are the tokens of the blocks indexed for the policy,
	// pending or confirmed; PendingTokens those pending; CapacityTokens
	// its budget.
	IndexedTokens  int64 `json:"indexed_tokens"`
	PendingTokens  int64 `json:"pending_tokens"`
	CapacityTokens int64 `json:"capacity_tokens"`
	// Evictions counts blocks dropped for the budget or a cut-back,
	// Clears the clears of the whole policy.
	Evictions uint64 `json:"evictions"`
	Clears    uint64 `json:"clears"`
}

// FloorStats is what the weight-version floor in force (Stats.MinVersion)
// leaves routable, of the policies that pass the availability filter
// (healthy, not draining, heard from: idle or busy).
type FloorStats struct {
	// Met is false when a floor is set, policies are routable and none of
	// them has a version at or above it: routing that names no floor of
	// its own waits, and /readyz answers floor_unmet. With no floor, or no
	// routable policy at all, it is true.
	Met bool `json:"met"`
	// Meeting counts the routable policies at or above the floor, of
	// Routable.
	Meeting  int `json:"meeting"`
	Routable int `json:"routable"`
	// HighestVersion is the highest weight version among the routable
	// policies; 0 with none.
	HighestVersion int64 `json:"highest_version"`
}

// EnvUnmappedStats counts the env ids, given to a node-affine router,
// that the topology maps to no node.
type EnvUnmappedStats struct {
	// Total counts them, one per task or request
	// (policyrouter_env_unmapped_total).
	Total uint64 `json:"total"`
	// Distinct is how many different ids, up to 1024 remembered.
	Distinct int `json:"distinct"`
	// IDs are the first few of them.
	IDs []string `json:"ids"`
}

// ReplicaStats is the leadership of one of several routers.
type ReplicaStats struct {
	// Leading is true on the leader, the replica that routes and polls.
	Leading bool `json:"leading"`
	// Leader is the leader's advertised URL; empty while none is elected.
	Leader string `json:"leader"`
	// StatsFrom is, on a follower, the leader whose view of the policies
	// these stats are (a follower does not poll); empty when the stats are
	// this replica's own.
	StatsFrom string `json:"stats_from,omitempty"`
}

// WeightsRequest is the body of PUT /weights: the trainer's current weight
// version, and how many versions behind a policy may be and still get
// work. Without max_staleness no floor is set.
type WeightsRequest struct {
	Version      *int64 `json:"version" validate:"required,min=0"`
	MaxStaleness *int64 `json:"max_staleness,omitempty" validate:"omitempty,min=0"`
	// Force sets a floor that no registered policy meets (all routing
	// then waits for policies to reach it); without it such a floor is
	// refused with 409 conflict.
	Force bool `json:"force,omitempty"`
}

// Weights is the body of GET /weights and the answer to PUT /weights.
// MinVersion is the floor in force: version - max_staleness, or 0 without
// max_staleness.
type Weights struct {
	Version      int64  `json:"version"`
	MaxStaleness *int64 `json:"max_staleness"`
	MinVersion   int64  `json:"min_version"`
}

// DecisionStats counts routing decisions since the server started; the
// differences between two reads are what happened between them.
type DecisionStats struct {
	AssignTotal uint64 `json:"assign_total"` // /assign calls answered
	SelectTotal uint64 `json:"select_total"` // /select calls answered
	// SelectWait counts /select calls by how long they took to answer,
	// waiting for an idle policy included.
	SelectWait Histogram `json:"select_wait"`
}

// Histogram is a cumulative histogram: Counts[i] counts observations at
// most BoundsMS[i] (and above BoundsMS[i-1]); the last count, one more than
// the bounds, those above every bound.
type Histogram struct {
	BoundsMS []float64 `json:"bounds_ms"`
	Counts   []uint64  `json:"counts"`
}

// StickyStats counts the /select calls and /assign tasks that named a
// session, each once: hits went to the session's first ring successor,
// misses elsewhere because it was unavailable or at the load bound (or no
// policy could be a home), spills to the router because the home stayed
// busy past sticky_wait_ms.
type StickyStats struct {
	Hits   uint64 `json:"hits"`
	Spills uint64 `json:"spills"`
	Misses uint64 `json:"misses"`
	// HitRate is hits over all three; 0 before any.
	HitRate float64 `json:"hit_rate"`
}

// Health is the body of GET /healthz and GET /readyz.
type Health struct {
	Status string `json:"status"` // "ok" or "not ready"
}

// DrainResponse is the answer to drain and resume: the policy after the
// change.
type DrainResponse = Policy

// Error codes of the error envelope.
const (
	CodeBadRequest       = "bad_request"       // 400: malformed JSON
	CodeValidationFailed = "validation_failed" // 422: well-formed, invalid values
	CodeUnauthorized     = "unauthorized"      // 401
	CodeForbidden        = "forbidden"         // 403
	CodeNotFound         = "not_found"         // 404
	CodeModelNotFound    = "model_not_found"   // 404: proxy: no policy serves the request's model (ErrorDetails.Models)
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"          // 409
	CodeTooLarge         = "payload_too_large" // 413
	CodeUnsupportedMedia = "unsupported_media_type"
	// 503 codes: each says why there is no policy to route to.
	CodeNoPolicies     = "no_policies"       // none registered
	CodeAllUnavailable = "all_unavailable"   // every policy unhealthy, draining or not yet heard from
	CodeNoIdlePolicy   = "no_idle_policy"    // /select waited timeout_ms and none became idle
	CodeShuttingDown   = "shutting_down"     // the server is stopping
	CodeNoFreshPolicy  = "no_fresh_policy"   // available policies, none at the weight-version floor
	CodeFloorUnmet     = "floor_unmet"       // /readyz: policies are routable, none at the floor PUT /weights set
	CodeOverloaded     = "overloaded"        // /select: too many calls waiting already (--max-waiters)
	CodeNotReady       = "not_ready"         // /readyz: not ready yet
	CodeNotLeader      = "not_leader"        // a follower replica: routing is the leader's (ErrorBody.Leader)
	CodeStoreDown      = "store_unavailable" // the store (etcd) did not answer; nothing was written
	// Proxy mode: the policy, not the router, failed.
	CodeUpstreamFailed  = "upstream_failed"  // 502: no policy answered (connect errors, 502/503), or it broke off
	CodeUpstreamTimeout = "upstream_timeout" // 504: the policy did not answer within --proxy-timeout
	CodeInternal        = "internal"         // 500: never for bad input
)

// ErrorBody is the content of the error envelope.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Fields names each bad input field (JSON path) with what is wrong.
	Fields    map[string]string `json:"fields,omitempty"`
	RequestID string            `json:"request_id"`
	// Leader is the advertised URL of the replica that routes, on a
	// not_leader answer, when one is known.
	Leader string `json:"leader,omitempty"`
	// Details are the figures behind the answer, for programs: on
	// no_policies and all_unavailable (also from /readyz), on
	// floor_unmet (/readyz) and on a PUT /weights refused for its floor.
	Details *ErrorDetails `json:"details,omitempty"`
}

// ErrorDetails are the figures behind an error answer.
type ErrorDetails struct {
	// Policies is how many policies are registered.
	Policies int `json:"policies"`
	// States counts the policies per state (unhealthy, draining, unknown,
	// busy, idle), of the states that have any.
	States map[string]int `json:"states,omitempty"`
	// LastError is the most frequent last_error of the policies that are
	// not available, LastErrorCount how many share it.
	LastError      string `json:"last_error,omitempty"`
	LastErrorCount int    `json:"last_error_count,omitempty"`
	// Causes groups the last errors of the policies that are not
	// available by cause kind (last_error_kind), most frequent first.
	Causes []ErrorCause `json:"causes,omitempty"`
	// MeetingFloor, on a PUT /weights refused with conflict, is how many
	// policies have a version at or above the floor asked for; on
	// floor_unmet (0) how many routable ones do.
	MeetingFloor *int `json:"meeting_floor,omitempty"`
	// MinVersion and HighestVersion, on floor_unmet, are the floor in
	// force and the highest version among the routable policies.
	MinVersion     *int64 `json:"min_version,omitempty"`
	HighestVersion *int64 `json:"highest_version,omitempty"`
	// Models, on model_not_found, are the model ids the policies serve.
	Models []string `json:"models,omitempty"`
}

// ErrorCause is one cause kind among the last errors of the policies
// that are not available: how many have it, and one of their last_error
// texts.
type ErrorCause struct {
	Kind    string `json:"kind"`
	Count   int    `json:"count"`
	Example string `json:"example"`
}

// LeaderHeader names the leader's advertised URL on a not_leader answer.
const LeaderHeader = "X-Policyrouter-Leader"

// FromFollowerHeader marks a request one replica sends another on behalf
// of its caller (a follower asking the leader for /stats): the receiver
// answers it itself, never forwarding it again.
const FromFollowerHeader = "X-Policyrouter-From-Follower"

// ErrorResponse is the one error envelope of every endpoint.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// UpdateRequest is the body of POST /updates: roll weight version Version
// through the fleet in waves.
type UpdateRequest struct {
	Version *int64 `json:"version" validate:"required,min=0"`
	// Action, when present, is sent to each policy of a wave; absent is
	// external mode (the trainer updates the wave's policies and confirms
	// with POST /updates/{id}/done).
	Action *UpdateAction `json:"action,omitempty"`
	// MaxUnavailable is a count (>= 1) or a percentage string such as
	// "25%" of the registered policies; default 1. "100%" is the
	// pause-everything update.
	MaxUnavailable      json.RawMessage `json:"max_unavailable,omitempty"`
	MinAvailablePerNode *int            `json:"min_available_per_node,omitempty" validate:"omitempty,min=0,max=100000"`
	DrainTimeoutMS      *int            `json:"drain_timeout_ms,omitempty" validate:"omitempty,min=0,max=86400000"`
	MaxFailures         *int            `json:"max_failures,omitempty" validate:"omitempty,min=0,max=100000"`
	// ModelPath is the checkpoint engines load from disk (SGLang:
	// /update_weights_from_disk); absent with no action is external mode.
	ModelPath string `json:"model_path,omitempty" validate:"omitempty,max=4096"`
	// PauseMode is how work in flight is handled: "wait" (default: drain
	// the policy's leases, then pause), "abort" (the engine aborts it and
	// the leases end at once, reading "aborted"), "retract" or "in_place"
	// (SGLang) or "keep" (vLLM), passed to the engine. A mode a registered
	// policy's engine has not got is refused.
	PauseMode string `json:"pause_mode,omitempty"`
	// SetFloor moves the /weights floor to version when the update
	// succeeds.
	SetFloor bool `json:"set_floor,omitempty"`
	// PhaseTimeoutMS fails a policy that stays longer in one step of its
	// update, saying why; absent: only the confirmation of the version is
	// bounded (30 s).
	PhaseTimeoutMS *int `json:"phase_timeout_ms,omitempty" validate:"omitempty,min=1,max=86400000"`
	// Selector aims the update at part of the fleet (the fleet verbs'
	// selector): the others keep their version and keep serving. Absent:
	// every policy. One that picks no registered policy is refused.
	Selector *FleetSelector `json:"selector,omitempty"`
}

// UpdateAction is the HTTP request that makes a policy load the weights.
type UpdateAction struct {
	Method    string          `json:"method,omitempty" validate:"omitempty,oneof=POST PUT PATCH GET"`
	Path      string          `json:"path" validate:"required,startswith=/,max=2048"`
	Body      json.RawMessage `json:"body,omitempty"`
	TimeoutMS *int            `json:"timeout_ms,omitempty" validate:"omitempty,min=1,max=86400000"`
}

// UpdateDoneRequest is the body of POST /updates/{id}/done.
type UpdateDoneRequest struct {
	Policies []string `json:"policies" validate:"required,min=1,dive,min=1,max=128"`
}

// UpdatePolicy is one policy's progress in an update.
type UpdatePolicy struct {
	ID     string `json:"id"`
	Index  int    `json:"index"`
	NodeID string `json:"node_id"`
	// Phase is pending (below the version, in no wave yet: listed from
	// the update's start), draining, updating, done or failed; Wave the
	// wave that took the policy, 0 while pending.
	Phase string    `json:"phase"`
	Wave  int       `json:"wave"`
	Since time.Time `json:"since"`
	// Drained is when its wave drained it; Ended when it was done or
	// failed (null before).
	Drained *time.Time `json:"drained"`
	Ended   *time.Time `json:"ended"`
	// DrainTimedOut: it was updated with work still on it, after
	// drain_timeout_ms.
	DrainTimedOut bool   `json:"drain_timed_out"`
	Error         string `json:"error,omitempty"`
	// Engine is the policy's engine; Step its step while updating (pause,
	// load, ready, version, resume, confirm), empty otherwise.
	Engine string `json:"engine"`
	Step   string `json:"step,omitempty"`
	// InPhaseMS is how long the policy has been in its phase, InStepMS in
	// its step.
	InPhaseMS float64 `json:"in_phase_ms"`
	InStepMS  float64 `json:"in_step_ms"`
	// ExpectedVersion is the update's version; ReportedVersion and
	// WeightVersion what the policy last reported.
	ExpectedVersion int64  `json:"expected_version"`
	ReportedVersion int64  `json:"reported_version"`
	WeightVersion   string `json:"weight_version"`
	// LastCall is the last call the update made to the policy; null
	// before any.
	LastCall *UpdateCall `json:"last_call"`
	// AbortedLeases counts the leases pause mode abort ended.
	AbortedLeases int `json:"aborted_leases"`
	// Held: the policy was registered while the update ran, and gets no
	// work until it reaches the update's version.
	Held bool `json:"held,omitempty"`
}

// UpdateCall is a call a rolling update made to a policy: Status 0 while
// it is in flight or when it got no answer (Error says why).
type UpdateCall struct {
	Method     string    `json:"method"`
	Path       string    `json:"path"`
	Status     int       `json:"status"`
	Error      string    `json:"error,omitempty"`
	Time       time.Time `json:"time"`
	DurationMS float64   `json:"duration_ms"`
}

// Update is a rolling update and its progress.
type Update struct {
	ID      string `json:"id"`
	State   string `json:"state"` // running, succeeded, failed, aborted
	Version int64  `json:"version"`
	// External is true without an action: the trainer updates each wave.
	External            bool   `json:"external"`
	MaxUnavailable      int    `json:"max_unavailable"`
	MinAvailablePerNode int    `json:"min_available_per_node"`
	DrainTimeoutMS      int64  `json:"drain_timeout_ms"`
	MaxFailures         int    `json:"max_failures"`
	ModelPath           string `json:"model_path,omitempty"`
	PauseMode           string `json:"pause_mode"`
	SetFloor            bool   `json:"set_floor"`
	PhaseTimeoutMS      int64  `json:"phase_timeout_ms"`
	// Selector is the part of the fleet the update is for; absent: all.
	Selector *FleetSelector `json:"selector,omitempty"`
	// Floor is the /weights floor the update set on success (set_floor); 0
	// when none.
	Floor    int64      `json:"floor"`
	Created  time.Time  `json:"created"`
	Ended    *time.Time `json:"ended"`
	Waves    int        `json:"waves"`
	Failures int        `json:"failures"`
	// CapacityHeld is how many policies the update keeps out of routing
	// now: draining, updating, or failed (failed ones stay drained).
	CapacityHeld int `json:"capacity_held"`
	// Ready lists, in external mode, the policies the trainer is to update
	// now (phase updating, not yet confirmed).
	Ready    []string       `json:"ready"`
	Policies []UpdatePolicy `json:"policies"`
	Error    string         `json:"error,omitempty"`
}

// UpdateSummary is a rolling update in /stats: its policies by phase.
type UpdateSummary struct {
	ID           string         `json:"id"`
	State        string         `json:"state"`
	Version      int64          `json:"version"`
	Waves        int            `json:"waves"`
	Failures     int            `json:"failures"`
	CapacityHeld int            `json:"capacity_held"`
	Phases       map[string]int `json:"phases"`
}

// UpdateList is the body of GET /updates, newest first.
type UpdateList struct {
	Updates []Update `json:"updates"`
}

// FleetSelector picks the policies of a fleet verb: those matching every
// criterion given; an empty selector picks every registered policy.
type FleetSelector struct {
	IDs     []string          `json:"ids,omitempty" validate:"omitempty,max=100000,dive,min=1,max=128"`
	Indices []int             `json:"indices,omitempty" validate:"omitempty,max=100000,dive,min=0,max=1048575"`
	Labels  map[string]string `json:"labels,omitempty" validate:"omitempty,max=64,dive,keys,min=1,max=128,endkeys,max=1024"`
	Engine  string            `json:"engine,omitempty" validate:"omitempty,engine"`
}

// FleetSleepRequest is the body of POST /fleet/sleep.
type FleetSleepRequest struct {
	Selector FleetSelector `json:"selector"`
	// Level is vLLM's sleep level (1 offloads the weights, 2 discards
	// them); 0 or absent is the engine's default.
	Level int `json:"level,omitempty" validate:"min=0,max=2"`
	// Drain, true when absent, waits before the sleep calls until the
	// selected policies have no generation in flight (leases and proxied
	// requests), at most the server's select timeout; false sleeps at
	// once, aborting them.
	Drain *bool `json:"drain,omitempty"`
	// ResumeWithinMS bounds how long a proxied generation the sleep
	// aborted waits for a policy to be woken (or another to take it) when
	// no other policy can; absent: the server's select timeout. 0 does not
	// wait: the answer ends with its tokens so far.
	ResumeWithinMS *int `json:"resume_within_ms,omitempty" validate:"omitempty,min=0,max=3600000"`
}

// FleetWakeRequest is the body of POST /fleet/wake.
type FleetWakeRequest struct {
	Selector FleetSelector `json:"selector"`
	// Tags, when given, are the memory regions to restore ("weights",
	// "kv_cache"); none restores all.
	Tags []string `json:"tags,omitempty" validate:"omitempty,max=16,dive,min=1,max=64,printascii"`
}

// FleetEngineRequest is the body of POST /fleet/engine/{path}: one
// engine-native call made to every selected policy.
type FleetEngineRequest struct {
	Selector FleetSelector `json:"selector"`
	// Method is the call's method, POST by default.
	Method string `json:"method,omitempty" validate:"omitempty,oneof=GET POST PUT DELETE"`
	// Query is the call's query parameters.
	Query map[string]string `json:"query,omitempty" validate:"omitempty,max=64"`
	// Body is sent as the call's JSON body when present.
	Body json.RawMessage `json:"body,omitempty"`
	// Exclusive takes the refit lock of the selected policies for the
	// call's duration: another exclusive fan-out, sleep, wake or update on
	// them is refused (409) meanwhile.
	Exclusive bool `json:"exclusive,omitempty"`
}

// FleetResult is one policy's outcome of a fleet verb.
type FleetResult struct {
	ID     string `json:"id"`
	Index  int    `json:"index"`
	Engine string `json:"engine"`
	// Call is the call made ("POST /sleep?level=1"), absent when none was.
	Call string `json:"call,omitempty"`
	// Status is the engine's answer's status, 0 when there was none.
	Status int `json:"status"`
	// Body is the engine's answer: its JSON, or its text as a string.
	Body json.RawMessage `json:"body,omitempty"`
	// Error says why the call failed: no answer, or no such call for
	// the policy's engine.
	Error string `json:"error,omitempty"`
}

// FleetResponse is the answer of a fleet verb: 200 when every call
// answered 2xx, else 207 with the others in Failed too.
type FleetResponse struct {
	Results []FleetResult `json:"results"`
	Failed  []FleetResult `json:"failed"`
}

package api

import (
	"time"

	"github.com/policyrouter/policyrouter/prefix"
)

// Bounds of the internal lease requests: the wait for a policy
// (timeout_ms, sticky_wait_ms) and a lease's TTL (lease_ttl_ms).
const (
	MaxLeaseWait = time.Hour
	MaxLeaseTTL  = 24 * time.Hour
)

// The internal endpoints (/internal/...) are what a replica that proxies
// generate traffic asks of the leader: a lease for each attempt, its
// release, and the adoption of a lease another leader handed out. They
// take a token with the route scope, as the proxied endpoints do.

// LeaseRequest is the body of POST /internal/leases: the routing input of
// one attempt of a proxied request (proxy.Request), for a lease that ends
// with the attempt.
type LeaseRequest struct {
	Router string `json:"router" validate:"required,max=64"`
	EnvID  string `json:"env_id,omitempty" validate:"max=256"`
	// SessionID is the session key (X-Session-ID).
	SessionID string `json:"session_id,omitempty"`
	// TimeoutMS bounds the wait for an idle policy, StickyWaitMS a
	// session's wait for its busy home, part of it.
	TimeoutMS    int `json:"timeout_ms" validate:"min=0,max=3600000"`
	StickyWaitMS int `json:"sticky_wait_ms,omitempty" validate:"min=0,max=3600000"`
	// MinVersion, when present, is the request's weight-version floor.
	MinVersion *int64 `json:"min_version,omitempty" validate:"omitempty,min=0"`
	// LeaseTTLMS guards the lease against a holder that never returns it;
	// 0 is the server's --lease-ttl.
	LeaseTTLMS int64 `json:"lease_ttl_ms,omitempty" validate:"min=0,max=86400000"`
	// Model is the model the request's body names; Route the engine
	// endpoint it is for (/generate, /v1/completions, ...).
	Model string `json:"model,omitempty" validate:"max=1024"`
	Route string `json:"route,omitempty" validate:"max=256"`
	// Exclude names the policies (by id) the request failed on already.
	Exclude []string `json:"exclude,omitempty" validate:"max=1024,dive,max=256"`
	// PrefixHashes are the block hashes of the request's prompt, hashed by
	// the replica the request entered (never the prompt itself), so that
	// the leader decides as it would for its own proxy.
	PrefixHashes []prefix.Hash `json:"prefix_hashes,omitempty"`
	// AwaitReturn: the replica's request was aborted by a policy the
	// leader took out of routing itself (Returning), and waits for one to
	// return rather than failing because none can route now.
	AwaitReturn bool `json:"await_return,omitempty"`
}

// Returning is the answer to GET /internal/returning/{policy_id}: whether
// the leader took the policy out of routing itself (its rolling update,
// POST /fleet/sleep) and so will bring it back, and within how long at
// most (a duration, not a time: the replicas' clocks may differ).
type Returning struct {
	Returning bool  `json:"returning"`
	WithinMS  int64 `json:"within_ms"`
}

// AdoptRequest is the body of PUT /internal/leases/{id}: a lease another
// leader handed out, whose request still runs, for this leader to count.
type AdoptRequest struct {
	PolicyID string `json:"policy_id" validate:"required,max=256"`
	// Holder names the replica that holds the lease (its advertise URL).
	Holder string `json:"holder" validate:"required,max=2048"`
	// LeaseTTLMS as in LeaseRequest.
	LeaseTTLMS int64 `json:"lease_ttl_ms,omitempty" validate:"min=0,max=86400000"`
}

// LeaseReleaseRequest is the body of POST /internal/leases/{id}/release.
type LeaseReleaseRequest struct {
	// PolicyID is the lease's policy, which a failure counts against.
	PolicyID string `json:"policy_id" validate:"required,max=256"`
	// Failure, when present, says why the attempt counts against the
	// policy's health.
	Failure *LeaseFailure `json:"failure,omitempty"`
	// Unfinished says that the policy may still be working on the
	// attempt (proxy.Outcome): its slot stays taken until a probe says
	// what the engine runs.
	Unfinished bool `json:"unfinished,omitempty"`
	// PrefixHashes are the hashes the lease's request carried: confirmed
	// on the policy when the attempt ended well, else dropped.
	PrefixHashes []prefix.Hash `json:"prefix_hashes,omitempty"`
	// CachedTokens is the prompt tokens the engine reported cached; nil
	// when it reported none.
	CachedTokens *int `json:"cached_tokens,omitempty" validate:"omitempty,min=0"`
}

// LeaseFailure is a failed attempt: when it began, and what happened.
type LeaseFailure struct {
	At     time.Time `json:"at" validate:"required"`
	Reason string    `json:"reason" validate:"max=4096"`
}

// Routable is the answer to GET /internal/routable: the ids of the
// policies that can be routed to now, in index order, and every model a
// registered policy serves, sorted.
type Routable struct {
	Available []string `json:"available"`
	Models    []string `json:"models"`
}

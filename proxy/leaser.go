package proxy

import (
	"context"
	"time"

	"github.com/policyrouter/policyrouter/prefix"
	"github.com/policyrouter/policyrouter/routing"
)

// Leaser is what the proxy asks of the routing state: a policy for each
// attempt, under a lease held as long as the attempt lasts, and the lease
// back when it ends. The leader implements it over its own routing.State
// (handlers); a follower may implement it by asking the leader over HTTP,
// so every call takes a context and passes values, and the errors are
// values the proxy hands to Config.WriteError. Implementations must be
// safe for concurrent use.
type Leaser interface {
	// Select decides the policy of one attempt of a proxied request and
	// leases it, waiting up to req.Wait for one to be idle. The Decision
	// carries the policy (its URL and key), its weight version at
	// dispatch and the lease Release ends. The errors are the decision's
	// coded reasons, as routing.State.Select returns them
	// (routing.ErrNoPolicies, a *routing.WaitError, a
	// *routing.ModelNotFoundError, routing.ErrReset, ...), or ctx.Err()
	// when the caller left; the proxy writes them with Config.WriteError.
	Select(ctx context.Context, req Request) (routing.Decision, error)
	// Release ends d's lease: the attempt is over, however it ended, as
	// out says. A lease that ended already (its TTL, its policy's
	// removal, an abort) is not an error; the error is for a release that
	// could not be made, and the proxy only logs it.
	Release(ctx context.Context, d routing.Decision, out Outcome) error
	// Available returns the policies that can be routed to now, in index
	// order.
	Available(ctx context.Context) ([]routing.Policy, error)
	// ServedModels returns every model id some registered policy serves,
	// sorted (routing.State.ServedModels).
	ServedModels(ctx context.Context) ([]string, error)
	// Returning reports whether the policy with the given id was taken
	// out of routing by the router itself (a rolling update of its own,
	// or POST /fleet/sleep) and so will come back, and by when at the
	// latest. An abort from such a policy is the router's doing: the
	// generation it ended may wait until then for a policy, when there is
	// no other. Not (ok false) when it cannot say: the abort then ends the
	// answer, as one the router did not cause.
	Returning(ctx context.Context, policyID string) (until time.Time, ok bool)
}

// StreamForms says how policy servers stream a native /generate, for
// continuing an aborted stream in the form its client has been reading
// (resume_stream.go) when the stream ended before its chunks showed it.
// The poller, which reads it from each SGLang server's info, is one.
// Implementations must be safe for concurrent use and must not block.
type StreamForms interface {
	// IncrementalStreaming reports whether p's server streams
	// incremental chunks (SGLang's --incremental-streaming-output: each
	// chunk holds its new tokens only) or cumulative ones (every token so
	// far); known is false when that is not known.
	IncrementalStreaming(p routing.Policy) (incremental, known bool)
}

// Request is the routing input of one attempt of a proxied request, read
// from its headers and body: what /select takes, with the router by name.
type Request struct {
	// Router names a router that leases (routing.Router.Leases).
	Router string
	// EnvID names the env worker (X-Env-ID).
	EnvID string
	// Session is the session key (X-Session-ID or X-SMG-Routing-Key).
	Session string
	// Wait bounds the wait for an idle policy (X-Select-Timeout-MS).
	Wait time.Duration
	// StickyWait is how long a session waits for its busy home, part of
	// Wait (X-Sticky-Wait-MS).
	StickyWait time.Duration
	// MinVersion, when set, is the request's weight-version floor
	// (X-Min-Weight-Version).
	MinVersion *int64
	// LeaseTTL guards the lease against a bug; 0 is the state's default.
	LeaseTTL time.Duration
	// Model is the model the body names, "" for none.
	Model string
	// Route is the engine endpoint the request is for ("/generate", ...).
	Route string
	// Exclude names the policies (by id) this request failed on already.
	Exclude []string
	// Prefix is the prompt's block hashes (package prefix), for
	// prefix-cache affinity; nil when the request opted out
	// (X-Prefix-Affinity: 0, --prefix-affinity=false) or has no full block.
	Prefix []prefix.Hash
	// AwaitReturn: the policies are out of routing by the router's own
	// doing (Leaser.Returning), and the attempt waits up to Wait for one
	// to return rather than failing at once because none can route now
	// (routing.SelectRequest.AwaitReturn).
	AwaitReturn bool
}

// Outcome is how an attempt ended, as Release reports it.
type Outcome struct {
	// Failure, when not nil, counts against the policy's health, as a
	// failed probe does.
	Failure *Failure
	// Unfinished says that the policy may still be working on the
	// attempt: the request reached it and its answer was not read to the
	// end (the client left, --proxy-timeout, the answer was cut). The
	// lease's work then keeps counting against the policy's capacity
	// until a probe shows what the engine still runs
	// (routing.State.ReleaseUnfinished): an engine goes on with a request
	// until it notices the connection closed, if it ever does.
	Unfinished bool
	// Prefix is the attempt's Request.Prefix: a policy that answered whole
	// holds it now (confirmed), else it is dropped as pending.
	Prefix []prefix.Hash
	// CachedTokens is how many prompt tokens the engine reported cached
	// in its answer (SGLang meta_info.cached_tokens, vLLM
	// usage.prompt_tokens_details.cached_tokens) when CachedKnown.
	CachedTokens int
	CachedKnown  bool
}

// Failure is why an attempt counts against its policy's health.
type Failure struct {
	// At is when the attempt began.
	At time.Time
	// Reason is what happened, for the policy's last_error.
	Reason string
}

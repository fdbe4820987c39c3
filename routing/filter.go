package routing

import "sync/atomic"

// A decision runs in stages, as the Inference Extension's scheduler does:
// filters narrow the candidates, an optional prefer stage offers the
// request to one policy first (the session's home, with its bounded wait:
// select.go), and the router picks among what is left.
//
// The availability filter (healthy, not draining, heard from, with room:
// policyRuntime.available and occupancy.go) is applied once, by the idle
// deques; the filters below are what a request asks beyond it. Adding a
// criterion is one file with one Filter and one line in filters.

// A Filter is one criterion a policy must meet to serve a request. Keep is
// called under the routing state's lock for each policy a router
// considers, so it must be cheap and must not block; it reads the request
// (q, a copy: a decision allocates nothing for its filters) and a
// read-only view of the policy (c), never the ledger.
type Filter interface {
	Keep(q Query, c Candidate) bool
}

// filters is the pipeline: every decision's candidates pass each of them,
// in order.
var filters = []Filter{
	versionFilter{}, // filter_version.go
	excludeFilter{}, // filter_exclude.go
	modelFilter{},   // filter_model.go
	routeFilter{},   // filter_route.go
}

// The score stage of a decision (filters → prefer → score → pick) rates
// the candidates that passed the filters, and every decision obeys the
// ratings:
//
//   - /select: among the idle candidates whose load is within
//     PrefixLoadBound of the least loaded one's, the highest rated
//     (scoreLocked, score_prefix.go);
//   - a freed slot: the longest waiter, but a younger one that rates the
//     slot's policy may go ahead of it, a bounded number of times
//     (waiterForLocked, handoff.go);
//   - /assign: the tasks gather on the highest rated candidates within
//     the same bound (assign_score.go).
//
// Two kinds of rating add up: the prefix index's, the blocks of the
// request's prompt a candidate is expected to hold (built in, since it
// reads the request's hashes and the index: score_prefix.go), and each
// Scorer's below. Where nothing is rated (no hashes, no scorer's opinion)
// the router decides alone: the seed's answers. Adding a scorer is one
// file with one Scorer and one line in scorers.

// A Scorer rates how much a request (q) wants a policy (c): 0 for no
// opinion, more for more. Like a Filter it is called under the routing
// state's lock, so it must be cheap and must not block, and it reads only
// the request and a read-only view of the policy.
type Scorer interface {
	Rate(q Query, c Candidate) int
}

// scorers are the score stage's raters besides the prefix index.
var scorers = []Scorer{}

// rateLocked is what the scorers together rate rt for q. Caller must hold
// State.mu.
func rateLocked(q *Query, rt *policyRuntime) int {
	n := 0
	for _, s := range scorers {
		n += s.Rate(*q, Candidate{rt})
	}
	return n
}

// Query is what one request asks of its policy beyond availability: the
// request's side of the filters. It is three words, copied to each
// filter: what only some requests ask (the proxy's) sits behind ask.
type Query struct {
	// floor is the request's own weight-version floor when shared is nil;
	// otherwise the floor is the State's (SetMinVersion), read at each
	// check, so that a waiting request follows a floor changed while it
	// waits.
	floor  int64
	shared *atomic.Int64
	ask    *asks // nil when the request asks nothing else
}

// asks are the criteria of a request beyond its floor.
type asks struct {
	exclude []string
	model   string
	route   string
	serves  func(p *Policy, route string) bool
}

// Exclude names policies (by id) the request must not get.
func (q Query) Exclude() []string {
	if q.ask == nil {
		return nil
	}
	return q.ask.exclude
}

// Model is the model id the request names ("" for none): only policies
// serving it qualify.
func (q Query) Model() string {
	if q.ask == nil {
		return ""
	}
	return q.ask.model
}

// Route is the engine endpoint the request goes to (e.g. "/generate"; ""
// for none): only policies whose engine serves it qualify (Options.Serves).
func (q Query) Route() string {
	if q.ask == nil {
		return ""
	}
	return q.ask.route
}

// Floor is the request's weight-version floor now.
func (q Query) Floor() int64 {
	if q.shared != nil {
		return q.shared.Load()
	}
	return q.floor
}

// ok reports whether rt passes every filter. Caller must hold State.mu.
func (q *Query) ok(rt *policyRuntime) bool {
	c := Candidate{rt}
	for _, f := range filters {
		if !f.Keep(*q, c) {
			return false
		}
	}
	return true
}

// first returns the first slot of a deque, from s on along links of kind,
// whose policy passes the filters, or nil. Caller must hold State.mu.
func (q *Query) first(s *slot, kind int) *slot {
	for ; s != nil && !q.ok(s.rt); s = s.links[kind].next {
	}
	return s
}

// Candidate is the read-only view of one policy that filters and routers
// get: what caddy's selection policies see of an upstream, not the ledger.
// Its methods are valid only under the routing state's lock, for the
// duration of the call that received it.
type Candidate struct{ rt *policyRuntime }

// Policy is the policy's registration.
func (c Candidate) Policy() *Policy { return &c.rt.policy }

// Node is the policy's effective node.
func (c Candidate) Node() string { return c.rt.node }

// Version is the policy's weight version.
func (c Candidate) Version() int64 { return c.rt.version.Load() }

// Fresh reports whether the policy's version meets floor and its own hold
// (a policy that joined during a rolling update gets no work below the
// update's version).
func (c Candidate) Fresh(floor int64) bool { return c.rt.fresh(floor) }

// Occupancy is max(engine load, outside load + leases) (occupancy.go).
func (c Candidate) Occupancy() int64 { return c.rt.occupancy() }

// Capacity is the policy's number of slots.
func (c Candidate) Capacity() int { return len(c.rt.slots) }

// Models are the model ids the policy serves: registered, else reported by
// its engine; nil when neither is known.
func (c Candidate) Models() []string {
	if len(c.rt.policy.Models) > 0 {
		return c.rt.policy.Models
	}
	return c.rt.models
}

// Load is the policy's tracked /assign load plus its leases out.
func (c Candidate) Load() int64 { return int64(c.rt.inflight) + c.rt.load }

// Package routing holds the routers of policyrouter and their live state.
//
// The algorithms reproduce the seed's four routers exactly (order and
// tie-breaks): AssignLeastLoaded is SimpleRouter, AssignNodeAffinity is
// NodeAffinityRouter, SelectIdle is SyncSimpleRouter and SelectRoundRobin is
// SyncNodeAffinityRouter. State adds what the seed lacks: capacity per
// policy, tracked loads, waiting instead of spinning when nothing is idle,
// leases that end only when their holder says so (or at their TTL),
// occupancy that counts an engine's own load, health from probes, drain,
// paused and asleep engines, and the policies' own answers (busy, not yet
// heard from) as the truth every router acts on.
//
// A decision runs in stages over one snapshot, under State.mu:
//
//	stage    file                       reads                           changes
//	filters  filter*.go, occupancy.go   the candidate through View      nothing
//	prefer   prefer.go, sticky.go       the session's home and ring     nothing (a home-only wait)
//	score    filter.go, score_prefix.go View, the prefix index, the     pending blocks of the choice
//	                                    scorers' ratings
//	pick     router_*.go (router.go)    View: idle units, load, node    nothing: returns a Choice
//	lease    handoff.go                 the Choice                      the ledger: slot, lease, TTL
//
// Availability is written once (policyRuntime.outState, room in
// occupancy.go): the deques, the waiters, /assign, the errors of a 503
// and /stats read it. /select
// runs all five (select.go; a wait in await.go). A freed slot goes to a
// waiter by handoff.go's waiterForLocked: the filters of the waiter's
// query, its home first, then arrival order with a bounded bypass for a
// waiter that rates the slot's policy (filter.go: its prompt is cached
// there, or a scorer rates it); no router runs there. /assign runs its own
// algorithms (assign.go, the seed's SimpleRouter and NodeAffinityRouter)
// over the available policies that pass the filters (assign_state.go; a
// stateless /assign, whose loads are the caller's, only the availability
// and the floor), with its sticky stage
// (assign_sticky.go); rated candidates then gather the tasks
// (assign_score.go). Where nothing is rated, every decision is the
// router's alone. Routers are one type per file behind two small
// interfaces, Assigner and Selector. One table (router.go) names the
// routers; the API's validation, the handlers, the --router flag and the
// OpenAPI enums all come from it. Adding a router is one file, its tests
// and one row; adding a criterion is one file and one line in filters,
// adding a rating one file and one line in scorers.
//
// State publishes an immutable Snapshot of policies and topology with
// atomic.Pointer; readers never lock it. Live counters (loads, leases, idle
// deques, round-robin positions) sit behind one mutex and outlive
// snapshots. Nothing here knows about HTTP or JSON.
package routing

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
// A /select decision runs in stages: filters (filter.go: availability,
// written once in policyRuntime.available and occupancy.go; then one file
// per criterion: version, exclusions, model, route), the prefer stage
// (prefer.go: a session's home, with its bounded wait), and the router's
// pick over a read-only View (view.go). Routers are one type per file
// behind two small interfaces, Assigner and Selector. One table
// (router.go) names the routers; the API's validation, the handlers, the
// --router flag and the OpenAPI enums all come from it. Adding a router is
// one file, its tests and one row; adding a criterion is one file and one
// line in filters.
//
// State publishes an immutable Snapshot of policies and topology with
// atomic.Pointer; readers never lock it. Live counters (loads, leases, idle
// deques, round-robin positions) sit behind one mutex and outlive
// snapshots. Nothing here knows about HTTP or JSON.
package routing

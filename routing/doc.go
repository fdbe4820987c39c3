// Package routing holds the routers of policyrouter and their live state.
//
// The algorithms reproduce the seed's four routers exactly (order and
// tie-breaks): AssignLeastLoaded is SimpleRouter, AssignNodeAffinity is
// NodeAffinityRouter, SelectIdle is SyncSimpleRouter and SelectRoundRobin is
// SyncNodeAffinityRouter. State adds what the seed lacks: capacity per
// policy, tracked loads, waiting instead of spinning when nothing is idle,
// leases that can be released or expire, health from probes, drain, and the
// policies' own answers (busy, not yet heard from) as the truth every router
// acts on.
//
// Routers are one type per file behind two small interfaces, Assigner and
// Selector, over the immutable Snapshot and the ledger of live state. The
// availability filter (healthy, not draining, heard from) is written once,
// in policyRuntime.available. One table (router.go) names the routers; the
// API's validation, the handlers, the --router flag and the OpenAPI enums
// all come from it. Adding a router is one file, its tests and one row.
//
// State publishes an immutable Snapshot of policies and topology with
// atomic.Pointer; readers never lock it. Live counters (loads, leases, idle
// deques, round-robin positions) sit behind one mutex and outlive
// snapshots. Nothing here knows about HTTP or JSON.
package routing

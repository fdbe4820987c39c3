// Package routing holds the routers of policyrouter and their live state.
//
// The algorithms reproduce the seed's four routers exactly (order and
// tie-breaks): LeastLoaded is SimpleRouter, NodeAffinity is
// NodeAffinityRouter, Select with SelectIdle is SyncSimpleRouter and with
// SelectRoundRobin is SyncNodeAffinityRouter. State adds what the seed
// lacks: capacity per policy, tracked loads, waiting instead of spinning
// when nothing is idle, leases that can be released, health from probes and
// drain.
//
// State publishes an immutable Snapshot of policies and topology with
// atomic.Pointer; readers never lock it. Live counters (loads, leases, idle
// deques, round-robin positions) sit behind one mutex and outlive
// snapshots. Nothing here knows about HTTP or JSON.
package routing

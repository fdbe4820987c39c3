// Package store keeps the registered policies (routing.Policy, the one
// domain type of a policy) and the topology: the state an operator set up,
// as opposed to the soft routing state (loads, leases), which policies
// report again after a restart.
package store

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/policyrouter/policyrouter/routing"
)

// ErrNotFound is returned for a policy id that is not stored.
var ErrNotFound = errors.New("not found")

// Topology is the seed's component_distribution: node id -> component kind
// ("env", "eval", ...) -> ids.
type Topology map[string]map[string][]int

// Clone returns a copy that shares nothing with t.
func (t Topology) Clone() Topology {
	if t == nil {
		return nil
	}
	out := make(Topology, len(t))
	for node, kinds := range t {
		k := make(map[string][]int, len(kinds))
		for kind, ids := range kinds {
			k[kind] = slices.Clone(ids)
		}
		out[node] = k
	}
	return out
}

// Weights is the trainer's current weight version and how stale a policy
// may be: policies below Version - MaxStaleness get no work. A nil
// MaxStaleness sets no floor.
type Weights struct {
	Version      int64  `json:"version"`
	MaxStaleness *int64 `json:"max_staleness,omitempty"`
}

// Clone returns a copy that shares nothing with w.
func (w Weights) Clone() Weights {
	if w.MaxStaleness != nil {
		k := *w.MaxStaleness
		w.MaxStaleness = &k
	}
	return w
}

// MinVersion is the floor the setting puts on policies' versions: 0 when
// it sets none.
func (w Weights) MinVersion() int64 {
	if w.MaxStaleness == nil {
		return 0
	}
	return max(w.Version-*w.MaxStaleness, 0)
}

// Registration is everything a Store holds.
type Registration struct {
	Policies []routing.Policy // in index order
	Topology Topology
	Weights  Weights
	// Updates holds the rolling updates' documents by id, opaque to the
	// store.
	Updates map[string][]byte
}

// Store keeps the registration. A method returns only after its change is
// durable for the implementation (in memory: applied; on disk: fsync'd), so
// a caller may acknowledge the change when it returns nil. Writes are
// atomic: after a crash either all of one call is visible or none of it.
// Implementations are safe for concurrent use; the caller serialises
// read-modify-write sequences itself.
type Store interface {
	// Load returns the whole registration, policies in index order.
	Load(ctx context.Context) (Registration, error)
	// PutPolicy stores p, replacing a stored policy with the same id.
	PutPolicy(ctx context.Context, p routing.Policy) error
	// DeletePolicy removes the policy with the given id; ErrNotFound if none.
	DeletePolicy(ctx context.Context, id string) error
	// ReplacePolicies replaces every stored policy with ps.
	ReplacePolicies(ctx context.Context, ps []routing.Policy) error
	// PutTopology replaces the topology.
	PutTopology(ctx context.Context, t Topology) error
	// PutRegistration replaces every stored policy and the topology at
	// once: after a crash either both changed or neither did. The weights
	// setting is left as it is.
	PutRegistration(ctx context.Context, reg Registration) error
	// PutWeights replaces the weights setting.
	PutWeights(ctx context.Context, w Weights) error
	// PutUpdate stores the document of the rolling update with the given
	// id, replacing the one stored before.
	PutUpdate(ctx context.Context, id string, doc []byte) error
	// Close releases the store's resources.
	Close() error
}

// sortPolicies sorts ps by index, then by id, so that the order is the
// same for every implementation even when indices repeat.
func sortPolicies(ps []routing.Policy) {
	slices.SortFunc(ps, func(a, b routing.Policy) int {
		if c := cmp.Compare(a.Index, b.Index); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// Package store keeps the registered policies (routing.Policy, the one
// domain type of a policy) and the topology: the state an operator set up,
// as opposed to the soft routing state (loads, leases), which policies
// report again after a restart.
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/policyrouter/policyrouter/routing"
)

// ErrNotFound is returned for a policy id that is not stored.
var ErrNotFound = errors.New("not found")

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
	Topology routing.Topology
	Weights  Weights
	// Updates holds the rolling updates' documents by id, opaque to the
	// store.
	Updates map[string][]byte
	// Revision identifies the stored policies, topology and weights: every
	// Apply makes a greater one. It is 0 for a store never written. An
	// update document's write does not change it.
	Revision int64
}

// AnyRevision makes Apply unconditional.
const AnyRevision int64 = -1

// ErrStale is returned by Apply when the store's revision is not the one
// the caller read: another writer (another router replica) changed the
// registration in between. Load again, re-check and retry.
var ErrStale = errors.New("the registration changed since it was read")

// ErrUnavailable wraps the errors of a store that did not answer (etcd
// unreachable, or without a quorum, within the request timeout): nothing
// was written, and the call may be made again.
var ErrUnavailable = errors.New("store unavailable")

// Change is one atomic change of the registration.
type Change struct {
	// Put stores these policies, each replacing a stored policy with the
	// same id; with ReplacePolicies they replace every stored policy.
	Put             []routing.Policy
	ReplacePolicies bool
	// Delete removes the policies with these ids; ErrNotFound when one is
	// not stored (and then nothing changes).
	Delete []string
	// Topology, when set, replaces the topology.
	Topology *routing.Topology
	// Weights, when set, replaces the weights setting.
	Weights *Weights
}

// Apply returns reg changed by c, sharing nothing with reg. Revision and
// Updates are left to the caller.
func (reg Registration) Apply(c Change) (Registration, error) {
	byID := make(map[string]routing.Policy, len(reg.Policies)+len(c.Put))
	if !c.ReplacePolicies {
		for _, p := range reg.Policies {
			byID[p.ID] = p
		}
	}
	for _, id := range c.Delete {
		if _, ok := byID[id]; !ok {
			return Registration{}, fmt.Errorf("delete policy %q: %w", id, ErrNotFound)
		}
		delete(byID, id)
	}
	for _, p := range c.Put { // the last of duplicate ids wins
		byID[p.ID] = p
	}
	out := Registration{Policies: make([]routing.Policy, 0, len(byID)), Topology: reg.Topology.Clone(), Weights: reg.Weights.Clone()}
	for _, p := range byID {
		out.Policies = append(out.Policies, p.Clone())
	}
	sortPolicies(out.Policies)
	if c.Topology != nil {
		out.Topology = c.Topology.Clone()
	}
	if c.Weights != nil {
		out.Weights = c.Weights.Clone()
	}
	return out, nil
}

// Store keeps the registration. A method returns only after its change is
// durable for the implementation (in memory: applied; on disk: fsync'd;
// in etcd: committed by a quorum), so a caller may acknowledge the change
// when it returns nil. Writes are atomic: after a crash either all of one
// call is visible or none of it. Implementations are safe for concurrent
// use, also by several processes where the implementation is shared
// (etcd): a read-modify-write passes the revision it read to Apply, which
// refuses it with ErrStale if another write came first.
type Store interface {
	// Load returns the whole registration, policies in index order, and
	// its revision.
	Load(ctx context.Context) (Registration, error)
	// Apply makes change c if the stored revision is ifRevision (or
	// unconditionally for AnyRevision), and returns the new revision. It
	// returns ErrStale, and changes nothing, when the revision differs.
	Apply(ctx context.Context, ifRevision int64, c Change) (int64, error)
	// PutUpdate stores the document of the rolling update with the given
	// id, replacing the one stored before.
	PutUpdate(ctx context.Context, id string, doc []byte) error
	// Watch returns a channel that receives a value, soon after, whenever
	// the stored registration or an update document may have changed, by
	// this process or another; notifications coalesce (the channel holds
	// at most one). It also receives one at the start, and after a lost
	// connection is regained, when changes may have been missed. The
	// watch ends with ctx; the channel is never closed.
	Watch(ctx context.Context) <-chan struct{}
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

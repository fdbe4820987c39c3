package store

import (
	"bytes"
	"context"
	"sync"

	"github.com/policyrouter/policyrouter/routing"
)

// Memory is a Store that keeps the registration in memory: the default,
// lost on exit.
type Memory struct {
	mu       sync.Mutex
	policies map[string]routing.Policy
	topology Topology
	weights  Weights
	updates  map[string][]byte
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{policies: make(map[string]routing.Policy)}
}

// Load implements Store.
func (m *Memory) Load(ctx context.Context) (Registration, error) {
	if err := ctx.Err(); err != nil {
		return Registration{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	reg := Registration{Policies: make([]routing.Policy, 0, len(m.policies)), Topology: m.topology.Clone(), Weights: m.weights.Clone(),
		Updates: make(map[string][]byte, len(m.updates))}
	for id, doc := range m.updates {
		reg.Updates[id] = bytes.Clone(doc)
	}
	for _, p := range m.policies {
		reg.Policies = append(reg.Policies, p.Clone())
	}
	sortPolicies(reg.Policies)
	return reg, nil
}

// PutPolicy implements Store.
func (m *Memory) PutPolicy(ctx context.Context, p routing.Policy) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.policies[p.ID] = p.Clone()
	return nil
}

// DeletePolicy implements Store.
func (m *Memory) DeletePolicy(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.policies[id]; !ok {
		return ErrNotFound
	}
	delete(m.policies, id)
	return nil
}

// ReplacePolicies implements Store.
func (m *Memory) ReplacePolicies(ctx context.Context, ps []routing.Policy) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	next := byID(ps)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.policies = next
	return nil
}

// byID returns copies of ps by id; the last of duplicate ids wins.
func byID(ps []routing.Policy) map[string]routing.Policy {
	out := make(map[string]routing.Policy, len(ps))
	for _, p := range ps {
		out[p.ID] = p.Clone()
	}
	return out
}

// PutUpdate implements Store.
func (m *Memory) PutUpdate(ctx context.Context, id string, doc []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.updates == nil {
		m.updates = make(map[string][]byte)
	}
	m.updates[id] = bytes.Clone(doc)
	return nil
}

// PutWeights implements Store.
func (m *Memory) PutWeights(ctx context.Context, w Weights) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.weights = w.Clone()
	return nil
}

// PutRegistration implements Store.
func (m *Memory) PutRegistration(ctx context.Context, reg Registration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	next := byID(reg.Policies)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.policies = next
	m.topology = reg.Topology.Clone()
	return nil
}

// PutTopology implements Store.
func (m *Memory) PutTopology(ctx context.Context, t Topology) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.topology = t.Clone()
	return nil
}

// Close implements Store.
func (m *Memory) Close() error { return nil }

package store

import (
	"bytes"
	"context"
	"sync"
)

// Memory is a Store that keeps the registration in memory: the default,
// lost on exit.
type Memory struct {
	notifier

	mu      sync.Mutex
	reg     Registration // without Updates
	updates map[string][]byte
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{updates: make(map[string][]byte)}
}

// Load implements Store.
func (m *Memory) Load(ctx context.Context) (Registration, error) {
	if err := ctx.Err(); err != nil {
		return Registration{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	reg, _ := m.reg.Apply(Change{})
	reg.Revision = m.reg.Revision
	reg.Updates = make(map[string][]byte, len(m.updates))
	for id, doc := range m.updates {
		reg.Updates[id] = bytes.Clone(doc)
	}
	return reg, nil
}

// Apply implements Store.
func (m *Memory) Apply(ctx context.Context, ifRevision int64, c Change) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if ifRevision != AnyRevision && ifRevision != m.reg.Revision {
		return 0, ErrStale
	}
	next, err := m.reg.Apply(c)
	if err != nil {
		return 0, err
	}
	next.Revision = m.reg.Revision + 1
	m.reg = next
	m.notify()
	return next.Revision, nil
}

// PutUpdate implements Store.
func (m *Memory) PutUpdate(ctx context.Context, id string, doc []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.updates[id] = bytes.Clone(doc)
	m.notify()
	return nil
}

// Watch implements Store.
func (m *Memory) Watch(ctx context.Context) <-chan struct{} { return m.watch(ctx) }

// Close implements Store.
func (m *Memory) Close() error { return nil }

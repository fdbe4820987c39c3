package updates

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"

	"github.com/policyrouter/policyrouter/registry"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
)

// lockCheckStore is a store that records, at each write, whether the
// manager's lock was held (by anyone: the test drives the manager from
// one goroutine, so only the writer could hold it).
type lockCheckStore struct {
	store.Store
	m      *Manager
	writes []string
	locked []string
}

func (s *lockCheckStore) check(what string) {
	if s.m == nil {
		return // registering, before the manager exists
	}
	s.writes = append(s.writes, what)
	if !s.m.mu.TryLock() {
		s.locked = append(s.locked, what)
		return
	}
	s.m.mu.Unlock()
}

func (s *lockCheckStore) Apply(ctx context.Context, rev int64, c store.Change) (int64, error) {
	s.check("registration")
	return s.Store.Apply(ctx, rev, c)
}

func (s *lockCheckStore) PutUpdate(ctx context.Context, id string, doc []byte) error {
	s.check("update " + id)
	return s.Store.PutUpdate(ctx, id, doc)
}

// The manager writes to the store (its documents, and the drains and
// resumes through the registry) outside its lock, and its readers see an
// update as last stored: never ahead of the store.
func TestWritesOutsideTheLock(t *testing.T) {
	ctx := context.Background()
	st := &lockCheckStore{Store: store.NewMemory()}
	state := routing.New(routing.Options{})
	reg, err := registry.Open(ctx, st, state)
	if err != nil {
		t.Fatal(err)
	}
	var specs []registry.Spec
	for i := range 2 {
		specs = append(specs, registry.Spec{URL: "http://p" + strconv.Itoa(i), Index: &i})
	}
	if _, err := reg.ReplaceRegistration(ctx, specs, nil); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Registry: reg, State: state, Store: st, Logger: slog.New(slog.DiscardHandler)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st.m = m
	var calls sync.WaitGroup
	defer calls.Wait()
	step := func() {
		m.step(ctx, &calls)
		m.flush()
	}

	u, err := m.Start(ctx, Spec{Version: 1, MaxUnavailable: 2})
	if err != nil {
		t.Fatal(err)
	}
	// One step takes both policies in a wave; until its writes are made,
	// readers see the update as Start stored it.
	m.step(ctx, &calls)
	if got, _ := m.Get(u.ID); got.Waves != 0 {
		t.Errorf("before the store writes, Get shows wave %d; want the stored update, in no wave", got.Waves)
	}
	m.flush()
	got, _ := m.Get(u.ID)
	if got.Waves != 1 {
		t.Fatalf("after the store writes, Get shows wave %d; want 1", got.Waves)
	}
	for _, p := range state.Stats().Policies {
		if !p.Draining {
			t.Errorf("policy %d not drained by the wave", p.Policy.Index)
		}
	}
	step() // both updating, waiting for the trainer
	ids := []string{got.Policies[0].ID, got.Policies[1].ID}
	if _, err := m.Done(ctx, u.ID, ids); err != nil {
		t.Fatal(err)
	}
	step() // confirmed: done and resumed
	step() // every policy at the version: the update ends
	if got, _ := m.Get(u.ID); got.State != StateSucceeded {
		t.Fatalf("update %s; want succeeded", got.State)
	}
	for _, p := range state.Stats().Policies {
		if p.Draining {
			t.Errorf("policy %d still drained after its update", p.Policy.Index)
		}
	}

	if len(st.writes) < 6 { // start, 2 drains, the wave, done, 2 resumes, the end
		t.Errorf("writes %v; want the update's and its drains and resumes", st.writes)
	}
	if len(st.locked) > 0 {
		t.Errorf("writes made with the manager's lock held: %v", st.locked)
	}
}

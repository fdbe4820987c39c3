package updates

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
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
	// applyErr, when set, fails the registration's writes.
	applyErr error
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
	if s.applyErr != nil {
		return 0, s.applyErr
	}
	return s.Store.Apply(ctx, rev, c)
}

func (s *lockCheckStore) PutUpdate(ctx context.Context, id string, doc []byte) error {
	s.check("update " + id)
	return s.Store.PutUpdate(ctx, id, doc)
}

// newTestManager is a manager of n registered policies, over a
// lockCheckStore, driven by the test (no Run).
func newTestManager(t *testing.T, n int, logger *slog.Logger) (*Manager, *lockCheckStore, *routing.State) {
	t.Helper()
	ctx := context.Background()
	st := &lockCheckStore{Store: store.NewMemory()}
	state := routing.New(routing.Options{})
	reg, err := registry.Open(ctx, st, state)
	if err != nil {
		t.Fatal(err)
	}
	var specs []registry.Spec
	for i := range n {
		specs = append(specs, registry.Spec{URL: "http://p" + strconv.Itoa(i), Index: &i})
	}
	if _, err := reg.ReplaceRegistration(ctx, specs, nil); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Registry: reg, State: state, Store: st, Logger: logger}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st.m = m
	return m, st, state
}

// The manager writes to the store (its documents, and the drains and
// resumes through the registry) outside its lock, and its readers see an
// update as last stored: never ahead of the store.
func TestWritesOutsideTheLock(t *testing.T) {
	ctx := context.Background()
	m, st, state := newTestManager(t, 2, slog.New(slog.DiscardHandler))
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

// Resuming a policy removed during the update is not an error; any other
// failure to resume one is logged, whatever its message says.
func TestResumeRemovedPolicy(t *testing.T) {
	ctx := context.Background()
	var log bytes.Buffer
	m, st, state := newTestManager(t, 2, slog.New(slog.NewTextHandler(&log, nil)))
	var calls sync.WaitGroup
	defer calls.Wait()
	u, err := m.Start(ctx, Spec{Version: 1, MaxUnavailable: 2})
	if err != nil {
		t.Fatal(err)
	}
	m.step(ctx, &calls)
	m.flush()
	pols := state.Snapshot().Policies()
	if err := m.cfg.Registry.Delete(ctx, pols[0].ID); err != nil {
		t.Fatal(err)
	}
	st.applyErr = errors.New("etcd: member not found") // a store failure, not a missing policy
	if _, err := m.Abort(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	var resumes []string
	for line := range strings.Lines(log.String()) {
		if strings.Contains(line, "rolling update: resume") {
			resumes = append(resumes, line)
		}
	}
	if len(resumes) != 1 || !strings.Contains(resumes[0], pols[1].ID) || !strings.Contains(resumes[0], "member not found") {
		t.Errorf("resume errors logged: %q; want one, for policy %s and the store's failure", resumes, pols[1].ID)
	}
}

package updates_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/policyrouter/policyrouter/fakepolicy"
	pfleet "github.com/policyrouter/policyrouter/fleet"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/poller"
	"github.com/policyrouter/policyrouter/registry"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
	"github.com/policyrouter/policyrouter/updates"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fleet is 16 fake policies on 4 nodes at weight version 7, registered
// with a router's registry, state and poller.
type fleet struct {
	f     *fakepolicy.Fleet
	st    store.Store
	state *routing.State
	reg   *registry.Registry
	nodes int

	mu         sync.Mutex
	violations []string
	changes    int
}

func newFleet(t *testing.T, st store.Store, updateTime time.Duration) *fleet {
	t.Helper()
	return newEngineFleet(t, st, 16, fakepolicy.Options{UpdateTime: updateTime}, nil)
}

// newEngineFleet is n fake policies on 4 nodes at weight version 7 (the
// string "7" for an engine's), served with opts (its Engine, keys), each
// registered as spec sets it up, with a router's registry, state and
// poller.
func newEngineFleet(t *testing.T, st store.Store, n int, opts fakepolicy.Options, spec func(*registry.Spec)) *fleet {
	t.Helper()
	opts.PerPolicyListeners = true
	f, err := fakepolicy.New(n, rand.NewPCG(1, 2), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	for i := range n {
		f.Policy(i).SetVersion(7)
		f.Policy(i).SetWeightVersion("7")
	}
	fl := &fleet{f: f, st: st, nodes: 4}
	fl.open(t)
	var specs []registry.Spec
	topo := routing.Topology{}
	for i := range n {
		idx := i
		s := registry.Spec{URL: f.URL(i), Index: &idx, Engine: opts.Engine}
		if spec != nil {
			spec(&s)
		}
		specs = append(specs, s)
		node := fmt.Sprintf("node-%d", i%4)
		if topo[node] == nil {
			topo[node] = map[string][]int{}
		}
		topo[node]["env"] = append(topo[node]["env"], i)
		topo[node]["eval"] = append(topo[node]["eval"], i)
	}
	if _, err := fl.reg.ReplaceRegistration(context.Background(), specs, topo); err != nil {
		t.Fatal(err)
	}
	return fl
}

// open builds the router's state and registry over the store, as a
// (re)started router does.
func (fl *fleet) open(t *testing.T) {
	t.Helper()
	fl.state = routing.New(routing.Options{Polled: true})
	reg, err := registry.Open(context.Background(), fl.st, fl.state)
	if err != nil {
		t.Fatal(err)
	}
	fl.reg = reg
}

// run starts a poller and an update manager and returns the manager and a
// function that stops both.
func (fl *fleet) run(t *testing.T) (*updates.Manager, func()) {
	t.Helper()
	return fl.runWith(t, nil)
}

// runLocked is run with the manager taking the given refit locks.
func (fl *fleet) runLocked(t *testing.T, locks *pfleet.Locks) *updates.Manager {
	t.Helper()
	m, _ := fl.runWith(t, locks)
	return m
}

func (fl *fleet) runWith(t *testing.T, locks *pfleet.Locks) (*updates.Manager, func()) {
	t.Helper()
	stored, err := fl.st.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	state := fl.state
	ready := func() bool { n, _ := state.Unprobed(); return n == 0 }
	m, err := updates.New(updates.Config{Registry: fl.reg, State: fl.state, Store: fl.st, Logger: slog.New(slog.DiscardHandler), OnChange: fl.check, Ready: ready, Locks: locks}, stored.Updates)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = poller.New(fl.state, poller.Config{Interval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}).Run(ctx)
	})
	wg.Go(func() { _ = m.Run(ctx) })
	poll.Until(t, "every policy heard from", func() bool { n, _ := fl.state.Unprobed(); return n == 0 })
	stop := func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return m, stop
}

// check is the manager's OnChange: at every change, no more than
// max_unavailable policies are held and no node falls below
// min_available_per_node routable policies.
func (fl *fleet) check(u updates.Update) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.changes++
	held := 0
	for _, p := range u.Policies {
		if p.Phase == updates.PhaseDraining || p.Phase == updates.PhaseUpdating || p.Phase == updates.PhaseFailed {
			held++
		}
	}
	if held > u.Spec.MaxUnavailable {
		fl.violations = append(fl.violations, fmt.Sprintf("%d policies held, max_unavailable %d", held, u.Spec.MaxUnavailable))
	}
	paused := 0
	for i := range fl.f.Len() {
		if fl.f.Policy(i).Paused() {
			paused++
		}
	}
	if paused > u.Spec.MaxUnavailable {
		fl.violations = append(fl.violations, fmt.Sprintf("%d engines paused, max_unavailable %d", paused, u.Spec.MaxUnavailable))
	}
	routable := map[string]int{}
	for _, ps := range fl.state.Stats().Policies {
		if ps.Healthy && !ps.Draining && ps.Heard {
			routable[ps.Node]++
		}
	}
	for n := range fl.nodes {
		node := fmt.Sprintf("node-%d", n)
		if routable[node] < u.Spec.MinAvailablePerNode {
			fl.violations = append(fl.violations, fmt.Sprintf("%s has %d routable policies, fewer than %d", node, routable[node], u.Spec.MinAvailablePerNode))
		}
	}
}

func (fl *fleet) wantNoViolations(t *testing.T) {
	t.Helper()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	for _, v := range fl.violations {
		t.Error(v)
	}
	if fl.changes == 0 {
		t.Error("the update never changed")
	}
}

func waitEnded(t *testing.T, m *updates.Manager, id string) updates.Update {
	t.Helper()
	var u updates.Update
	poll.Until(t, "the update to end", func() bool {
		var err error
		u, err = m.Get(id)
		return err == nil && u.State != updates.StateRunning
	})
	return u
}

func action(version int64) *updates.Action {
	return &updates.Action{Method: "POST", Path: "/update_weights_from_disk", Body: []byte(fmt.Sprintf(`{"model_path": "/ckpt/step-%d", "version": %d}`, version, version)), Timeout: 10 * time.Second}
}

// 16 policies on 4 nodes reach the new version in waves of at most 2,
// never leaving a node without a routable policy.
func TestRollingUpdateReachesVersion(t *testing.T) {
	fl := newFleet(t, store.NewMemory(), 50*time.Millisecond)
	m, _ := fl.run(t)
	u, err := m.Start(context.Background(), updates.Spec{Version: 8, Action: action(8), MaxUnavailable: 2, MinAvailablePerNode: 1, DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(context.Background(), updates.Spec{Version: 9, MaxUnavailable: 1}); err == nil {
		t.Error("a second update started while one runs")
	}
	u = waitEnded(t, m, u.ID)
	if u.State != updates.StateSucceeded || u.Failures != 0 {
		t.Fatalf("update ended %s with %d failures: %s", u.State, u.Failures, u.Error)
	}
	if u.Waves < 8 {
		t.Errorf("%d waves for 16 policies 2 at a time; want at least 8", u.Waves)
	}
	for _, ps := range fl.state.Stats().Policies {
		if ps.Version != 8 || ps.Draining {
			t.Errorf("policy %d: version %d, draining %v; want 8, resumed", ps.Policy.Index, ps.Version, ps.Draining)
		}
	}
	for i := range 16 {
		if got := fl.f.Policy(i).Updates(); got != 1 {
			t.Errorf("policy %d updated %d times; want once", i, got)
		}
	}
	fl.wantNoViolations(t)
}

// A failed action leaves its policy drained and counted; the others go on.
func TestFailedActionStaysDrained(t *testing.T) {
	fl := newFleet(t, store.NewMemory(), 20*time.Millisecond)
	fl.f.Policy(5).SetFailUpdates(true)
	m, _ := fl.run(t)
	u, err := m.Start(context.Background(), updates.Spec{Version: 8, Action: action(8), MaxUnavailable: 3, MinAvailablePerNode: 1, DrainTimeout: 5 * time.Second, MaxFailures: 1})
	if err != nil {
		t.Fatal(err)
	}
	u = waitEnded(t, m, u.ID)
	if u.Failures != 1 {
		t.Errorf("failures %d; want 1", u.Failures)
	}
	var failed *updates.Policy
	for _, p := range u.Policies {
		if p.Phase == updates.PhaseFailed {
			failed = p
		}
	}
	if failed == nil || failed.Index != 5 || failed.Error == "" {
		t.Fatalf("failed policy %+v; want policy 5 with its error", failed)
	}
	ps, _ := fl.state.PolicyStats(failed.ID)
	if !ps.Draining || ps.Version != 7 {
		t.Errorf("failed policy: draining %v, version %d; want drained at 7", ps.Draining, ps.Version)
	}
	fl.wantNoViolations(t)

	// With no failure allowed, the first one ends the update failed.
	fl.f.Policy(5).SetFailUpdates(false)
	if _, err := fl.reg.SetDraining(context.Background(), failed.ID, false); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		fl.f.Policy(i).SetFailUpdates(true)
	}
	u, err = m.Start(context.Background(), updates.Spec{Version: 9, Action: action(9), MaxUnavailable: 2, DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if u = waitEnded(t, m, u.ID); u.State != updates.StateFailed || u.Error == "" {
		t.Errorf("update with failing actions ended %s (%q); want failed, saying why", u.State, u.Error)
	}
}

// Abort resumes everything the update drained.
func TestAbortResumesEverything(t *testing.T) {
	fl := newFleet(t, store.NewMemory(), 10*time.Second)
	m, _ := fl.run(t)
	u, err := m.Start(context.Background(), updates.Spec{Version: 8, Action: action(8), MaxUnavailable: 4, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "a wave updating", func() bool {
		u, _ = m.Get(u.ID)
		for _, p := range u.Policies {
			if p.Phase == updates.PhaseUpdating {
				return true
			}
		}
		return false
	})
	if u, err = m.Abort(context.Background(), u.ID); err != nil || u.State != updates.StateAborted {
		t.Fatalf("Abort = %s, %v", u.State, err)
	}
	for _, ps := range fl.state.Stats().Policies {
		if ps.Draining {
			t.Errorf("policy %d still drained after the abort", ps.Policy.Index)
		}
	}
	if _, err := m.Abort(context.Background(), u.ID); err == nil {
		t.Error("aborting an ended update succeeded")
	}
}

// A router that restarts mid-update continues it from the stored state.
func TestRestartContinues(t *testing.T) {
	st, err := store.OpenBolt(t.TempDir(), store.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fl := newFleet(t, st, 100*time.Millisecond)
	m, stop := fl.run(t)
	u, err := m.Start(context.Background(), updates.Spec{Version: 8, Action: action(8), MaxUnavailable: 2, MinAvailablePerNode: 1, DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "a few policies done", func() bool {
		u, _ = m.Get(u.ID)
		done := 0
		for _, p := range u.Policies {
			if p.Phase == updates.PhaseDone {
				done++
			}
		}
		return done >= 3
	})
	stop()

	fl.open(t) // the restarted router: state and registry from the store
	m2, _ := fl.run(t)
	if got, ok := m2.Running(); !ok || got.ID != u.ID {
		t.Fatalf("restarted router runs %+v, %v; want update %s", got.ID, ok, u.ID)
	}
	u = waitEnded(t, m2, u.ID)
	if u.State != updates.StateSucceeded {
		t.Fatalf("update ended %s after the restart: %s", u.State, u.Error)
	}
	for _, ps := range fl.state.Stats().Policies {
		if ps.Version != 8 || ps.Draining {
			t.Errorf("policy %d: version %d, draining %v", ps.Policy.Index, ps.Version, ps.Draining)
		}
	}
	fl.wantNoViolations(t)
}

// External mode: each wave's policies are listed ready; the trainer
// updates them and confirms, or they report the version themselves.
func TestExternalMode(t *testing.T) {
	fl := newFleet(t, store.NewMemory(), time.Millisecond)
	m, _ := fl.run(t)
	u, err := m.Start(context.Background(), updates.Spec{Version: 8, MaxUnavailable: 4, MinAvailablePerNode: 1, DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waves := 0
	for {
		u, _ = m.Get(u.ID)
		if u.State != updates.StateRunning {
			break
		}
		var ready []string
		for _, p := range u.Policies {
			if p.Phase == updates.PhaseUpdating && !p.Confirmed {
				ready = append(ready, p.ID)
				// The trainer loads the weights; the policy reports them.
				fl.f.Policy(p.Index).SetVersion(8)
			}
		}
		if len(ready) > 0 {
			waves++
			if _, err := m.Done(context.Background(), u.ID, ready); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if u.State != updates.StateSucceeded || waves < 4 {
		t.Fatalf("external update ended %s after %d confirmed waves: %s", u.State, waves, u.Error)
	}
	// Done is idempotent: a policy done already may be confirmed again,
	// even after the update ended; one that is not in it may not.
	if _, err := m.Done(context.Background(), u.ID, []string{u.Policies[0].ID}); err != nil {
		t.Errorf("Done again for a done policy of the ended update: %v", err)
	}
	if _, err := m.Done(context.Background(), u.ID, []string{"nope"}); !errors.Is(err, updates.ErrEnded) {
		t.Errorf("Done on the ended update for a policy not in it = %v; want ErrEnded", err)
	}
	fl.wantNoViolations(t)
}

// An update lists every policy it is to update from its start: those a
// wave has not taken yet are pending, in wave 0.
func TestPendingPoliciesAreListed(t *testing.T) {
	fl := newFleet(t, store.NewMemory(), time.Millisecond)
	m, _ := fl.run(t)
	fl.f.Policy(3).SetVersion(8) // at the version already: not in the update
	poll.Until(t, "the router to see policy 3 at version 8", func() bool {
		for _, ps := range fl.state.Stats().Policies {
			if ps.Policy.Index == 3 {
				return ps.Version == 8
			}
		}
		return false
	})
	u, err := m.Start(context.Background(), updates.Spec{Version: 8, MaxUnavailable: 1, DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Policies) != 15 {
		t.Errorf("Start's answer lists %d policies; want the 15 it is to update, pending", len(u.Policies))
	}
	poll.Until(t, "the first wave", func() bool {
		u, _ = m.Get(u.ID)
		return u.Waves == 1
	})
	phases := map[string]int{}
	for _, p := range u.Policies {
		phases[p.Phase]++
		if p.Index == 3 {
			t.Errorf("policy 3, at the version already, is listed as %s", p.Phase)
		}
		if (p.Phase == updates.PhasePending) != (p.Wave == 0) {
			t.Errorf("policy %d is %s in wave %d", p.Index, p.Phase, p.Wave)
		}
	}
	if len(u.Policies) != 15 || phases[updates.PhasePending] != 14 {
		t.Fatalf("the update lists %d policies, phases %v; want 15, of which 14 pending", len(u.Policies), phases)
	}
	if u, err = m.Abort(context.Background(), u.ID); err != nil {
		t.Fatal(err)
	}
	for _, p := range u.Policies {
		if p.Phase != updates.PhasePending {
			t.Errorf("after the abort policy %d is %s; want pending", p.Index, p.Phase)
		}
	}
}

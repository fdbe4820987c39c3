package updates_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/registry"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
	"github.com/policyrouter/policyrouter/updates"
)

// adminKey is the fake engines' --api-key; policies are registered with it
// as their admin key only, so that every call the router makes (probes
// fall back on it) must carry it.
const adminKey = "sk-admin-test"

func withAdminKey(s *registry.Spec) { k := adminKey; s.AdminAPIKey = &k }

// controlCalls is a fake engine's call log without the probes' GETs: the
// calls an update made, in order.
func controlCalls(p *fakepolicy.Policy) []string {
	var out []string
	for _, c := range p.Calls() {
		if !strings.HasPrefix(c, "GET ") {
			out = append(out, c)
		}
	}
	return out
}

func policyOf(u updates.Update, index int) *updates.Policy {
	for _, p := range u.Policies {
		if p.Index == index {
			return p
		}
	}
	return nil
}

// A rolling update of SGLang policies from disk calls each, in order,
// pause → update_weights_from_disk → continue_generation, with the
// version as the weight_version; never more than max_unavailable are
// paused or drained at once; each reports the new version after.
func TestSGLangDiskUpdateSequence(t *testing.T) {
	fl := newEngineFleet(t, store.NewMemory(), 8, fakepolicy.Options{Engine: fakepolicy.EngineSGLang, APIKey: adminKey, UpdateTime: 30 * time.Millisecond}, withAdminKey)
	m, _ := fl.run(t)
	u, err := m.Start(context.Background(), updates.Spec{Version: 8, ModelPath: "/ckpt/step-8", MaxUnavailable: 2, MinAvailablePerNode: 1, DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	u = waitEnded(t, m, u.ID)
	if u.State != updates.StateSucceeded {
		t.Fatalf("update ended %s: %s", u.State, u.Error)
	}
	want := []string{"POST /pause_generation", "POST /update_weights_from_disk", "POST /continue_generation"}
	for i := range 8 {
		fp := fl.f.Policy(i)
		if got := controlCalls(fp); !slices.Equal(got, want) {
			t.Errorf("policy %d engine calls %v; want %v", i, got, want)
		}
		if fp.WeightVersion() != "8" || fp.Paused() || fp.PauseMode() != "retract" {
			t.Errorf("policy %d: weight_version %q, paused %v, pause mode %q; want \"8\", resumed, retract (wait drains first)", i, fp.WeightVersion(), fp.Paused(), fp.PauseMode())
		}
		p := policyOf(u, i)
		if p == nil || p.LastCall == nil || p.LastCall.Path != "/continue_generation" || p.LastCall.Status != 200 || p.ReportedVersion != 8 || p.WeightVersion != "8" {
			t.Errorf("policy %d record %+v (last call %+v); want the continue call, version 8", i, p, p.LastCall)
		}
	}
	fl.wantNoViolations(t)
}

// External mode: the router pauses the wave and lists it ready; the
// trainer moves the weights and says done (twice: done is idempotent);
// the router sets the version (SGLang; vLLM has no such endpoint, so the
// step is skipped and the update records the version) and resumes.
func TestExternalUpdateSequence(t *testing.T) {
	for _, tt := range []struct {
		engine string
		want   []string
	}{
		{fakepolicy.EngineSGLang, []string{"POST /pause_generation", "POST /update_weight_version", "POST /continue_generation"}},
		// vLLM labels the version itself (dev mode's /update_weight_version),
		// and reports it on /weight_info.
		{fakepolicy.EngineVLLM, []string{"POST /pause?mode=wait", "POST /update_weight_version", "POST /resume"}},
	} {
		t.Run(tt.engine, func(t *testing.T) {
			fl := newEngineFleet(t, store.NewMemory(), 8, fakepolicy.Options{Engine: tt.engine, APIKey: adminKey}, withAdminKey)
			m, _ := fl.run(t)
			u, err := m.Start(context.Background(), updates.Spec{Version: 8, MaxUnavailable: 2, MinAvailablePerNode: 1, DrainTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			// A policy not yet in a wave, below the version, is not ready.
			var pendingID string
			for _, ps := range fl.state.Stats().Policies {
				if ps.Policy.Index == 7 {
					pendingID = ps.Policy.ID
				}
			}
			if _, err := m.Done(context.Background(), u.ID, []string{pendingID}); !errors.Is(err, updates.ErrNotReady) {
				t.Errorf("Done for a pending policy = %v; want ErrNotReady", err)
			}
			for u.State == updates.StateRunning {
				var ready []string
				for _, p := range u.Policies {
					if p.Phase == updates.PhaseUpdating && p.Step == updates.StepReady && !p.Confirmed {
						if !fl.f.Policy(p.Index).Paused() {
							t.Errorf("policy %d listed ready before its engine was paused", p.Index)
						}
						ready = append(ready, p.ID)
					}
				}
				if len(ready) > 0 {
					for range 2 {
						if _, err := m.Done(context.Background(), u.ID, ready); err != nil {
							t.Fatalf("Done: %v", err)
						}
					}
				}
				time.Sleep(5 * time.Millisecond)
				u, _ = m.Get(u.ID)
			}
			if u.State != updates.StateSucceeded {
				t.Fatalf("update ended %s: %s", u.State, u.Error)
			}
			for i := range 8 {
				if got := controlCalls(fl.f.Policy(i)); !slices.Equal(got, tt.want) {
					t.Errorf("policy %d engine calls %v; want %v", i, got, tt.want)
				}
			}
			for _, ps := range fl.state.Stats().Policies {
				if ps.Version != 8 || ps.Draining {
					t.Errorf("policy %d: version %d, draining %v; want 8, resumed", ps.Policy.Index, ps.Version, ps.Draining)
				}
				if got := fl.f.Policy(ps.Policy.Index).WeightVersion(); got != "8" {
					t.Errorf("policy %d: the engine reports weight_version %q; want \"8\"", ps.Policy.Index, got)
				}
			}
			fl.wantNoViolations(t)
		})
	}
}

// pause_mode abort ends the leases of each policy of a wave at once, before
// its update is over, and they read aborted; the engine is paused in
// abort mode.
func TestPauseAbortEndsLeases(t *testing.T) {
	fl := newEngineFleet(t, store.NewMemory(), 4, fakepolicy.Options{Engine: fakepolicy.EngineSGLang, UpdateTime: 300 * time.Millisecond}, nil)
	m, _ := fl.run(t)
	leases := map[string]uint64{}
	for range 4 {
		d, err := fl.state.Select(context.Background(), routing.SelectRequest{})
		if err != nil {
			t.Fatal(err)
		}
		leases[d.Policy.ID] = d.Lease
	}
	u, err := m.Start(context.Background(), updates.Spec{Version: 8, ModelPath: "/ckpt/8", PauseMode: "abort", MaxUnavailable: 1, DrainTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var first *updates.Policy
	poll.Until(t, "the first wave updating", func() bool {
		u, _ = m.Get(u.ID)
		for _, p := range u.Policies {
			if p.Phase == updates.PhaseUpdating {
				first = p
				return true
			}
		}
		return false
	})
	if fl.state.LeaseValid(leases[first.ID]) {
		t.Fatalf("policy %d is updating and its lease is still out", first.Index)
	}
	if _, err := fl.state.Release(leases[first.ID]); !errors.Is(err, routing.ErrLeaseAborted) {
		t.Errorf("Release of the updating policy's lease = %v; want ErrLeaseAborted", err)
	}
	if first.AbortedLeases != 1 {
		t.Errorf("aborted_leases %d; want 1", first.AbortedLeases)
	}
	u = waitEnded(t, m, u.ID)
	if u.State != updates.StateSucceeded {
		t.Fatalf("update ended %s: %s", u.State, u.Error)
	}
	for id, lease := range leases {
		if _, err := fl.state.Release(lease); !errors.Is(err, routing.ErrLeaseAborted) {
			t.Errorf("policy %s: Release after the update = %v; want ErrLeaseAborted", id, err)
		}
	}
	for i := range 4 {
		if got := fl.f.Policy(i).PauseMode(); got != "abort" {
			t.Errorf("policy %d paused in %q; want abort", i, got)
		}
	}
}

// A policy whose version stays below the update's (its action loads 8,
// the update expects 9) fails after phase_timeout_ms saying why: the step,
// the expected and reported versions; the last call is shown. It stays
// drained (quarantined) and the update, allowing no failure, fails.
func TestStalledUpdateSaysWhy(t *testing.T) {
	fl := newEngineFleet(t, store.NewMemory(), 4, fakepolicy.Options{UpdateTime: time.Millisecond}, nil)
	m, _ := fl.run(t)
	u, err := m.Start(context.Background(), updates.Spec{Version: 9, Action: action(8), MaxUnavailable: 1, DrainTimeout: time.Second, PhaseTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "a policy waiting to confirm", func() bool {
		u, _ = m.Get(u.ID)
		for _, p := range u.Policies {
			if p.Step == updates.StepConfirm && p.ReportedVersion == 8 {
				return true
			}
		}
		return false
	})
	u = waitEnded(t, m, u.ID)
	if u.State != updates.StateFailed {
		t.Fatalf("update ended %s; want failed", u.State)
	}
	var failed *updates.Policy
	for _, p := range u.Policies {
		if p.Phase == updates.PhaseFailed {
			failed = p
		}
	}
	if failed == nil {
		t.Fatal("no policy failed")
	}
	for _, want := range []string{"step confirm", "phase_timeout_ms 300", "expected version 9", "reports 8"} {
		if !strings.Contains(failed.Error, want) {
			t.Errorf("error %q does not say %q", failed.Error, want)
		}
	}
	if c := failed.LastCall; c == nil || c.Path != "/update_weights_from_disk" || c.Status != 200 {
		t.Errorf("last call %+v; want the action, 200", c)
	}
	if why, ok := m.Quarantined()[failed.ID]; !ok || why != failed.Error {
		t.Errorf("Quarantined() = %v; want the failed policy with its error", m.Quarantined())
	}
	if ps, _ := fl.state.PolicyStats(failed.ID); !ps.Draining {
		t.Error("the failed policy was resumed; want it drained")
	}
}

// An engine that refuses the weights fails its policy with the engine's
// message; the policy stays drained and its engine paused (no continue
// call); the others go on; set_floor moves the /weights floor when the
// update succeeds.
func TestEngineFailureQuarantinesAndSetFloor(t *testing.T) {
	fl := newEngineFleet(t, store.NewMemory(), 4, fakepolicy.Options{Engine: fakepolicy.EngineSGLang, UpdateTime: time.Millisecond}, nil)
	fl.f.Policy(2).SetFailUpdates(true)
	m, _ := fl.run(t)
	u, err := m.Start(context.Background(), updates.Spec{Version: 8, ModelPath: "/ckpt/8", MaxUnavailable: 2, DrainTimeout: time.Second, MaxFailures: 1, SetFloor: true})
	if err != nil {
		t.Fatal(err)
	}
	u = waitEnded(t, m, u.ID)
	if u.State != updates.StateSucceeded || u.Failures != 1 {
		t.Fatalf("update ended %s with %d failures; want succeeded with 1", u.State, u.Failures)
	}
	p := policyOf(u, 2)
	if p.Phase != updates.PhaseFailed || !strings.Contains(p.Error, "simulated update failure") || !strings.Contains(p.Error, "step load") {
		t.Errorf("policy 2: %s, %q; want failed with the engine's message", p.Phase, p.Error)
	}
	if got, want := controlCalls(fl.f.Policy(2)), []string{"POST /pause_generation", "POST /update_weights_from_disk"}; !slices.Equal(got, want) {
		t.Errorf("failed policy's calls %v; want %v (it stays paused)", got, want)
	}
	if ps, _ := fl.state.PolicyStats(p.ID); !ps.Draining {
		t.Error("failed policy not drained")
	}
	if w := fl.reg.Weights(); w.MinVersion() != 8 || u.Floor != 8 {
		t.Errorf("floor %d (update says %d); want 8", w.MinVersion(), u.Floor)
	}
}

// withoutLast registers the fleet without its last policy, and out of the
// topology, and returns that policy, to be registered later.
func (fl *fleet) withoutLast(t *testing.T) routing.Policy {
	t.Helper()
	reg := fl.reg.Current()
	n := len(reg.Policies) - 1
	last := reg.Policies[n]
	topo := reg.Topology.Clone()
	for node, comps := range topo {
		for kind, ids := range comps {
			topo[node][kind] = slices.DeleteFunc(slices.Clone(ids), func(i int) bool { return i == last.Index })
		}
	}
	var specs []registry.Spec
	for _, p := range reg.Policies[:n] {
		idx := p.Index
		specs = append(specs, registry.Spec{URL: p.URL, ID: p.ID, Index: &idx, Engine: p.Engine})
	}
	if _, err := fl.reg.ReplaceRegistration(context.Background(), specs, topo); err != nil {
		t.Fatal(err)
	}
	return last
}

// A policy registered while an update runs is held (no work) until it
// reports the update's version; the update takes it too.
func TestPolicyJoiningDuringUpdateIsHeld(t *testing.T) {
	fl := newEngineFleet(t, store.NewMemory(), 5, fakepolicy.Options{Engine: fakepolicy.EngineSGLang, UpdateTime: 50 * time.Millisecond}, nil)
	last := fl.withoutLast(t) // it joins later
	m, _ := fl.run(t)
	u, err := m.Start(context.Background(), updates.Spec{Version: 8, ModelPath: "/ckpt/8", MaxUnavailable: 1, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	idx := 4
	if _, _, err := fl.reg.Register(context.Background(), registry.Spec{URL: last.URL, ID: last.ID, Index: &idx, Engine: last.Engine, NodeID: "node-0"}); err != nil {
		t.Fatal(err)
	}
	if v, held := fl.state.Held(last.ID); !held || v != 8 {
		t.Errorf("joining policy Held = %d, %v; want 8, true", v, held)
	}
	u = waitEnded(t, m, u.ID)
	if u.State != updates.StateSucceeded {
		t.Fatalf("update ended %s: %s", u.State, u.Error)
	}
	if _, held := fl.state.Held(last.ID); held {
		t.Error("joined policy still held after the update")
	}
	if fl.f.Policy(4).WeightVersion() != "8" {
		t.Errorf("joined policy at %q; want the update's 8", fl.f.Policy(4).WeightVersion())
	}
}

// A policy an update failed with its engine paused gets its engine
// resumed when an operator resumes the policy: the router routes to it
// again, and a paused engine would hold that traffic.
func TestResumingAFailedPolicyResumesItsEngine(t *testing.T) {
	fl := newEngineFleet(t, store.NewMemory(), 2, fakepolicy.Options{Engine: fakepolicy.EngineSGLang, UpdateTime: time.Millisecond}, nil)
	fl.f.Policy(1).SetFailUpdates(true)
	m, _ := fl.run(t)
	u, err := m.Start(context.Background(), updates.Spec{Version: 8, ModelPath: "/ckpt/8", MaxUnavailable: 1, DrainTimeout: time.Second, MaxFailures: 1})
	if err != nil {
		t.Fatal(err)
	}
	u = waitEnded(t, m, u.ID)
	p := policyOf(u, 1)
	if p.Phase != updates.PhaseFailed || !fl.f.Policy(1).Paused() {
		t.Fatalf("policy 1: %s, engine paused %v; want failed with its engine paused", p.Phase, fl.f.Policy(1).Paused())
	}
	if _, err := fl.reg.SetDraining(context.Background(), p.ID, false); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the engine to be resumed", func() bool { return !fl.f.Policy(1).Paused() })
	if got, want := controlCalls(fl.f.Policy(1)), []string{"POST /pause_generation", "POST /update_weights_from_disk", "POST /continue_generation"}; !slices.Equal(got, want) {
		t.Errorf("calls %v; want %v", got, want)
	}
	if u, _ = m.Get(u.ID); policyOf(u, 1).Paused {
		t.Error("the update still records the engine as paused")
	}
}

// A policy that joined during an update stays held on a router that
// restarts (or a replica that takes over) and continues the update.
func TestJoinerStaysHeldAcrossRestart(t *testing.T) {
	st, err := store.OpenBolt(t.TempDir(), store.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fl := newEngineFleet(t, st, 3, fakepolicy.Options{Engine: fakepolicy.EngineSGLang}, nil)
	last := fl.withoutLast(t) // it joins during the update
	m, stop := fl.run(t)
	// External mode: the first wave waits for the trainer, so the update
	// is still running at the restart.
	u, err := m.Start(context.Background(), updates.Spec{Version: 8, MaxUnavailable: 1, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	idx := 2
	if _, _, err := fl.reg.Register(context.Background(), registry.Spec{URL: last.URL, ID: last.ID, Index: &idx, Engine: last.Engine}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the update to record the joiner's hold", func() bool {
		u, _ = m.Get(u.ID)
		p := policyOf(u, 2)
		return p != nil && p.Held
	})
	stop()

	fl.open(t) // the restarted router
	m2, _ := fl.run(t)
	if got, ok := m2.Running(); !ok || got.ID != u.ID {
		t.Fatalf("restarted router runs %v, %v; want update %s", got.ID, ok, u.ID)
	}
	if v, held := fl.state.Held(last.ID); !held || v != 8 {
		t.Errorf("after the restart the joiner's Held = %d, %v; want 8, true", v, held)
	}
}

// An older vLLM without /update_weight_version (404) still completes an
// external update: the version step is skipped, the update records the
// version, as before.
func TestExternalUpdateLegacyVLLM(t *testing.T) {
	fl := newEngineFleet(t, store.NewMemory(), 2, fakepolicy.Options{Engine: fakepolicy.EngineVLLM, APIKey: adminKey}, withAdminKey)
	for i := range 2 {
		fl.f.Policy(i).SetLegacy(true)
	}
	m, _ := fl.run(t)
	u, err := m.Start(context.Background(), updates.Spec{Version: 3, MaxUnavailable: 2})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the update ends", func() bool {
		u, _ = m.Get(u.ID)
		var ready []string
		for _, p := range u.Policies {
			if p.Phase == updates.PhaseUpdating && p.Step == updates.StepReady && !p.Confirmed {
				ready = append(ready, p.ID)
			}
		}
		if len(ready) > 0 {
			_, _ = m.Done(context.Background(), u.ID, ready)
		}
		return u.State != updates.StateRunning
	})
	if u.State != updates.StateSucceeded {
		t.Fatalf("update ended %s: %s", u.State, u.Error)
	}
	for _, ps := range fl.state.Stats().Policies {
		if ps.Version != 3 {
			t.Errorf("policy %d: version %d; want 3, recorded by the update", ps.Policy.Index, ps.Version)
		}
	}
}

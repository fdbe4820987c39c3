package updates_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/store"
	"github.com/policyrouter/policyrouter/updates"
)

// A policy the running update holds (draining or updating) is returning,
// by at most phase_timeout_ms per step it has left; one it has not taken
// yet, or has done, is not.
func TestReturning(t *testing.T) {
	fl := newFleet(t, store.NewMemory(), time.Millisecond)
	m, _ := fl.run(t)
	const phase = time.Minute
	start := time.Now()
	u, err := m.Start(context.Background(), updates.Spec{Version: 8, MaxUnavailable: 1, DrainTimeout: 5 * time.Second, PhaseTimeout: phase})
	if err != nil {
		t.Fatal(err)
	}
	var held string
	poll.Until(t, "a policy in the trainer's hands", func() bool {
		u, _ = m.Get(u.ID)
		for _, p := range u.Policies {
			if p.Phase == updates.PhaseUpdating && p.Step == updates.StepReady {
				held = p.ID
				return true
			}
		}
		return false
	})
	// External mode, native engine: ready, confirm.
	if until, ok := m.Returning(held); !ok || until.Before(start) || until.After(time.Now().Add(2*phase)) {
		t.Errorf("Returning(%s) = %v, %v; want true, within two phase timeouts", held, until, ok)
	}
	for _, p := range u.Policies {
		if p.Phase == updates.PhasePending {
			if _, ok := m.Returning(p.ID); ok {
				t.Errorf("Returning(%s), pending: true; want false", p.ID)
			}
			break
		}
	}
	if _, err := m.Abort(context.Background(), u.ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Returning(held); ok {
		t.Error("Returning after the abort: true; want false")
	}
}

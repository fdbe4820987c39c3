package updates_test

import (
	"context"
	"errors"
	"testing"
	"time"

	pfleet "github.com/policyrouter/policyrouter/fleet"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/store"
	"github.com/policyrouter/policyrouter/updates"
)

// An update with a selector updates the policies it picks and no other:
// the rest keep their version, are never drained, and are not listed.
func TestSelectorUpdatesOnlySelected(t *testing.T) {
	fl := newFleet(t, store.NewMemory(), 20*time.Millisecond)
	m, _ := fl.run(t)
	picked := map[int]bool{1: true, 6: true, 11: true}
	u, err := m.Start(context.Background(), updates.Spec{Version: 8, Action: action(8), MaxUnavailable: 4, DrainTimeout: 5 * time.Second,
		Selector: pfleet.Selector{Indices: []int{1, 6, 11}}})
	if err != nil {
		t.Fatal(err)
	}
	// Once the update runs, the others are never drained.
	drainedOthers := 0
	poll.Until(t, "the update to end", func() bool {
		for _, ps := range fl.state.Stats().Policies {
			if ps.Draining && !picked[ps.Policy.Index] {
				drainedOthers++
			}
		}
		got, err := m.Get(u.ID)
		u = got
		return err == nil && got.State != updates.StateRunning
	})
	if u.State != updates.StateSucceeded {
		t.Fatalf("update ended %s: %s", u.State, u.Error)
	}
	if drainedOthers != 0 {
		t.Errorf("policies the selector does not pick were seen drained %d times", drainedOthers)
	}
	if len(u.Policies) != len(picked) {
		t.Errorf("the update lists %d policies; want the %d picked", len(u.Policies), len(picked))
	}
	for _, ps := range fl.state.Stats().Policies {
		i := ps.Policy.Index
		wantVersion, wantUpdates := int64(7), uint64(0)
		if picked[i] {
			wantVersion, wantUpdates = 8, 1
		}
		if ps.Version != wantVersion || ps.Draining || fl.f.Policy(i).Updates() != wantUpdates {
			t.Errorf("policy %d: version %d, draining %v, updated %d times; want %d, serving, %d", i, ps.Version, ps.Draining, fl.f.Policy(i).Updates(), wantVersion, wantUpdates)
		}
	}
	fl.wantNoViolations(t)
}

// The update holds the refit lock of a policy while it works on it, and
// waits for one a fleet verb holds before taking it.
func TestUpdateHoldsRefitLock(t *testing.T) {
	fl := newFleet(t, store.NewMemory(), 0)
	locks := &pfleet.Locks{}
	m := fl.runLocked(t, locks)
	pols := fl.state.Snapshot().Policies()
	release, err := locks.Acquire(pols[2:3], "POST /fleet/sleep")
	if err != nil {
		t.Fatal(err)
	}
	// External mode: the update waits for the trainer on each policy.
	u, err := m.Start(context.Background(), updates.Spec{Version: 8, MaxUnavailable: 2, DrainTimeout: 5 * time.Second,
		Selector: pfleet.Selector{Indices: []int{0, 2}}})
	var held *pfleet.HeldError
	if !errors.As(err, &held) || held.Holder != "POST /fleet/sleep" || held.Index != 2 {
		t.Fatalf("Start over a held policy: %v; want a HeldError naming the sleep", err)
	}
	u, err = m.Start(context.Background(), updates.Spec{Version: 8, MaxUnavailable: 2, DrainTimeout: 5 * time.Second,
		Selector: pfleet.Selector{Indices: []int{0, 1}}})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "policies 0 and 1 updating", func() bool {
		got, _ := m.Get(u.ID)
		n := 0
		for _, p := range got.Policies {
			if p.Phase == updates.PhaseUpdating {
				n++
			}
		}
		return n == 2
	})
	for _, i := range []int{0, 1} {
		if h, ok := locks.Holder(pols[i].ID); !ok || h != "update "+u.ID {
			t.Errorf("policy %d's refit lock: %q, %v; want held by update %s", i, h, ok, u.ID)
		}
	}
	release()
	// The trainer moves the weights, then says so.
	fl.f.Policy(0).SetVersion(8)
	fl.f.Policy(1).SetVersion(8)
	if _, err := m.Done(context.Background(), u.ID, []string{pols[0].ID, pols[1].ID}); err != nil {
		t.Fatal(err)
	}
	if u = waitEnded(t, m, u.ID); u.State != updates.StateSucceeded {
		t.Fatalf("update ended %s: %s", u.State, u.Error)
	}
	for _, i := range []int{0, 1} {
		if h, ok := locks.Holder(pols[i].ID); ok {
			t.Errorf("policy %d's refit lock still held by %q after the update", i, h)
		}
	}
}

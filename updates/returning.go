package updates

import (
	"slices"
	"time"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/routing"
)

// Returning reports whether the running update holds the policy with the
// given id out of routing (draining or updating it) and so will bring it
// back, and by when at the latest: the time its update's steps have left
// are bounded by, from the start of its current step, phase_timeout_ms
// each (without one, an engine call's default timeout each). A policy the
// update fails stays out, but by then until has passed, or nearly. The
// proxy asks it when a generation that policy aborted finds no other
// policy to go on with: it may wait for the policy's return instead of
// ending with the tokens so far.
func (m *Manager) Returning(id string) (until time.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.running
	if u == nil {
		return time.Time{}, false
	}
	p := u.policy(id)
	if p == nil || (p.Phase != PhaseDraining && p.Phase != PhaseUpdating) {
		return time.Time{}, false
	}
	bound := u.Spec.PhaseTimeout
	if bound <= 0 {
		bound = defaultCallTimeout
	}
	eng, found := engine.Lookup(p.Engine)
	if !found {
		eng, _ = engine.Lookup(routing.EnginePolicyrouter)
	}
	steps := planSteps(u.Spec, eng)
	left, from := len(steps), p.Since
	if p.Phase == PhaseUpdating && !p.StepSince.IsZero() {
		left -= max(slices.Index(steps, p.Step), 0)
		from = p.StepSince
	}
	if p.Phase == PhaseDraining && u.Spec.pauseMode() == engine.PauseWait {
		from = from.Add(u.Spec.DrainTimeout)
	}
	return from.Add(time.Duration(left) * bound), true
}

package updates

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/routing"
)

// defaultCallTimeout bounds an engine call when the update sets no
// phase_timeout_ms: loading a checkpoint from disk can take minutes.
const defaultCallTimeout = 10 * time.Minute

// engineSteps returns the update steps of a policy's engine; a name not in
// the table (a registration from a newer router) gets none, like the
// native engine.
func engineSteps(p routing.Policy) engine.UpdateSteps {
	if e, ok := engine.Lookup(p.EngineName()); ok {
		return e
	}
	e, _ := engine.Lookup(routing.EnginePolicyrouter)
	return e
}

// pauseMode is the spec's pause mode, PauseWait by default.
func (s Spec) pauseMode() string {
	if s.PauseMode == "" {
		return engine.PauseWait
	}
	return s.PauseMode
}

// planSteps lists the steps a policy of engine eng takes in u, in order:
// pause, then load (from disk when the engine can and the update names a
// model path, else the action when there is one) or ready (the trainer
// moves the weights), then version (after the trainer, when the engine
// has it), resume, confirm. Steps the engine has not got are left out.
func planSteps(s Spec, eng engine.UpdateSteps) []string {
	var steps []string
	if _, ok := eng.Pause(s.pauseMode()); ok {
		steps = append(steps, StepPause)
	}
	_, disk := eng.LoadFromDisk(s.ModelPath, "")
	switch {
	case s.ModelPath != "" && disk, s.Action != nil:
		steps = append(steps, StepLoad)
	default:
		steps = append(steps, StepReady)
		if _, ok := eng.SetVersion(""); ok {
			steps = append(steps, StepVersion)
		}
	}
	if _, ok := eng.Resume(); ok {
		steps = append(steps, StepResume)
	}
	return append(steps, StepConfirm)
}

// callFor is the call of a step that makes one, and its timeout.
func callFor(s Spec, eng engine.UpdateSteps, step string) (engine.Call, time.Duration, bool) {
	timeout := defaultCallTimeout
	if s.PhaseTimeout > 0 {
		timeout = s.PhaseTimeout
	}
	version := strconv.FormatInt(s.Version, 10)
	var (
		c  engine.Call
		ok bool
	)
	switch step {
	case StepPause:
		c, ok = eng.Pause(s.pauseMode())
	case StepLoad:
		if c, ok = eng.LoadFromDisk(s.ModelPath, version); ok && s.ModelPath != "" {
			break
		}
		if a := s.Action; a != nil {
			c, ok = engine.Call{Method: a.Method, Path: a.Path, Body: a.Body}, true
			if s.PhaseTimeout <= 0 || a.Timeout < timeout {
				timeout = a.Timeout
			}
		}
	case StepVersion:
		c, ok = eng.SetVersion(version)
	case StepResume:
		c, ok = eng.Resume()
	}
	return c, timeout, ok
}

// enterLocked moves p to step at now.
func enterLocked(p *Policy, step string, now time.Time) {
	p.Step, p.StepSince = step, now
	p.ActionDone, p.ActionErr = time.Time{}, ""
}

// advanceLocked moves a policy in PhaseUpdating through its steps as far
// as it can now: it records the outcome of the call of its step and
// enters the next one, sends the call of a step not sent yet, takes the
// trainer's done, and confirms the version, failing the policy whose step
// failed or outlasted phase_timeout_ms. It reports whether p changed.
func (m *Manager) advanceLocked(ctx context.Context, u *Update, p *Policy, ps routing.PolicyStats, now time.Time, calls *sync.WaitGroup) bool {
	eng := engineSteps(ps.Policy)
	steps := planSteps(u.Spec, eng)
	changed := false
	next := func() {
		i := slices.Index(steps, p.Step)
		enterLocked(p, steps[min(i+1, len(steps)-1)], now)
		changed = true
	}
	if p.Step == "" || !slices.Contains(steps, p.Step) {
		enterLocked(p, steps[0], now) // just drained, or stored by an older router
		changed = true
	}
	for p.Phase == PhaseUpdating {
		switch p.Step {
		case StepReady:
			if !p.Confirmed && !(ps.ReportsVersion && ps.Version >= u.Spec.Version) {
				return m.timedOutLocked(u, p, ps, now) || changed
			}
			next()
		case StepConfirm:
			switch {
			case ps.Version >= u.Spec.Version:
				m.finishLocked(ctx, p, now)
			case !ps.ReportsVersion:
				// It reports no version (vLLM, a native policy without one):
				// the update is its record of it.
				_ = m.cfg.State.SetVersion(p.ID, u.Spec.Version)
				m.finishLocked(ctx, p, now)
			case u.Spec.PhaseTimeout <= 0 && now.Sub(p.StepSince) >= versionWait:
				m.failLocked(u, p, "stuck in step confirm for "+versionWait.String()+": "+m.waitingFor(u, p, ps), now)
			default:
				return m.timedOutLocked(u, p, ps, now) || changed
			}
			return true
		default: // a step with a call
			switch {
			case p.ActionErr != "":
				m.failLocked(u, p, fmt.Sprintf("step %s: %s", p.Step, p.ActionErr), now)
				return true
			case !p.ActionDone.IsZero():
				switch p.Step {
				case StepPause:
					p.Paused = true
				case StepResume:
					p.Paused = false
				}
				next()
			case m.inflight[p.ID]:
				return m.timedOutLocked(u, p, ps, now) || changed
			default:
				c, timeout, ok := callFor(u.Spec, eng, p.Step)
				if !ok {
					next() // nothing to send (a registration changed its engine)
					continue
				}
				m.inflight[p.ID] = true
				p.LastCall = &Call{Method: c.Method, Path: c.Path, Time: now}
				url, key, step := ps.Policy.URL, ps.Policy.BearerFor(true), p.Step
				calls.Go(func() { m.callStep(ctx, u, p.ID, step, url, key, c, timeout) })
				return true
			}
		}
	}
	return changed
}

// timedOutLocked fails p if it has been in its step longer than the
// update's phase timeout, saying what it waited for, and reports whether
// it did.
func (m *Manager) timedOutLocked(u *Update, p *Policy, ps routing.PolicyStats, now time.Time) bool {
	if u.Spec.PhaseTimeout <= 0 || now.Sub(p.StepSince) < u.Spec.PhaseTimeout {
		return false
	}
	m.failLocked(u, p, fmt.Sprintf("stuck in step %s for longer than phase_timeout_ms %d: %s",
		p.Step, u.Spec.PhaseTimeout.Milliseconds(), m.waitingFor(u, p, ps)), now)
	return true
}

// waitingFor says what p's step waits for.
func (m *Manager) waitingFor(u *Update, p *Policy, ps routing.PolicyStats) string {
	switch p.Step {
	case StepReady:
		return fmt.Sprintf("waiting for the trainer's POST /updates/%s/done (or for the policy to report version %d)", u.ID, u.Spec.Version)
	case StepConfirm:
		what := fmt.Sprintf("expected version %d, the policy reports %d", u.Spec.Version, ps.Version)
		if ps.WeightVersion != "" {
			what += fmt.Sprintf(" (weight_version %q)", ps.WeightVersion)
		}
		if ps.LastError != "" {
			what += "; last probe error: " + ps.LastError
		}
		return what
	}
	if c := p.LastCall; c != nil {
		return fmt.Sprintf("no answer yet to %s %s, sent at %s", c.Method, c.Path, c.Time.Format(time.RFC3339Nano))
	}
	return "its call was not sent"
}

// observeLocked records what the policy reports now, and whether that
// changed.
func observeLocked(p *Policy, ps routing.PolicyStats) bool {
	if p.ReportedVersion == ps.Version && p.WeightVersion == ps.WeightVersion && p.Engine == ps.Policy.EngineName() {
		return false
	}
	p.ReportedVersion, p.WeightVersion, p.Engine = ps.Version, ps.WeightVersion, ps.Policy.EngineName()
	return true
}

// callStep sends the call of p's step and records its outcome, unless the
// update or the policy moved on meanwhile.
func (m *Manager) callStep(ctx context.Context, u *Update, id, step, url, key string, c engine.Call, timeout time.Duration) {
	rec := m.send(ctx, url, key, c, timeout)
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.inflight, id)
	if ctx.Err() != nil || m.running != u {
		return // stopping, or the update ended meanwhile: nothing to record
	}
	p := u.policy(id)
	if p == nil || p.Phase != PhaseUpdating || p.Step != step {
		return
	}
	p.LastCall = &rec
	p.ActionDone = rec.Time.Add(rec.Duration)
	if rec.Error != "" {
		p.ActionErr = rec.Error
	}
	m.kick()
}

// resumeEngineLocked resumes, in the background and at best, the engine
// of a policy the update paused and leaves: the update was aborted or
// failed before its resume step.
func (m *Manager) resumeEngineLocked(p *Policy) {
	if !p.Paused {
		return
	}
	ps, ok := m.cfg.State.PolicyStats(p.ID)
	if !ok {
		return
	}
	c, ok := engineSteps(ps.Policy).Resume()
	if !ok {
		return
	}
	p.Paused = false
	url, key := ps.Policy.URL, ps.Policy.BearerFor(true)
	m.calls.Go(func() {
		rec := m.send(context.Background(), url, key, c, 30*time.Second)
		if rec.Error != "" {
			m.cfg.Logger.Warn("rolling update: resume the engine", "policy_id", p.ID, "call", c.Method+" "+c.Path, "error", rec.Error)
		}
	})
}

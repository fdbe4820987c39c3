package updates

import (
	"context"
	"encoding/json"
	"errors"
	"maps"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/registry"
	"github.com/policyrouter/policyrouter/store"
)

// The manager decides under its lock and writes outside it: a store that
// answers slowly (etcd across a network) must not stall the readers of
// the updates (GET /updates, /stats) nor the confirmations of a trainer.
// What it decides to write (an update's document, a policy's drain, the
// /weights floor) is queued under the lock as a write, and flush makes
// the queued writes, one at a time, in the order they were decided: two
// states of one update, or a drain and the resume that undoes it, never
// land in the store swapped.

// view is the updates as last stored, what the readers (Get, List,
// Latest, Running, Quarantined) see: an update is shown once its document
// and the writes decided before it (its policies' drains and resumes, the
// floor it set) are made. A view is never modified; publish replaces it.
type view struct {
	updates map[string]*Update
	// latest is the running update, else the one started last.
	latest *Update
}

func newView(updates map[string]*Update) *view {
	v := &view{updates: make(map[string]*Update, len(updates))}
	for id, u := range updates {
		c := u.clone()
		v.updates[id] = &c
	}
	v.latest = latestOf(v.updates)
	return v
}

// latestOf returns the running update of updates, else the one started
// last, or nil.
func latestOf(updates map[string]*Update) *Update {
	var latest *Update
	for _, u := range updates {
		switch {
		case u.State == StateRunning:
			return u
		case latest == nil || u.Created.After(latest.Created):
			latest = u
		}
	}
	return latest
}

// publish shows u, just stored, to the readers. Caller must hold flushMu.
func (m *Manager) publish(u *Update) {
	old := m.view.Load()
	next := &view{updates: maps.Clone(old.updates)}
	next.updates[u.ID] = u
	next.latest = latestOf(next.updates)
	m.view.Store(next)
}

// write is one write to the store (directly, or through the registry)
// that the manager queued; err is its outcome, once flush made it.
type write struct {
	do  func() error
	err error
}

// queueLocked queues do to be made by the next flush. Caller must hold mu.
func (m *Manager) queueLocked(do func() error) *write {
	w := &write{do: do}
	m.writes = append(m.writes, w)
	return w
}

// flush makes the queued writes, and those they queue in turn, in order.
// Call it without mu held; a write queued before the call has been made
// when it returns, and its err is set.
func (m *Manager) flush() {
	m.flushMu.Lock()
	defer m.flushMu.Unlock()
	for {
		m.mu.Lock()
		ws := m.writes
		m.writes = nil
		m.mu.Unlock()
		if len(ws) == 0 {
			return
		}
		for _, w := range ws {
			w.err = w.do()
		}
	}
}

// commitLocked queues the store write of u as it is now and reports the
// change (Config.OnChange). Caller must hold mu.
func (m *Manager) commitLocked(ctx context.Context, u *Update) *write {
	if m.cfg.OnChange != nil {
		m.cfg.OnChange(u.clone())
	}
	return m.storeLocked(ctx, u)
}

// storeLocked queues the store write of u as it is now, which shows it
// to the readers once made. Caller must hold mu.
func (m *Manager) storeLocked(ctx context.Context, u *Update) *write {
	snap := u.clone()
	return m.queueLocked(func() error {
		if err := m.put(ctx, snap); err != nil {
			m.cfg.Logger.Error("rolling update: store", "update", snap.ID, "err", err)
			return err
		}
		m.publish(&snap)
		return nil
	})
}

// put stores u, even when ctx is ending: the record must not be lost.
func (m *Manager) put(ctx context.Context, u Update) error {
	doc, err := json.Marshal(u)
	if err != nil {
		return err
	}
	return m.cfg.Store.PutUpdate(context.WithoutCancel(ctx), u.ID, doc)
}

// drainLocked queues the drain of p, which u's wave has just taken. A
// policy that cannot be drained fails; with pause mode abort, the
// drained policy's leases end at once, as its engine will abort their
// work. Caller must hold mu.
func (m *Manager) drainLocked(ctx context.Context, u *Update, p *Policy) {
	id, wave, abort := p.ID, p.Wave, u.Spec.pauseMode() == engine.PauseAbort
	ctx = context.WithoutCancel(ctx) // decided and about to be stored: made even when stopping
	m.queueLocked(func() error {
		_, err := m.cfg.Registry.SetDraining(ctx, id, true)
		aborted := 0
		if err == nil && abort {
			aborted, _ = m.cfg.State.AbortLeases(id)
		}
		if err == nil && aborted == 0 {
			return nil
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		p := u.policy(id)
		if m.running != u || p == nil || p.Wave != wave || (p.Phase != PhaseDraining && p.Phase != PhaseUpdating) {
			return nil // the update moved on meanwhile
		}
		if err != nil {
			m.failLocked(u, p, "drain: "+err.Error(), m.cfg.Now().UTC())
		} else {
			p.AbortedLeases = aborted
		}
		m.commitLocked(ctx, u)
		return nil
	})
}

// resumeLocked queues the end of p's drain; a policy removed meanwhile
// has none to end. Caller must hold mu.
func (m *Manager) resumeLocked(ctx context.Context, p *Policy) {
	id := p.ID
	ctx = context.WithoutCancel(ctx)
	m.queueLocked(func() error {
		if _, err := m.cfg.Registry.SetDraining(ctx, id, false); err != nil && !errors.Is(err, registry.ErrNotFound) {
			m.cfg.Logger.Error("rolling update: resume", "policy_id", id, "err", err)
		}
		return nil
	})
}

// succeedLocked ends u succeeded. With Spec.SetFloor, the /weights floor
// is moved up to its version first, so that whoever reads the update
// succeeded reads the floor it set (Update.Floor), or why it could not
// (Update.Error). Caller must hold mu.
func (m *Manager) succeedLocked(ctx context.Context, u *Update) {
	if !u.Spec.SetFloor || m.cfg.Registry.Weights().MinVersion() >= u.Spec.Version {
		m.endLocked(ctx, u, StateSucceeded, "")
		return
	}
	m.queueLocked(func() error {
		zero := int64(0)
		err := m.cfg.Registry.SetWeights(context.WithoutCancel(ctx), store.Weights{Version: u.Spec.Version, MaxStaleness: &zero})
		m.mu.Lock()
		defer m.mu.Unlock()
		why := ""
		if err != nil {
			why = "set_floor: " + err.Error()
			m.cfg.Logger.Error("rolling update: set the /weights floor", "update", u.ID, "err", err)
		} else {
			u.Floor = u.Spec.Version
		}
		if m.running == u {
			m.endLocked(ctx, u, StateSucceeded, why)
		} else if err == nil {
			m.commitLocked(ctx, u) // aborted meanwhile: still record the floor it set
		}
		return nil
	})
}

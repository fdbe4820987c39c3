package updates

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/policyrouter/policyrouter/registry"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
)

// tick is how often a running update looks at the fleet. Events (an
// action's answer, a confirmation, an abort) wake it at once.
const tick = 50 * time.Millisecond

// Config configures a Manager.
type Config struct {
	Registry *registry.Registry
	State    *routing.State
	Store    store.Store
	// Client sends the actions; default a client without a timeout (each
	// action carries its own).
	Client *http.Client
	Logger *slog.Logger
	Now    func() time.Time
	// OnChange, when set, is called with a copy of the update after each
	// change of it, with the manager's lock held: it must not call back.
	OnChange func(Update)
	// Ready, when set, says whether the router has heard from its
	// policies; until then (just after a restart every policy is unknown,
	// its version not yet reported) the running update waits.
	Ready func() bool
}

// Manager runs rolling updates. All methods are safe for concurrent use;
// Run does the work.
type Manager struct {
	cfg Config

	mu       sync.Mutex
	updates  map[string]*Update
	running  *Update
	inflight map[string]bool // policy ids whose action is in flight
	wake     chan struct{}
}

// New returns a Manager that continues the running update found in docs,
// the documents the store holds (store.Registration.Updates).
func New(cfg Config, docs map[string][]byte) (*Manager, error) {
	if cfg.Client == nil {
		cfg.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Manager{cfg: cfg, inflight: map[string]bool{}, wake: make(chan struct{}, 1)}
	if err := m.Restore(docs); err != nil {
		return nil, err
	}
	return m, nil
}

// Restore replaces what the manager knows by docs, the documents the store
// holds, and continues the running update among them. A replica that
// becomes the leader restores, since the old leader may have moved its
// update on. Call it while Run is not running.
func (m *Manager) Restore(docs map[string][]byte) error {
	updates := make(map[string]*Update, len(docs))
	var running *Update
	for id, doc := range docs {
		var u Update
		if err := json.Unmarshal(doc, &u); err != nil {
			return fmt.Errorf("updates: stored update %q: %w", id, err)
		}
		updates[id] = &u
		if u.State == StateRunning {
			running = &u
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.updates, m.running = updates, running
	clear(m.inflight)
	m.kick()
	return nil
}

// Start begins an update of spec and returns it. It returns ErrRunning
// while another update runs.
func (m *Manager) Start(ctx context.Context, spec Spec) (Update, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running != nil {
		return Update{}, fmt.Errorf("%w: %s", ErrRunning, m.running.ID)
	}
	u := &Update{ID: uuid.NewString(), Spec: spec, State: StateRunning, Created: m.cfg.Now().UTC(), Policies: []*Policy{}}
	if err := m.saveLocked(ctx, u); err != nil {
		return Update{}, err
	}
	m.updates[u.ID] = u
	m.running = u
	m.kick()
	return u.clone(), nil
}

// Get returns the update with the given id.
func (m *Manager) Get(id string) (Update, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.updates[id]
	if u == nil {
		return Update{}, ErrNotFound
	}
	return u.clone(), nil
}

// List returns every update, newest first.
func (m *Manager) List() []Update {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Update, 0, len(m.updates))
	for _, u := range m.updates {
		out = append(out, u.clone())
	}
	slices.SortFunc(out, func(a, b Update) int { return b.Created.Compare(a.Created) })
	return out
}

// Latest returns the running update, else the one started last, if any.
func (m *Manager) Latest() (Update, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	latest := m.running
	if latest == nil {
		for _, u := range m.updates {
			if latest == nil || u.Created.After(latest.Created) {
				latest = u
			}
		}
	}
	if latest == nil {
		return Update{}, false
	}
	return latest.clone(), true
}

// Running returns the running update, if any.
func (m *Manager) Running() (Update, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running == nil {
		return Update{}, false
	}
	return m.running.clone(), true
}

// Done records that the trainer has updated the given policies of the
// running update (external mode); each must be in the wave, updating.
func (m *Manager) Done(ctx context.Context, id string, policyIDs []string) (Update, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, err := m.runningLocked(id)
	if err != nil {
		return Update{}, err
	}
	for _, pid := range policyIDs {
		p := u.policy(pid)
		if p == nil || p.Phase != PhaseUpdating {
			return Update{}, fmt.Errorf("%w: policy %q is not updating in update %s", ErrNotReady, pid, id)
		}
	}
	for _, pid := range policyIDs {
		u.policy(pid).Confirmed = true
	}
	if err := m.saveLocked(ctx, u); err != nil {
		return Update{}, err
	}
	m.kick()
	return u.clone(), nil
}

// ErrNotReady: a confirmation named a policy the update is not waiting for.
var ErrNotReady = fmt.Errorf("policy not ready")

// Abort ends the running update with the given id and resumes every
// policy it drained, failed ones included.
func (m *Manager) Abort(ctx context.Context, id string) (Update, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, err := m.runningLocked(id)
	if err != nil {
		return Update{}, err
	}
	for _, p := range u.Policies {
		if p.Phase == PhaseDraining || p.Phase == PhaseUpdating || p.Phase == PhaseFailed {
			m.resumeLocked(ctx, p)
			if p.Phase != PhaseFailed {
				p.Phase, p.Since = PhasePending, m.cfg.Now().UTC()
			}
		}
	}
	m.endLocked(ctx, u, StateAborted, "")
	return u.clone(), nil
}

func (m *Manager) runningLocked(id string) (*Update, error) {
	u := m.updates[id]
	if u == nil {
		return nil, ErrNotFound
	}
	if u != m.running {
		return nil, fmt.Errorf("%w: it is %s", ErrEnded, u.State)
	}
	return u, nil
}

func (m *Manager) kick() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run advances the running update until ctx is done, then waits for the
// actions in flight to end.
func (m *Manager) Run(ctx context.Context) error {
	var actions sync.WaitGroup
	defer actions.Wait()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		m.step(ctx, &actions)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-m.wake:
		}
	}
}

// step moves the running update on by what the fleet shows now.
func (m *Manager) step(ctx context.Context, actions *sync.WaitGroup) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.running
	if u == nil || (m.cfg.Ready != nil && !m.cfg.Ready()) {
		return
	}
	now := m.cfg.Now().UTC()
	stats := map[string]routing.PolicyStats{}
	var members []member
	for _, ps := range m.cfg.State.Stats().Policies {
		stats[ps.Policy.ID] = ps
		members = append(members, member{ID: ps.Policy.ID, Index: ps.Policy.Index, Node: ps.Node, Version: ps.Version,
			Available: ps.Available})
	}
	changed := false
	for _, p := range u.Policies {
		ps, ok := stats[p.ID]
		switch {
		case p.Phase != PhaseDraining && p.Phase != PhaseUpdating:
			continue
		case !ok:
			m.failLocked(u, p, "the policy was removed", now)
			changed = true
			continue
		}
		if p.Phase == PhaseDraining {
			idle := ps.Inflight == 0 && ps.Load == 0 && ps.Heard && !ps.ReportedBusy
			if !idle && now.Sub(p.Since) < u.Spec.DrainTimeout {
				continue
			}
			p.DrainTimedOut = !idle
			p.Phase, p.Since = PhaseUpdating, now
			changed = true
		}
		// Updating.
		switch {
		case ps.Version >= u.Spec.Version:
			m.finishLocked(ctx, p, now)
		case u.Spec.Action == nil:
			if !p.Confirmed {
				continue
			}
			if !m.settleLocked(ctx, u, p, ps, p.Since, "confirmed", now) {
				continue
			}
		case p.ActionErr != "":
			m.failLocked(u, p, "action failed: "+p.ActionErr, now)
		case !p.ActionDone.IsZero():
			if !m.settleLocked(ctx, u, p, ps, p.ActionDone, "the action succeeded", now) {
				continue
			}
		case !m.inflight[p.ID]:
			// Not sent yet, or lost in a restart: send it (again).
			m.inflight[p.ID] = true
			url, key := ps.Policy.URL, ps.Policy.BearerFor(true)
			actions.Go(func() { m.act(ctx, u, p.ID, url, key) })
			continue
		default:
			continue
		}
		changed = true
	}

	switch {
	case u.Failures > u.Spec.MaxFailures:
		m.endLocked(ctx, u, StateFailed, fmt.Sprintf("%d policies failed, more than max_failures %d", u.Failures, u.Spec.MaxFailures))
		return
	case !u.inWave():
		skip := map[string]bool{}
		for _, p := range u.Policies {
			if p.Phase == PhaseFailed {
				skip[p.ID] = true
			}
		}
		remaining := 0
		for _, mb := range members {
			if mb.Version < u.Spec.Version && !skip[mb.ID] {
				remaining++
			}
		}
		if remaining == 0 {
			m.endLocked(ctx, u, StateSucceeded, "")
			return
		}
		wave := planWave(members, u.Spec.Version, u.Spec.MaxUnavailable-u.held(), u.Spec.MinAvailablePerNode, skip)
		if len(wave) == 0 {
			break // blocked: unavailable policies, or the per-node floor; wait
		}
		u.Waves++
		for _, mb := range wave {
			p := u.policy(mb.ID)
			if p == nil {
				p = &Policy{ID: mb.ID, Index: mb.Index, Node: mb.Node}
				u.Policies = append(u.Policies, p)
			}
			p.Phase, p.Wave, p.Since, p.Drained = PhaseDraining, u.Waves, now, now
			p.Confirmed, p.ActionDone, p.ActionErr = false, time.Time{}, ""
			if _, err := m.cfg.Registry.SetDraining(ctx, p.ID, true); err != nil {
				m.failLocked(u, p, "drain: "+err.Error(), now)
			}
		}
		changed = true
	}
	if changed {
		m.commitLocked(ctx, u)
	}
}

// versionWait is how long a policy that reports versions may take, after
// its update, to report the target version.
const versionWait = 30 * time.Second

// settleLocked ends the wait of a policy whose update was confirmed or
// whose action succeeded at since, and whose /idle does not yet report
// the target version. A policy that never reports versions is recorded at
// it and done; one that does is failed if it still shows an older version
// versionWait after since. It reports false while the policy still has
// time.
func (m *Manager) settleLocked(ctx context.Context, u *Update, p *Policy, ps routing.PolicyStats, since time.Time, what string, now time.Time) bool {
	switch {
	case !ps.ReportsVersion:
		_ = m.cfg.State.SetVersion(p.ID, u.Spec.Version)
		m.finishLocked(ctx, p, now)
	case now.Sub(since) < versionWait:
		return false
	default:
		m.failLocked(u, p, fmt.Sprintf("%s, but its /idle still reports version %d", what, ps.Version), now)
	}
	return true
}

// act sends the update's action to the policy at url, with its admin key
// (else its API key) as a bearer token when it has one, and records the
// outcome.
func (m *Manager) act(ctx context.Context, u *Update, id, url, key string) {
	a := u.Spec.Action
	err := func() error {
		ctx, cancel := context.WithTimeout(ctx, a.Timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, a.Method, strings.TrimRight(url, "/")+a.Path, bytes.NewReader(a.Body))
		if err != nil {
			return err
		}
		if len(a.Body) > 0 {
			req.Header.Set("Content-Type", "application/json")
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := m.cfg.Client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(body))
		}
		return nil
	}()
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.inflight, id)
	if ctx.Err() != nil || m.running != u {
		return // stopping, or the update ended meanwhile: nothing to record
	}
	p := u.policy(id)
	if p == nil || p.Phase != PhaseUpdating {
		return
	}
	p.ActionDone = m.cfg.Now().UTC()
	if err != nil {
		p.ActionErr = err.Error()
	}
	m.kick()
}

// finishLocked marks p done and resumes it.
func (m *Manager) finishLocked(ctx context.Context, p *Policy, now time.Time) {
	m.resumeLocked(ctx, p)
	p.Phase, p.Since, p.Ended = PhaseDone, now, now
}

// failLocked marks p failed; it stays drained.
func (m *Manager) failLocked(u *Update, p *Policy, why string, now time.Time) {
	p.Phase, p.Since, p.Ended, p.Error = PhaseFailed, now, now, why
	u.Failures++
	m.cfg.Logger.Warn("rolling update: policy failed", "update", u.ID, "policy_id", p.ID, "index", p.Index, "error", why)
}

func (m *Manager) resumeLocked(ctx context.Context, p *Policy) {
	if _, err := m.cfg.Registry.SetDraining(ctx, p.ID, false); err != nil && !strings.Contains(err.Error(), "not found") {
		m.cfg.Logger.Error("rolling update: resume", "policy_id", p.ID, "err", err)
	}
}

// endLocked ends the running update in state. A failed update resumes the
// policies of its wave in progress; its failed ones stay drained.
func (m *Manager) endLocked(ctx context.Context, u *Update, state, why string) {
	now := m.cfg.Now().UTC()
	if state == StateFailed {
		for _, p := range u.Policies {
			if p.Phase == PhaseDraining || p.Phase == PhaseUpdating {
				m.resumeLocked(ctx, p)
				p.Phase, p.Since = PhasePending, now
			}
		}
	}
	u.State, u.Ended, u.Error = state, now, why
	m.running = nil
	m.cfg.Logger.Info("rolling update ended", "update", u.ID, "state", state, "waves", u.Waves, "failures", u.Failures, "error", why)
	m.commitLocked(ctx, u)
}

// commitLocked stores u and reports the change.
func (m *Manager) commitLocked(ctx context.Context, u *Update) {
	if err := m.saveLocked(ctx, u); err != nil {
		m.cfg.Logger.Error("rolling update: store", "update", u.ID, "err", err)
	}
	if m.cfg.OnChange != nil {
		m.cfg.OnChange(u.clone())
	}
}

func (m *Manager) saveLocked(ctx context.Context, u *Update) error {
	doc, err := json.Marshal(u)
	if err != nil {
		return err
	}
	// Stored even when ctx is ending: the record must not be lost.
	return m.cfg.Store.PutUpdate(context.WithoutCancel(ctx), u.ID, doc)
}

package updates

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	neturl "net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fleet"
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
	// Locks is the refit lock the fleet verbs take (the handlers'
	// Config.FleetLocks): the update holds it on each policy from the
	// wave that takes it until the policy is done or failed, so a fleet
	// verb on that policy meanwhile is refused, and it does not take a
	// policy a fleet verb holds. Nil: the manager's own.
	Locks *fleet.Locks
}

// Manager runs rolling updates. All methods are safe for concurrent use;
// Run does the work.
type Manager struct {
	cfg Config

	mu       sync.Mutex
	updates  map[string]*Update
	running  *Update
	inflight map[string]bool // policy ids whose step's call is in flight
	// locked releases the refit lock the running update holds, by policy id.
	locked map[string]func()
	wake   chan struct{}
	// calls are the engine resumes sent outside Run (Abort); Run waits
	// for them when it returns.
	calls sync.WaitGroup
	// starting: a Start is storing its new update.
	starting bool
	// writes are the store writes decided under mu, made by flush after
	// mu is released, in order (store.go).
	writes  []*write
	flushMu sync.Mutex
	// view is what the readers see: the updates as last stored.
	view atomic.Pointer[view]
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
	if cfg.Locks == nil {
		cfg.Locks = &fleet.Locks{}
	}
	m := &Manager{cfg: cfg, inflight: map[string]bool{}, locked: map[string]func(){}, wake: make(chan struct{}, 1)}
	if err := m.Restore(docs); err != nil {
		return nil, err
	}
	return m, nil
}

// Restore replaces what the manager knows by docs, the documents the store
// holds, and continues the running update among them. A replica that
// becomes the leader restores, since the old leader may have moved its
// update on. Writes queued and not made yet are dropped, as of the state
// replaced. Call it while Run is not running.
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
	m.flushMu.Lock() // no write of the updates replaced is made meanwhile
	defer m.flushMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.writes {
		w.err = errRestored // of the state replaced: not made
	}
	m.updates, m.running, m.writes = updates, running, nil
	m.view.Store(newView(updates))
	clear(m.inflight)
	for id, release := range m.locked {
		release()
		delete(m.locked, id)
	}
	if running != nil {
		for _, p := range running.Policies {
			if p.Phase == PhaseDraining || p.Phase == PhaseUpdating {
				if err := m.lockLocked(running, p.ID, p.Index); err != nil {
					m.cfg.Logger.Warn("rolling update: refit lock of a policy it works on", "update", running.ID, "err", err)
				}
			}
		}
		if !running.Spec.Selector.Empty() {
			m.cfg.State.SetJoinFloor(0)
			m.kick()
			return nil
		}
		m.cfg.State.SetJoinFloor(running.Spec.Version)
		for _, p := range running.Policies {
			if p.Held && p.Phase == PhasePending {
				_ = m.cfg.State.Hold(p.ID, running.Spec.Version) // an unknown id was removed meanwhile
			}
		}
	} else {
		m.cfg.State.SetJoinFloor(0)
	}
	m.kick()
	return nil
}

// Start begins an update of spec and returns it. It returns ErrRunning
// while another update runs, and a *fleet.HeldError when a fleet verb
// holds the refit lock of a policy the update is to take.
func (m *Manager) Start(ctx context.Context, spec Spec) (Update, error) {
	u, w, err := m.prepare(ctx, spec)
	if err != nil {
		return Update{}, err
	}
	m.flush() // stored before it runs: a router that restarts continues it
	m.mu.Lock()
	defer m.mu.Unlock()
	m.starting = false
	if w.err != nil {
		return Update{}, w.err
	}
	m.updates[u.ID] = u
	m.running = u
	// Policies registered from now on wait for this version, unless the
	// update is for part of the fleet only.
	if spec.Selector.Empty() {
		m.cfg.State.SetJoinFloor(spec.Version)
	}
	m.kick()
	return u.clone(), nil
}

// prepare makes the update of spec that Start runs, queues its write and
// reserves the place of the running update for it.
func (m *Manager) prepare(ctx context.Context, spec Spec) (*Update, *write, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.running != nil:
		return nil, nil, fmt.Errorf("%w: %s", ErrRunning, m.running.ID)
	case m.starting:
		return nil, nil, fmt.Errorf("%w: another one is starting", ErrRunning)
	}
	spec.Selector = cloneSelector(spec.Selector)
	u := &Update{ID: uuid.NewString(), Spec: spec, State: StateRunning, Created: m.cfg.Now().UTC(), Policies: []*Policy{}}
	_, members := m.fleet(spec.Selector)
	for _, mb := range members {
		if h, ok := m.cfg.Locks.Holder(mb.ID); ok && mb.Version < spec.Version {
			return nil, nil, &fleet.HeldError{PolicyID: mb.ID, Index: mb.Index, Holder: h}
		}
	}
	m.listPendingLocked(u, members, u.Created) // the answer lists what the update is to do
	m.starting = true
	return u, m.storeLocked(ctx, u), nil
}

// lockLocked takes the refit lock of the policy for u. Caller must hold mu.
func (m *Manager) lockLocked(u *Update, id string, index int) error {
	if _, ok := m.locked[id]; ok {
		return nil
	}
	release, err := m.cfg.Locks.Acquire([]routing.Policy{{ID: id, Index: index}}, u.holder())
	if err != nil {
		return err
	}
	m.locked[id] = release
	return nil
}

// unlockLocked releases the refit lock of the policy, if the update holds
// it. Caller must hold mu.
func (m *Manager) unlockLocked(id string) {
	if release, ok := m.locked[id]; ok {
		release()
		delete(m.locked, id)
	}
}

// Get returns the update with the given id, as last stored.
func (m *Manager) Get(id string) (Update, error) {
	u := m.view.Load().updates[id]
	if u == nil {
		return Update{}, ErrNotFound
	}
	return u.clone(), nil
}

// List returns every update, as last stored, newest first.
func (m *Manager) List() []Update {
	v := m.view.Load()
	out := make([]Update, 0, len(v.updates))
	for _, u := range v.updates {
		out = append(out, u.clone())
	}
	slices.SortFunc(out, func(a, b Update) int { return b.Created.Compare(a.Created) })
	return out
}

// Latest returns the running update, else the one started last, if any,
// as last stored.
func (m *Manager) Latest() (Update, bool) {
	latest := m.view.Load().latest
	if latest == nil {
		return Update{}, false
	}
	return latest.clone(), true
}

// latestLocked returns the running update, else the one started last, or
// nil. Caller must hold mu.
func (m *Manager) latestLocked() *Update {
	if m.running != nil {
		return m.running
	}
	return latestOf(m.updates)
}

// Running returns the running update, if any, as last stored.
func (m *Manager) Running() (Update, bool) {
	if latest := m.view.Load().latest; latest != nil && latest.State == StateRunning {
		return latest.clone(), true
	}
	return Update{}, false
}

// Done records that the trainer has updated the given policies of the
// update (external mode). Each must be in the running update's wave
// (updating), or be done already, or already report the update's version:
// Done is idempotent, so a trainer that confirms a policy twice, or one
// the router saw reach the version first, gets no error. Only policies
// already done may be named once the update has ended.
func (m *Manager) Done(ctx context.Context, id string, policyIDs []string) (Update, error) {
	out, w, err := m.confirm(ctx, id, policyIDs)
	if err != nil || w == nil {
		return out, err
	}
	m.flush()
	if w.err != nil {
		return Update{}, w.err
	}
	return out, nil
}

// confirm records Done's confirmations and returns the update and the
// write that stores them (nil when nothing changed).
func (m *Manager) confirm(ctx context.Context, id string, policyIDs []string) (Update, *write, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.updates[id]
	if u == nil {
		return Update{}, nil, ErrNotFound
	}
	var confirm []*Policy
	for _, pid := range policyIDs {
		p := u.policy(pid)
		switch {
		case p != nil && p.Phase == PhaseDone:
		case u != m.running:
			return Update{}, nil, fmt.Errorf("%w: it is %s, and policy %q is not done in it", ErrEnded, u.State, pid)
		case p != nil && p.Phase == PhaseUpdating:
			if !p.Confirmed {
				confirm = append(confirm, p)
			}
		case p == nil || p.Phase == PhasePending:
			if ps, ok := m.cfg.State.PolicyStats(pid); ok && ps.Version >= u.Spec.Version {
				continue // at the version already: the update will not take it
			}
			fallthrough
		default:
			phase := PhasePending
			if p != nil {
				phase = p.Phase
			}
			return Update{}, nil, fmt.Errorf("%w: policy %q is %s in update %s, not updating", ErrNotReady, pid, phase, id)
		}
	}
	if len(confirm) == 0 {
		return u.clone(), nil, nil
	}
	for _, p := range confirm {
		p.Confirmed = true
	}
	w := m.storeLocked(ctx, u)
	m.kick()
	return u.clone(), w, nil
}

// errRestored: a write was dropped by Restore before it was made.
var errRestored = errors.New("updates: the manager restored the stored updates before this change was stored")

// ErrNotReady: a confirmation named a policy the update is not waiting for.
var ErrNotReady = fmt.Errorf("policy not ready")

// Abort ends the running update with the given id and resumes every
// policy it drained, failed ones included.
func (m *Manager) Abort(ctx context.Context, id string) (Update, error) {
	defer m.flush()
	m.mu.Lock()
	defer m.mu.Unlock()
	u, err := m.runningLocked(id)
	if err != nil {
		return Update{}, err
	}
	for _, p := range u.Policies {
		if p.Phase == PhaseDraining || p.Phase == PhaseUpdating || p.Phase == PhaseFailed {
			m.resumeLocked(ctx, p)
			m.resumeEngineLocked(p)
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
// calls in flight to end.
func (m *Manager) Run(ctx context.Context) error {
	var actions sync.WaitGroup
	defer m.calls.Wait()
	defer actions.Wait()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		m.step(ctx, &actions)
		m.flush()
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
	if m.cfg.Ready != nil && !m.cfg.Ready() {
		return
	}
	if latest := m.latestLocked(); latest != nil && latest != m.running {
		m.resumeReleasedLocked(ctx, latest)
	}
	u := m.running
	if u == nil {
		return
	}
	now := m.cfg.Now().UTC()
	stats, members := m.fleet(u.Spec.Selector)
	changed := m.listPendingLocked(u, members, now)
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
		if observeLocked(p, ps) {
			changed = true
		}
		if p.Phase == PhaseDraining {
			// Pause mode wait drains first; the others leave the work in
			// flight to the engine.
			idle := ps.Inflight == 0 && ps.Load == 0 && ps.Heard && !ps.ReportedBusy
			if u.Spec.pauseMode() == engine.PauseWait && !idle && now.Sub(p.Since) < u.Spec.DrainTimeout {
				continue
			}
			p.DrainTimedOut = u.Spec.pauseMode() == engine.PauseWait && !idle
			p.Phase, p.Since, p.Step = PhaseUpdating, now, ""
			changed = true
		}
		if m.advanceLocked(ctx, u, p, ps, now, actions) {
			changed = true
		}
	}

	switch {
	case u.Failures > u.Spec.MaxFailures:
		m.endLocked(ctx, u, StateFailed, fmt.Sprintf("%d of the policies failed, more than max_failures %d", u.Failures, u.Spec.MaxFailures))
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
			m.succeedLocked(ctx, u)
			return
		}
		// A policy a fleet verb holds is not taken until the verb ends.
		busy := maps.Clone(skip)
		for _, mb := range members {
			if _, ok := m.cfg.Locks.Holder(mb.ID); ok {
				busy[mb.ID] = true
			}
		}
		wave := planWave(members, u.Spec.Version, u.Spec.MaxUnavailable-u.held(), u.Spec.MinAvailablePerNode, busy)
		wave = slices.DeleteFunc(wave, func(mb member) bool { return m.lockLocked(u, mb.ID, mb.Index) != nil })
		if len(wave) == 0 {
			break // blocked: unavailable or locked policies, or the per-node floor; wait
		}
		u.Waves++
		for _, mb := range wave {
			p := u.policy(mb.ID)
			if p == nil {
				p = &Policy{ID: mb.ID, Index: mb.Index, Node: mb.Node, Engine: mb.Engine}
				u.Policies = append(u.Policies, p)
			}
			p.Phase, p.Wave, p.Since, p.Drained = PhaseDraining, u.Waves, now, now
			p.Confirmed, p.ActionDone, p.ActionErr, p.Step = false, time.Time{}, "", ""
			m.drainLocked(ctx, u, p)
		}
		changed = true
	}
	if changed {
		m.commitLocked(ctx, u)
	}
}

// fleet returns the registered policies' routing stats by id, and those
// sel picks as the members waves are planned over.
func (m *Manager) fleet(sel fleet.Selector) (map[string]routing.PolicyStats, []member) {
	stats := map[string]routing.PolicyStats{}
	var members []member
	for _, ps := range m.cfg.State.Stats().Policies {
		stats[ps.Policy.ID] = ps
		if !sel.Matches(ps.Policy) {
			continue
		}
		members = append(members, member{ID: ps.Policy.ID, Index: ps.Policy.Index, Node: ps.Node, Version: ps.Version,
			Engine: ps.Policy.EngineName(), Available: ps.Available, Held: ps.Held})
	}
	return stats, members
}

// resumeReleasedLocked resumes the engine of each policy the ended
// update u failed with its engine paused, once an operator has resumed
// the policy (POST /policies/{id}/resume, on any replica): the router
// routes to it again, and a paused engine would hold that traffic
// forever.
func (m *Manager) resumeReleasedLocked(ctx context.Context, u *Update) {
	changed := false
	for _, p := range u.Policies {
		if p.Phase != PhaseFailed || !p.Paused {
			continue
		}
		if ps, ok := m.cfg.State.PolicyStats(p.ID); ok && !ps.Draining {
			m.resumeEngineLocked(p)
			changed = changed || !p.Paused
		}
	}
	if changed {
		m.commitLocked(ctx, u)
	}
}

// listPendingLocked keeps the pending policies of u listed: every
// registered policy below the update's version that no wave has taken yet
// is in u.Policies as pending, in wave 0, so that a client sees the whole
// update from its start; a pending policy that was removed, or reached
// the version without the update, leaves the list. A pending policy that
// routing holds (it joined during the update) is marked Held, so that a
// new leader restores the hold. It reports whether the list changed.
func (m *Manager) listPendingLocked(u *Update, members []member, now time.Time) bool {
	listed := make(map[string]*Policy, len(u.Policies))
	for _, p := range u.Policies {
		listed[p.ID] = p
	}
	below := make(map[string]bool, len(members))
	changed := false
	for _, mb := range members {
		if mb.Version >= u.Spec.Version {
			continue
		}
		below[mb.ID] = true
		p := listed[mb.ID]
		if p == nil {
			p = &Policy{ID: mb.ID, Index: mb.Index, Node: mb.Node, Engine: mb.Engine, Phase: PhasePending, Since: now}
			u.Policies = append(u.Policies, p)
			changed = true
		}
		if mb.Held && !p.Held && p.Phase == PhasePending {
			p.Held, changed = true, true
		}
	}
	kept := slices.DeleteFunc(u.Policies, func(p *Policy) bool { return p.Phase == PhasePending && !below[p.ID] })
	if len(kept) != len(u.Policies) {
		changed = true
	}
	u.Policies = kept
	return changed
}

// versionWait is how long a policy that reports versions may take, after
// its last step, to report the target version, when the update sets no
// phase timeout.
const versionWait = 30 * time.Second

// send makes call c to the policy at url, with key as a bearer token when
// there is one, bounded by timeout, and returns its record. An error
// names the status and the engine's message.
func (m *Manager) send(ctx context.Context, url, key string, c engine.Call, timeout time.Duration) Call {
	rec := Call{Method: c.Method, Path: c.Path, Time: m.cfg.Now().UTC()}
	start := time.Now()
	err := func() error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var body io.Reader
		if c.Body != nil {
			body = bytes.NewReader(c.Body)
		}
		req, err := http.NewRequestWithContext(ctx, c.Method, strings.TrimRight(url, "/")+c.Path, body)
		if err != nil {
			return err
		}
		if c.Body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := m.cfg.Client.Do(req)
		if err != nil {
			var ue *neturl.Error
			if errors.As(err, &ue) {
				err = ue.Err // the URL is the policy's, shown elsewhere without its password
			}
			return err
		}
		defer resp.Body.Close()
		rec.Status = resp.StatusCode
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode == http.StatusNotFound && c.Optional {
			return nil // a server older than the call: the step is skipped
		}
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("status %d: %s", resp.StatusCode, engineMessage(answer))
		}
		return nil
	}()
	rec.Duration = time.Since(start)
	if err != nil {
		rec.Error = err.Error()
	}
	return rec
}

// engineMessage is what an engine's error answer says: its "message" or
// "error" (SGLang's {"success": false, "message"}, vLLM's {"error"},
// FastAPI's {"detail"}), else the body itself, cut short.
func engineMessage(body []byte) string {
	var v struct {
		Message any `json:"message"`
		Error   any `json:"error"`
		Detail  any `json:"detail"`
	}
	if json.Unmarshal(body, &v) == nil {
		for _, f := range []any{v.Message, v.Error, v.Detail} {
			switch f := f.(type) {
			case string:
				if f != "" {
					return f
				}
			case map[string]any:
				if msg, ok := f["message"].(string); ok && msg != "" {
					return msg
				}
			}
		}
	}
	body = bytes.TrimSpace(body)
	if len(body) > 512 {
		body = append(body[:512:512], "..."...)
	}
	return string(body)
}

// finishLocked marks p done and resumes it.
func (m *Manager) finishLocked(ctx context.Context, p *Policy, now time.Time) {
	m.resumeLocked(ctx, p)
	m.unlockLocked(p.ID)
	p.Phase, p.Since, p.Ended, p.Step = PhaseDone, now, now, ""
}

// failLocked marks p failed; it stays drained (quarantined: /stats shows
// it update_failed), and its engine stays paused if the update paused it.
func (m *Manager) failLocked(u *Update, p *Policy, why string, now time.Time) {
	p.Phase, p.Since, p.Ended, p.Error = PhaseFailed, now, now, why
	m.unlockLocked(p.ID)
	u.Failures++
	m.cfg.Logger.Warn("rolling update: policy failed", "update", u.ID, "policy_id", p.ID, "index", p.Index, "error", why)
}

// endLocked ends the running update in state. A failed update resumes the
// policies of its wave in progress; its failed ones stay drained.
func (m *Manager) endLocked(ctx context.Context, u *Update, state, why string) {
	now := m.cfg.Now().UTC()
	if state == StateFailed {
		for _, p := range u.Policies {
			if p.Phase == PhaseDraining || p.Phase == PhaseUpdating {
				m.resumeLocked(ctx, p)
				m.resumeEngineLocked(p)
				p.Phase, p.Since, p.Step = PhasePending, now, ""
			}
		}
	}
	u.State, u.Ended, u.Error = state, now, why
	for _, p := range u.Policies {
		m.unlockLocked(p.ID)
	}
	m.running = nil
	m.cfg.State.SetJoinFloor(0)
	m.cfg.Logger.Info("rolling update ended", "update", u.ID, "state", state, "waves", u.Waves, "failures", u.Failures, "error", why)
	m.commitLocked(ctx, u)
}

// Quarantined returns the policies that failed in the latest update, by
// id, with why: they stay drained until an operator resumes them.
func (m *Manager) Quarantined() map[string]string {
	latest := m.view.Load().latest
	out := map[string]string{}
	if latest != nil {
		for _, p := range latest.Policies {
			if p.Phase == PhaseFailed {
				out[p.ID] = p.Error
			}
		}
	}
	return out
}

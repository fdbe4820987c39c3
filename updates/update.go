// Package updates rolls new weights through the fleet in waves, so that
// the fleet is never emptied: each wave drains at most MaxUnavailable
// policies below the target version, never leaving a node with fewer than
// MinAvailablePerNode routable policies, waits until they have no work (or
// DrainTimeout passes), has them load the new weights (by sending them an
// HTTP action, or, in external mode, by letting the trainer do it and say
// so), and resumes them once they are at the version.
//
// One update runs at a time. Its state is stored after every change, so a
// router that restarts continues it.
package updates

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/policyrouter/policyrouter/fleet"
)

// Update states.
const (
	StateRunning   = "running"
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
	StateAborted   = "aborted"
)

// Policy phases within an update.
const (
	PhasePending  = "pending" // not in a wave yet
	PhaseDraining = "draining"
	PhaseUpdating = "updating"
	PhaseDone     = "done"
	PhaseFailed   = "failed"
)

// Phases lists the policy phases in the order a policy goes through them.
var Phases = []string{PhasePending, PhaseDraining, PhaseUpdating, PhaseDone, PhaseFailed}

// Steps of a policy in PhaseUpdating, in the order it takes them; a step
// its engine has not got is skipped (steps.go).
const (
	StepPause   = "pause"   // the engine pauses generation
	StepLoad    = "load"    // the engine loads the weights (model_path), or the action runs
	StepReady   = "ready"   // external mode: waiting for the trainer's done
	StepVersion = "version" // the engine is told the version (external mode)
	StepResume  = "resume"  // the engine resumes generation
	StepConfirm = "confirm" // waiting for the policy to report the version
)

// Errors of the manager.
var (
	// ErrRunning: another update is running; one runs at a time.
	ErrRunning = errors.New("an update is already running")
	// ErrNotFound: no update has the given id.
	ErrNotFound = errors.New("update not found")
	// ErrEnded: the update is no longer running.
	ErrEnded = errors.New("update has ended")
)

// Action is the HTTP request that makes a policy load the new weights:
// Method to the policy's URL plus Path, with Body, bounded by Timeout.
type Action struct {
	Method  string          `json:"method"`
	Path    string          `json:"path"`
	Body    json.RawMessage `json:"body,omitempty"`
	Timeout time.Duration   `json:"timeout"`
}

// Spec is what an update is asked to do.
type Spec struct {
	// Version is the target weight version.
	Version int64 `json:"version"`
	// Action, when set, is sent to each policy of a wave; nil is external
	// mode: the trainer updates the wave's policies and confirms.
	Action *Action `json:"action,omitempty"`
	// MaxUnavailable is the most policies drained or updating at once,
	// counting failed ones, which stay drained.
	MaxUnavailable int `json:"max_unavailable"`
	// MaxUnavailablePercent, when set, asks for MaxUnavailable as a
	// percentage of the policies the update is for: Validate resolves it
	// into MaxUnavailable and clears it, so it is never stored.
	MaxUnavailablePercent *float64 `json:"-"`
	// MinAvailablePerNode is the fewest routable policies a wave may leave
	// on a node.
	MinAvailablePerNode int `json:"min_available_per_node"`
	// DrainTimeout bounds the wait for a drained policy's work to end; the
	// policy is then updated anyway, and its record says so.
	DrainTimeout time.Duration `json:"drain_timeout"`
	// MaxFailures failures are tolerated; one more ends the update failed.
	MaxFailures int `json:"max_failures"`
	// ModelPath, when set, is the checkpoint engines that can load from
	// disk (SGLang) are told to load; policies whose engine cannot, take
	// the Action, or else wait for the trainer (external mode).
	ModelPath string `json:"model_path,omitempty"`
	// PauseMode is how a policy's work in flight is handled: engine.PauseWait
	// ("" too) drains the policy first; the others are passed to its
	// engine, PauseAbort ending the policy's leases at once.
	PauseMode string `json:"pause_mode,omitempty"`
	// SetFloor moves the /weights floor to Version when the update succeeds.
	SetFloor bool `json:"set_floor,omitempty"`
	// PhaseTimeout, when positive, fails a policy that stays longer in one
	// step of its update (and bounds each engine call); 0: engine calls
	// get the action's default timeout, and only the confirmation of the
	// version is bounded (versionWait).
	PhaseTimeout time.Duration `json:"phase_timeout,omitempty"`
	// Selector picks the policies the update is for (the fleet verbs'
	// selector); the others keep their version and keep serving. Empty:
	// every policy, and policies registered during the update are held
	// until they reach its version.
	Selector fleet.Selector `json:"selector,omitzero"`
}

// External reports whether the trainer moves the weights itself: neither
// an action nor a model path.
func (s Spec) External() bool { return s.Action == nil && s.ModelPath == "" }

// Call is an HTTP call the update made to a policy: the action, or one of
// its engine's steps.
type Call struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	// Status is the answer's status; 0 while the call is in flight or when
	// it got no answer (Error says why).
	Status   int           `json:"status"`
	Error    string        `json:"error,omitempty"`
	Time     time.Time     `json:"time"`
	Duration time.Duration `json:"duration"`
}

// Policy is one policy's progress in an update.
type Policy struct {
	ID    string `json:"id"`
	Index int    `json:"index"`
	Node  string `json:"node"`
	Phase string `json:"phase"`
	// Wave is the wave the policy was taken in, from 1.
	Wave int `json:"wave"`
	// Since is when the policy entered its phase; Drained when its wave
	// drained it; Ended when it was done or failed.
	Since   time.Time `json:"since"`
	Drained time.Time `json:"drained"`
	Ended   time.Time `json:"ended,omitzero"`
	// DrainTimedOut: the policy was updated with work still on it.
	DrainTimedOut bool `json:"drain_timed_out,omitempty"`
	// ActionDone is when the current step's call (the action, or an engine
	// call) answered; ActionErr why it failed.
	ActionDone time.Time `json:"action_done,omitzero"`
	ActionErr  string    `json:"action_error,omitempty"`
	// Confirmed: the trainer said it updated the policy (external mode).
	Confirmed bool   `json:"confirmed,omitempty"`
	Error     string `json:"error,omitempty"`
	// Engine is the policy's engine; Step its step within PhaseUpdating,
	// entered at StepSince.
	Engine    string    `json:"engine,omitempty"`
	Step      string    `json:"step,omitempty"`
	StepSince time.Time `json:"step_since,omitzero"`
	// Paused: the update paused the engine and has not resumed it yet.
	Paused bool `json:"paused,omitempty"`
	// Held: the policy was registered while the update ran, and gets no
	// work until it reaches the update's version (routing's join floor).
	// It is stored so that a new leader holds it too.
	Held bool `json:"held,omitempty"`
	// ReportedVersion and WeightVersion are what the policy last reported
	// (its integer and its engine's string).
	ReportedVersion int64  `json:"reported_version"`
	WeightVersion   string `json:"weight_version,omitempty"`
	// LastCall is the last call the update made to the policy.
	LastCall *Call `json:"last_call,omitempty"`
	// AbortedLeases counts the leases a PauseAbort ended.
	AbortedLeases int `json:"aborted_leases,omitempty"`
}

// Update is one rolling update and its progress.
type Update struct {
	ID      string    `json:"id"`
	Spec    Spec      `json:"spec"`
	State   string    `json:"state"`
	Created time.Time `json:"created"`
	Ended   time.Time `json:"ended,omitzero"`
	// Waves is how many waves have started.
	Waves    int       `json:"waves"`
	Policies []*Policy `json:"policies"`
	Failures int       `json:"failures"`
	// Error says why the update failed.
	Error string `json:"error,omitempty"`
	// Floor is the /weights floor the update set when it succeeded
	// (Spec.SetFloor); 0 when it set none.
	Floor int64 `json:"floor,omitempty"`
}

// clone returns a deep copy of u.
func (u *Update) clone() Update {
	out := *u
	out.Policies = make([]*Policy, len(u.Policies))
	for i, p := range u.Policies {
		cp := *p
		if p.LastCall != nil {
			c := *p.LastCall
			cp.LastCall = &c
		}
		out.Policies[i] = &cp
	}
	if u.Spec.Action != nil {
		a := *u.Spec.Action
		out.Spec.Action = &a
	}
	out.Spec.Selector = cloneSelector(u.Spec.Selector)
	return out
}

// held counts the policies the update keeps out of routing: draining,
// updating, or failed (a failed policy stays drained).
func (u *Update) held() int {
	n := 0
	for _, p := range u.Policies {
		switch p.Phase {
		case PhaseDraining, PhaseUpdating, PhaseFailed:
			n++
		}
	}
	return n
}

// inWave reports whether a wave is still in progress.
func (u *Update) inWave() bool {
	for _, p := range u.Policies {
		if p.Phase == PhaseDraining || p.Phase == PhaseUpdating {
			return true
		}
	}
	return false
}

// policy returns the update's record of the policy with the given id.
func (u *Update) policy(id string) *Policy {
	for _, p := range u.Policies {
		if p.ID == id {
			return p
		}
	}
	return nil
}

// cloneSelector returns a deep copy of s.
func cloneSelector(s fleet.Selector) fleet.Selector {
	s.IDs = slices.Clone(s.IDs)
	s.Indices = slices.Clone(s.Indices)
	s.Labels = maps.Clone(s.Labels)
	return s
}

// holder names the update as the refit lock's holder of its policies.
func (u *Update) holder() string { return "update " + u.ID }

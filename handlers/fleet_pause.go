package handlers

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fleet"
	"github.com/policyrouter/policyrouter/routing"
)

// A pause made through the router is a state. POST /fleet/engine with an
// engine's pause verb (engine.VerbOf: SGLang's pause_generation, vLLM's
// pause) marks its policies paused (Policy.PauseMarked, stored like the
// sleep mark, so that a restarted router and a new leader read it) before
// the call is sent, waits for the probes to say so, and holds their refit
// lock until the matching resume verb comes through the same route: no
// request and no update reaches a paused engine. A pause call that fails
// clears its mark. Where the engine reports its pause (vLLM's GET
// /is_paused) its report wins, and a resume sent to the engine directly
// clears the mark, and the hold, at the first probe that shows it
// (ObserveProbe).

// pauseHolds are the refit locks held for paused policies, by policy id:
// they follow the stored marks (sync), so that a router that restarted,
// or became the leader, holds what the marks say.
type pauseHolds struct {
	mu       sync.Mutex
	held     map[string]func() // policy id -> release; caller must hold mu
	clearing map[string]bool   // a mark being cleared after a probe; caller must hold mu
	// synced is the snapshot the holds were last made to follow.
	synced atomic.Pointer[routing.Snapshot]
}

// pauseHolder names the hold of a paused policy in a 409.
func pauseHolder(p routing.Policy) string {
	return "a pause through POST /fleet/engine (resume it with POST /fleet/engine" + engine.ResumePath(p) + ")"
}

// syncPauseHolds makes the pause holds follow the marks of the current
// snapshot: a marked policy not held is held (unless another holds it
// now: a pause or resume in flight, whose end settles it), a held one no
// longer marked, or gone, is released. Without force, nothing is done
// when the snapshot is the one last followed.
func (s *Server) syncPauseHolds(force bool) {
	snap := s.State.Snapshot()
	if !force && s.pauses.synced.Load() == snap {
		return
	}
	s.pauses.mu.Lock()
	defer s.pauses.mu.Unlock()
	s.pauses.synced.Store(snap)
	if s.pauses.held == nil {
		s.pauses.held = make(map[string]func())
	}
	marked := make(map[string]bool)
	for _, p := range snap.Policies() {
		if !p.PauseMarked {
			continue
		}
		marked[p.ID] = true
		if _, ok := s.pauses.held[p.ID]; !ok {
			if release, err := s.fleetLocks.Acquire([]routing.Policy{p}, pauseHolder(p)); err == nil {
				s.pauses.held[p.ID] = release
			}
		}
	}
	for id, release := range s.pauses.held {
		if !marked[id] {
			release()
			delete(s.pauses.held, id)
		}
	}
}

// ObserveProbe is told of every probe the poller makes: a pause-marked
// policy whose engine answers, and says it is not paused (only an engine
// that reports its pause can: vLLM), was resumed directly; its mark is
// cleared and its hold released. A pause or resume of the router's own in
// flight on it settles the mark itself, and is left to. Safe for
// concurrent use.
func (s *Server) ObserveProbe(id string, p routing.Probe) {
	s.syncPauseHolds(false)
	if !p.OK || p.Paused {
		return
	}
	snap := s.State.Snapshot()
	pos, ok := snap.ByID(id)
	if !ok {
		return
	}
	pol := snap.Policies()[pos]
	if !pol.PauseMarked {
		return
	}
	if h, held := s.fleetLocks.Holder(id); !held || h != pauseHolder(pol) {
		return
	}
	s.pauses.mu.Lock()
	if s.pauses.clearing == nil {
		s.pauses.clearing = make(map[string]bool)
	}
	if s.pauses.clearing[id] {
		s.pauses.mu.Unlock()
		return
	}
	s.pauses.clearing[id] = true
	s.pauses.mu.Unlock()
	go func() {
		defer func() {
			s.pauses.mu.Lock()
			delete(s.pauses.clearing, id)
			s.pauses.mu.Unlock()
		}()
		if err := s.clearPauseMarks(s.stopping, []string{id}); err != nil {
			s.logger.Warn("fleet pause: the engine says it resumed, but its pause mark could not be cleared", "policy", id, "error", err)
			return
		}
		s.logger.Info("fleet pause: the engine says it resumed; its pause mark is cleared", "policy", id)
		s.syncPauseHolds(true)
	}()
}

// clearPauseMarks clears the paused record of the policies with the given
// ids, even when the request that made the engine calls has ended.
func (s *Server) clearPauseMarks(ctx context.Context, ids []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fleetRecordTimeout)
	defer cancel()
	return s.Registry.SetPauseMarked(ctx, false, ids...)
}

// fleetGenerationVerb runs a fan-out of call, which pauses or resumes the
// generation of the policies verbs names (others get the call as any
// other): the calls hold the refit lock of every policy, a pause's
// success keeps it held, as a pause hold, and its mark set; a resume's
// success clears both.
func (s *Server) fleetGenerationVerb(w http.ResponseWriter, r *http.Request, pols []routing.Policy, call engine.Call, verbs map[string]engine.GenerationVerb) {
	var pausing, resuming []string
	for _, p := range pols {
		switch verbs[p.ID] {
		case engine.VerbPause:
			pausing = append(pausing, p.ID)
		case engine.VerbResume:
			resuming = append(resuming, p.ID)
		}
	}
	// A resume takes its policies over from their pause hold; anything
	// else held is refused.
	s.syncPauseHolds(false)
	s.pauses.mu.Lock()
	for _, id := range resuming {
		if release, ok := s.pauses.held[id]; ok {
			release()
			delete(s.pauses.held, id)
		}
	}
	release, err := s.fleetLocks.Acquire(pols, "POST /fleet/engine"+call.Path)
	s.pauses.mu.Unlock()
	if err != nil {
		s.syncPauseHolds(true) // held again, as their marks say
		s.writeError(w, r, err)
		return
	}
	defer func() {
		release()
		s.syncPauseHolds(true) // paused ones held, resumed ones free
	}()
	// Out of routing first: marked paused, the next probe says so, and no
	// request lands on an engine while it pauses. A mark that cannot be
	// stored sends no call.
	if err := s.Registry.SetPauseMarked(r.Context(), true, pausing...); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.awaitState(r.Context(), pausing, routing.StatePaused)
	results := s.fanOut(r.Context(), pols, func(routing.Policy) (engine.Call, bool) { return call, true })
	var unmark []string
	for _, res := range results {
		v := verbs[res.Policy.ID]
		if (v == engine.VerbPause && !res.OK()) || (v == engine.VerbResume && res.OK()) {
			unmark = append(unmark, res.Policy.ID) // not paused (any more): routed again
		}
	}
	if err := s.clearPauseMarks(r.Context(), unmark); err != nil {
		// Still out of routing, as if paused: the caller must know.
		markResumeFailures(results, verbs, err)
	}
	s.writeFleet(w, results)
}

// markResumeFailures says, on each resumed policy's result, that its mark
// could not be cleared.
func markResumeFailures(results []fleet.Result, verbs map[string]engine.GenerationVerb, err error) {
	for i := range results {
		if results[i].OK() && verbs[results[i].Policy.ID] == engine.VerbResume {
			results[i].Err = "resumed, but still marked paused (not routed): " + err.Error()
		}
	}
}

package handlers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fleet"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/updates"
)

// Defaults of POST /updates.
const (
	defaultDrainTimeout  = time.Minute
	defaultActionTimeout = 10 * time.Minute
)

func (s *Server) startUpdate(w http.ResponseWriter, r *http.Request) {
	var req api.UpdateRequest
	if err := s.decode(w, r, s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	spec, err := s.updateSpec(req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	u, err := s.Updates.Start(r.Context(), spec)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/updates/"+u.ID)
	writeJSON(w, http.StatusAccepted, updateToAPI(u, s.Now()))
}

// updateSpec checks a POST /updates body and fills in the defaults.
func (s *Server) updateSpec(req api.UpdateRequest) (updates.Spec, error) {
	spec := updates.Spec{Version: *req.Version, MaxUnavailable: 1, DrainTimeout: defaultDrainTimeout}
	pols := s.State.Snapshot().Policies()
	if req.Selector != nil {
		var err error
		if pols, err = s.fleetSelect(*req.Selector); err != nil {
			return spec, err
		}
		spec.Selector = fleet.Selector{IDs: req.Selector.IDs, Indices: req.Selector.Indices, Labels: req.Selector.Labels, Engine: req.Selector.Engine}
	}
	if raw := bytes.TrimSpace(req.MaxUnavailable); len(raw) > 0 && string(raw) != "null" {
		n, err := maxUnavailable(raw, len(pols))
		if err != nil {
			return spec, err
		}
		spec.MaxUnavailable = n
	}
	if req.MinAvailablePerNode != nil {
		spec.MinAvailablePerNode = *req.MinAvailablePerNode
	}
	if req.DrainTimeoutMS != nil {
		spec.DrainTimeout = time.Duration(*req.DrainTimeoutMS) * time.Millisecond
	}
	if req.MaxFailures != nil {
		spec.MaxFailures = *req.MaxFailures
	}
	if a := req.Action; a != nil {
		act := &updates.Action{Method: a.Method, Path: a.Path, Body: a.Body, Timeout: defaultActionTimeout}
		if act.Method == "" {
			act.Method = http.MethodPost
		}
		if len(act.Body) > 0 && !json.Valid(act.Body) {
			return spec, fieldError("action.body", "must be JSON")
		}
		if a.TimeoutMS != nil {
			act.Timeout = time.Duration(*a.TimeoutMS) * time.Millisecond
		}
		spec.Action = act
	}
	spec.ModelPath, spec.SetFloor = req.ModelPath, req.SetFloor
	if req.PhaseTimeoutMS != nil {
		spec.PhaseTimeout = time.Duration(*req.PhaseTimeoutMS) * time.Millisecond
	}
	if err := checkEngines(&spec, req.PauseMode, pols); err != nil {
		return spec, err
	}
	return spec, nil
}

// checkEngines sets the spec's pause mode and refuses what an engine of
// one of pols (the policies the update is for) cannot do: a pause mode it
// has not got, or a model_path it cannot load (without an action to fall
// back on).
func checkEngines(spec *updates.Spec, mode string, pols []routing.Policy) error {
	if mode == "" {
		mode = engine.PauseWait
	}
	if !slices.Contains(engine.PauseModes, mode) {
		return fieldError("pause_mode", "must be one of "+strings.Join(engine.PauseModes, ", "))
	}
	spec.PauseMode = mode
	seen := map[string]bool{}
	for _, p := range pols {
		name := p.EngineName()
		if seen[name] {
			continue
		}
		seen[name] = true
		steps, ok := engine.Lookup(name)
		if !ok {
			continue
		}
		if modes := steps.PauseModes(); !slices.Contains(modes, mode) {
			return fieldError("pause_mode", fmt.Sprintf("engine %s (policy %d) has no pause mode %q; it takes %s", name, p.Index, mode, strings.Join(modes, ", ")))
		}
		if _, disk := steps.LoadFromDisk(spec.ModelPath, ""); spec.ModelPath != "" && !disk && spec.Action == nil {
			return fieldError("model_path", fmt.Sprintf("engine %s (policy %d) cannot load weights from disk: leave model_path out and move the weights yourself (external mode), or give an action", name, p.Index))
		}
	}
	return nil
}

// maxUnavailable reads max_unavailable: a count >= 1, or a percentage of
// the registered policies ("25%"), rounded down but at least 1.
func maxUnavailable(raw json.RawMessage, policies int) (int, error) {
	const field = "max_unavailable"
	var n int
	if err := json.Unmarshal(raw, &n); err == nil {
		if n < 1 {
			return 0, fieldError(field, "must be >= 1, or a percentage such as \"25%\"")
		}
		return n, nil
	}
	var pct string
	if err := json.Unmarshal(raw, &pct); err != nil || !strings.HasSuffix(pct, "%") {
		return 0, fieldError(field, "must be a count >= 1 or a percentage string such as \"25%\"")
	}
	p, err := strconv.ParseFloat(strings.TrimSuffix(pct, "%"), 64)
	if err != nil || p <= 0 || p > 100 || math.IsNaN(p) {
		return 0, fieldError(field, "must be a percentage above 0% and at most 100%, not "+strconv.Quote(pct))
	}
	return max(int(math.Floor(p*float64(policies)/100)), 1), nil
}

func (s *Server) listUpdates(w http.ResponseWriter, r *http.Request) {
	out := api.UpdateList{Updates: []api.Update{}}
	for _, u := range s.Updates.List() {
		out.Updates = append(out.Updates, updateToAPI(u, s.Now()))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getUpdate(w http.ResponseWriter, r *http.Request) {
	u, err := s.Updates.Get(chi.URLParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, updateToAPI(u, s.Now()))
}

func (s *Server) updateDone(w http.ResponseWriter, r *http.Request) {
	var req api.UpdateDoneRequest
	if err := s.decode(w, r, s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	u, err := s.Updates.Done(r.Context(), chi.URLParam(r, "id"), req.Policies)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, updateToAPI(u, s.Now()))
}

func (s *Server) abortUpdate(w http.ResponseWriter, r *http.Request) {
	u, err := s.Updates.Abort(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, updateToAPI(u, s.Now()))
}

func updateToAPI(u updates.Update, now time.Time) api.Update {
	mode := u.Spec.PauseMode
	if mode == "" {
		mode = engine.PauseWait
	}
	out := api.Update{
		ID: u.ID, State: u.State, Version: u.Spec.Version, External: u.Spec.External(),
		MaxUnavailable: u.Spec.MaxUnavailable, MinAvailablePerNode: u.Spec.MinAvailablePerNode,
		DrainTimeoutMS: u.Spec.DrainTimeout.Milliseconds(), MaxFailures: u.Spec.MaxFailures,
		ModelPath: u.Spec.ModelPath, PauseMode: mode, SetFloor: u.Spec.SetFloor,
		PhaseTimeoutMS: u.Spec.PhaseTimeout.Milliseconds(), Floor: u.Floor,
		Created: u.Created, Ended: utcOrNil(u.Ended), Waves: u.Waves, Failures: u.Failures, Error: u.Error,
		Ready: []string{}, Policies: make([]api.UpdatePolicy, len(u.Policies)),
	}
	if sel := u.Spec.Selector; !sel.Empty() {
		out.Selector = &api.FleetSelector{IDs: sel.IDs, Indices: sel.Indices, Labels: sel.Labels, Engine: sel.Engine}
	}
	if !u.Ended.IsZero() {
		now = u.Ended
	}
	for i, p := range u.Policies {
		ap := api.UpdatePolicy{ID: p.ID, Index: p.Index, NodeID: p.Node, Phase: p.Phase, Wave: p.Wave,
			Since: p.Since, Drained: utcOrNil(p.Drained), Ended: utcOrNil(p.Ended), DrainTimedOut: p.DrainTimedOut, Error: p.Error,
			Engine: p.Engine, Step: p.Step, ExpectedVersion: u.Spec.Version, ReportedVersion: p.ReportedVersion,
			WeightVersion: p.WeightVersion, AbortedLeases: p.AbortedLeases, InPhaseMS: msSince(now, p.Since), Held: p.Held}
		if p.Phase == updates.PhaseUpdating {
			ap.InStepMS = msSince(now, p.StepSince)
		}
		if c := p.LastCall; c != nil {
			ap.LastCall = &api.UpdateCall{Method: c.Method, Path: c.Path, Status: c.Status, Error: c.Error,
				Time: c.Time.UTC(), DurationMS: float64(c.Duration) / float64(time.Millisecond)}
		}
		out.Policies[i] = ap
		switch p.Phase {
		case updates.PhaseDraining, updates.PhaseUpdating, updates.PhaseFailed:
			out.CapacityHeld++
		}
		if u.State == updates.StateRunning && p.Phase == updates.PhaseUpdating && p.Step == updates.StepReady && !p.Confirmed {
			out.Ready = append(out.Ready, p.ID)
		}
	}
	return out
}

// msSince is the milliseconds from t to now; 0 for a zero t.
func msSince(now, t time.Time) float64 {
	if t.IsZero() || now.Before(t) {
		return 0
	}
	return float64(now.Sub(t)) / float64(time.Millisecond)
}

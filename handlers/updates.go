package handlers

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fleet"
	"github.com/policyrouter/policyrouter/updates"
)

func (s *Server) startUpdate(w http.ResponseWriter, r *http.Request) {
	var req api.UpdateRequest
	if err := s.decode(w, r, s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	spec, err := updateSpec(req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	pols := s.State.Snapshot().Policies()
	if req.Selector != nil {
		if pols, err = s.fleetSelect(*req.Selector); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	if err := spec.Validate(pols); err != nil {
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

// updateSpec maps a POST /updates body to the spec it asks for; the spec's
// Validate checks it and fills in its defaults.
func updateSpec(req api.UpdateRequest) (updates.Spec, error) {
	spec := updates.NewSpec(*req.Version)
	if sel := req.Selector; sel != nil {
		spec.Selector = fleet.Selector{IDs: sel.IDs, Indices: sel.Indices, Labels: sel.Labels, Engine: sel.Engine}
	}
	if raw := bytes.TrimSpace(req.MaxUnavailable); len(raw) > 0 && string(raw) != "null" {
		if err := maxUnavailable(raw, &spec); err != nil {
			return spec, err
		}
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
		spec.Action = &updates.Action{Method: a.Method, Path: a.Path, Body: a.Body}
		if a.TimeoutMS != nil {
			spec.Action.Timeout = time.Duration(*a.TimeoutMS) * time.Millisecond
		}
	}
	spec.ModelPath, spec.SetFloor, spec.PauseMode = req.ModelPath, req.SetFloor, req.PauseMode
	if req.PhaseTimeoutMS != nil {
		spec.PhaseTimeout = time.Duration(*req.PhaseTimeoutMS) * time.Millisecond
	}
	return spec, nil
}

// maxUnavailable reads max_unavailable into spec: a count, or a
// percentage string ("25%") of the policies the update is for.
func maxUnavailable(raw json.RawMessage, spec *updates.Spec) error {
	if err := json.Unmarshal(raw, &spec.MaxUnavailable); err == nil {
		return nil
	}
	var pct string
	if err := json.Unmarshal(raw, &pct); err != nil || !strings.HasSuffix(pct, "%") {
		return fieldError("max_unavailable", "must be a count >= 1 or a percentage string such as \"25%\"")
	}
	p, err := strconv.ParseFloat(strings.TrimSuffix(pct, "%"), 64)
	if err != nil {
		return fieldError("max_unavailable", "must be a percentage above 0% and at most 100%, not "+strconv.Quote(pct))
	}
	spec.MaxUnavailablePercent = &p
	return nil
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

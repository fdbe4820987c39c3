package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/policyrouter/policyrouter/api"
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
	writeJSON(w, http.StatusAccepted, updateToAPI(u))
}

// updateSpec checks a POST /updates body and fills in the defaults.
func (s *Server) updateSpec(req api.UpdateRequest) (updates.Spec, error) {
	spec := updates.Spec{Version: *req.Version, MaxUnavailable: 1, DrainTimeout: defaultDrainTimeout}
	if raw := bytes.TrimSpace(req.MaxUnavailable); len(raw) > 0 && string(raw) != "null" {
		n, err := maxUnavailable(raw, len(s.State.Snapshot().Policies()))
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
	return spec, nil
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
		out.Updates = append(out.Updates, updateToAPI(u))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getUpdate(w http.ResponseWriter, r *http.Request) {
	u, err := s.Updates.Get(chi.URLParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, updateToAPI(u))
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
	writeJSON(w, http.StatusOK, updateToAPI(u))
}

func (s *Server) abortUpdate(w http.ResponseWriter, r *http.Request) {
	u, err := s.Updates.Abort(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, updateToAPI(u))
}

// updateError maps the update manager's errors.
func updateError(err error) (*Error, bool) {
	switch {
	case errors.Is(err, updates.ErrNotFound):
		return errorf(api.CodeNotFound, err.Error()), true
	case errors.Is(err, updates.ErrRunning), errors.Is(err, updates.ErrEnded), errors.Is(err, updates.ErrNotReady):
		return errorf(api.CodeConflict, err.Error()), true
	}
	return nil, false
}

func updateToAPI(u updates.Update) api.Update {
	out := api.Update{
		ID: u.ID, State: u.State, Version: u.Spec.Version, External: u.Spec.Action == nil,
		MaxUnavailable: u.Spec.MaxUnavailable, MinAvailablePerNode: u.Spec.MinAvailablePerNode,
		DrainTimeoutMS: u.Spec.DrainTimeout.Milliseconds(), MaxFailures: u.Spec.MaxFailures,
		Created: u.Created, Ended: utcOrNil(u.Ended), Waves: u.Waves, Failures: u.Failures, Error: u.Error,
		Ready: []string{}, Policies: make([]api.UpdatePolicy, len(u.Policies)),
	}
	for i, p := range u.Policies {
		out.Policies[i] = api.UpdatePolicy{ID: p.ID, Index: p.Index, NodeID: p.Node, Phase: p.Phase, Wave: p.Wave,
			Since: p.Since, Drained: utcOrNil(p.Drained), Ended: utcOrNil(p.Ended), DrainTimedOut: p.DrainTimedOut, Error: p.Error}
		switch p.Phase {
		case updates.PhaseDraining, updates.PhaseUpdating, updates.PhaseFailed:
			out.CapacityHeld++
		}
		if out.External && u.State == updates.StateRunning && p.Phase == updates.PhaseUpdating && !p.Confirmed {
			out.Ready = append(out.Ready, p.ID)
		}
	}
	return out
}

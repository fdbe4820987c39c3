package handlers

import (
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/proxy"
	"github.com/policyrouter/policyrouter/routing"
)

// The leader's side of proxying on every replica: a replica that proxies
// a request takes the lease of each attempt from the leader with one call
// and returns it with another (leaser_remote.go is the replica's side),
// so that the policies' capacity is counted in one place whichever
// replica carries the bytes. A replica whose requests outlive a leader
// hands their leases to the next one (PUT /internal/leases/{id}).

// mountInternal mounts the replicas' endpoints on r, whose middleware
// requires the route scope and answers not_leader on a follower.
func (s *Server) mountInternal(r chi.Router) {
	r.Post("/internal/leases", s.takeLease)
	r.Put("/internal/leases/{id}", s.adoptLease)
	r.Post("/internal/leases/{id}/release", s.returnLease)
	r.Get("/internal/routable", s.routable)
	r.Get("/internal/returning/{policy_id}", s.returning)
}

// takeLease serves POST /internal/leases: one attempt's decision, as the
// leader's own proxy makes it (stateLeaser), answered as /select answers.
func (s *Server) takeLease(w http.ResponseWriter, r *http.Request) {
	var req api.LeaseRequest
	if err := s.decode(w, r, s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	preq := proxy.Request{
		Router: req.Router, EnvID: req.EnvID, Session: req.SessionID,
		Wait:       min(time.Duration(req.TimeoutMS)*time.Millisecond, s.MaxSelectWait),
		StickyWait: time.Duration(req.StickyWaitMS) * time.Millisecond,
		MinVersion: req.MinVersion, LeaseTTL: time.Duration(req.LeaseTTLMS) * time.Millisecond,
		Model: req.Model, Route: req.Route, Exclude: req.Exclude, Prefix: req.PrefixHashes,
		AwaitReturn: req.AwaitReturn,
	}
	preq.StickyWait = min(preq.StickyWait, preq.Wait)
	if err := routing.CheckSession("session_id", req.SessionID); err != nil {
		s.writeError(w, r, err)
		return
	}
	leaser := stateLeaser{s}
	d, err := leaser.Select(r.Context(), preq)
	switch {
	case err == nil && r.Context().Err() != nil:
		// The replica left (its client did): the lease goes back at once.
		_ = leaser.Release(r.Context(), d, proxy.Outcome{})
		s.State.PrefixRelease(d.Policy.ID, req.PrefixHashes, false, -1) // never sent
	case err == nil:
		resp := decisionToAPI(d)
		if len(req.PrefixHashes) > 0 {
			resp.PrefixMatch, resp.PrefixOutcome = &d.PrefixMatch, d.PrefixOutcome
		}
		writeSelected(w, resp)
	case r.Context().Err() != nil:
	default:
		s.writeProxyError(w, r, err)
	}
}

// decisionToAPI is a decision as /select answers it.
func decisionToAPI(d routing.Decision) *api.SelectResponse {
	return &api.SelectResponse{
		Index: d.Policy.Index, ID: d.Policy.ID, URL: d.Policy.URL, NodeID: d.Node,
		LeaseID: d.LeaseID, Version: d.Version, WeightVersion: d.WeightLabel, Sticky: string(d.Sticky), EnvUnmapped: d.EnvUnmapped,
	}
}

// leaseIDParam is the {id} of an internal lease route: a lease id is a
// UUID, whichever router issued it.
func leaseIDParam(r *http.Request) (string, error) {
	id := chi.URLParam(r, "id")
	if _, err := uuid.Parse(id); err != nil {
		return "", fieldError("id", "must be a lease id (a UUID)")
	}
	return id, nil
}

// returnLease serves POST /internal/leases/{id}/release: the attempt is
// over. A lease that ended already (its TTL, an abort, an earlier term)
// answers released false, as /release does; a failure counts against
// the policy either way.
func (s *Server) returnLease(w http.ResponseWriter, r *http.Request) {
	id, err := leaseIDParam(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req api.LeaseReleaseRequest
	if err := s.decode(w, r, s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.ReleaseResponse{LeaseID: id}
	if lease, ok := s.State.ParseLeaseID(id); ok {
		sel, err := s.endLease(lease, req.Unfinished)
		switch {
		case err == nil:
			out.Released, out.Index, out.ID = true, &sel.Policy.Index, sel.Policy.ID
		case errors.Is(err, routing.ErrLeaseEnded):
			if how, ok := routing.HowEnded(err); ok {
				out.How = how.String()
			}
		}
	}
	if req.Failure != nil {
		s.State.ObserveFailure(req.PolicyID, req.Failure.At, req.Failure.Reason)
	}
	cached := -1
	if req.CachedTokens != nil {
		cached = *req.CachedTokens
	}
	s.State.PrefixRelease(req.PolicyID, req.PrefixHashes, req.Failure == nil && !req.Unfinished, cached)
	writeReleased(w, &out)
}

// adoptLease serves PUT /internal/leases/{id}: a lease another leader
// handed out, whose request still runs on the replica that holds it, is
// counted here from now on (routing.State.Adopt).
func (s *Server) adoptLease(w http.ResponseWriter, r *http.Request) {
	id, err := leaseIDParam(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req api.AdoptRequest
	if err := s.decode(w, r, s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	ttl := time.Duration(req.LeaseTTLMS) * time.Millisecond
	if ttl == 0 {
		ttl = s.State.LeaseTTL()
	}
	d, err := s.State.Adopt(routing.AdoptRequest{ID: id, Holder: req.Holder, PolicyID: req.PolicyID, TTL: ttl})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeSelected(w, decisionToAPI(d))
}

// routable serves GET /internal/routable: what a replica's GET /v1/models
// lists (proxy.Leaser's Available and ServedModels).
func (s *Server) routable(w http.ResponseWriter, r *http.Request) {
	leaser := stateLeaser{s}
	out := api.Routable{Available: []string{}}
	available, _ := leaser.Available(r.Context())
	for _, p := range available {
		out.Available = append(out.Available, p.ID)
	}
	out.Models, _ = leaser.ServedModels(r.Context())
	if out.Models == nil {
		out.Models = []string{}
	}
	writeJSON(w, http.StatusOK, out)
}

// returning serves GET /internal/returning/{policy_id}: the leader's
// Leaser.Returning, for a follower's proxy whose generation that policy
// aborted.
func (s *Server) returning(w http.ResponseWriter, r *http.Request) {
	until, ok := stateLeaser{s}.Returning(r.Context(), chi.URLParam(r, "policy_id"))
	out := api.Returning{Returning: ok}
	if ok {
		out.WithinMS = max(time.Until(until).Milliseconds(), 0)
	}
	writeJSON(w, http.StatusOK, out)
}

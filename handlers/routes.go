package handlers

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
)

func (s *Server) putWeights(w http.ResponseWriter, r *http.Request) {
	var req api.WeightsRequest
	if err := s.decode(w, r, s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.checkFloor(req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.Registry.SetWeights(r.Context(), store.Weights{Version: *req.Version, MaxStaleness: req.MaxStaleness}); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.getWeights(w, r)
}

func (s *Server) getWeights(w http.ResponseWriter, r *http.Request) {
	ws := s.Registry.Weights()
	writeJSON(w, http.StatusOK, api.Weights{Version: ws.Version, MaxStaleness: ws.MaxStaleness, MinVersion: ws.MinVersion()})
}

// router resolves a request's router name, the server's default when
// empty, in the table of routers. A name the table does not offer for the
// endpoint is a 422 naming the router field: never a silent default.
// names lists the offered names, for the message only.
func (s *Server) router(name string, offered func(routing.Router) bool, names func() []string) (routing.Router, error) {
	if name == "" {
		name = s.DefaultRouter
	}
	r, ok := routing.LookupRouter(name)
	if !ok || !offered(r) {
		return routing.Router{}, fieldError("router", "must be "+routing.NameList(names())+", not "+strconv.Quote(name))
	}
	return r, nil
}

func offersSelect(r routing.Router) bool { return r.Select != nil }

func offersAssign(r routing.Router) bool { return r.Assign != nil }

func (s *Server) assign(w http.ResponseWriter, r *http.Request) {
	var req api.AssignRequest
	if err := s.decode(w, r, s.MaxBodyBytes*16, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.CurrentLoads != nil && len(req.CurrentLoads) == 0 {
		s.writeError(w, r, fieldError("current_loads", "must have one load per policy; omit it to use the tracked loads"))
		return
	}
	router, err := s.router(req.Router, offersAssign, routing.AssignRouterNames)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	start := time.Now()
	sessions := sessionKeys(req.SessionIDs)
	a, err := s.State.Assign(routing.AssignRequest{
		Sessions:   sessions,
		LoadFactor: deref(req.LoadFactor),
		Kind:       router.Assign,
		NumTasks:   *req.NumTasks,
		Loads:      req.CurrentLoads,
		EnvIDs:     req.EnvIDs,
		MinVersion: req.MinVersion,
		TTL:        time.Duration(deref(req.AssignTTLMS)) * time.Millisecond,
		Prefix:     req.PrefixHashes,
	})
	s.observeDecision("assign", router.Name, start)
	if err != nil {
		if errors.Is(err, routing.ErrAllUnavailable) && req.CurrentLoads != nil {
			err = errorf(api.CodeAllUnavailable, "no policy to route to: every policy in current_loads is registered and unhealthy, draining or not yet heard from")
		}
		s.writeError(w, r, err)
		return
	}
	if router.EnvAffine {
		s.observeAffinity("assign", router.Name, a.Snapshot, req.EnvIDs, a.Indices)
		s.noteUnmapped(r.Context(), a.Snapshot, req.EnvIDs...)
	}
	if len(req.PrefixHashes) > 0 && req.CurrentLoads != nil {
		s.State.PrefixRecord(assignedIDs(a), req.PrefixHashes)
	}
	s.writeAssignment(w, a, anyUnmapped(a.Snapshot, req.EnvIDs))
}

func (s *Server) selectPolicy(w http.ResponseWriter, r *http.Request) {
	var req api.SelectRequest
	if err := s.decode(w, r, s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	wait := s.DefaultSelectWait
	if req.TimeoutMS != nil {
		wait = min(time.Duration(*req.TimeoutMS)*time.Millisecond, s.MaxSelectWait)
	}
	wait = max(wait-leaderWaited(r.Context()), 0) // what a fail-over took of it
	router, err := s.router(req.Router, offersSelect, routing.SelectRouterNames)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// decode checked the session key and the release mode (selectRequest).
	mode, _ := routing.ParseReleaseMode("release", req.Release)
	sreq := routing.SelectRequest{Router: router.Select, EnvID: req.EnvID, MinVersion: req.MinVersion, Session: req.SessionID, LoadFactor: deref(req.LoadFactor), Release: mode, PrefixHashes: req.PrefixHashes}
	if req.LeaseTTLMS != nil {
		sreq.LeaseTTL = time.Duration(*req.LeaseTTLMS) * time.Millisecond
	}
	if req.SessionID != "" {
		// The wait for the home is part of the wait for a policy.
		sticky := s.DefaultStickyWait
		if req.StickyWaitMS != nil {
			sticky = time.Duration(*req.StickyWaitMS) * time.Millisecond
		}
		sreq.StickyWait = min(sticky, wait)
	}
	sreq.Wait, sreq.Stop = wait, s.stopping.Done()
	d, ok := s.decide(w, r, "select", router.Name, sreq)
	if !ok {
		return
	}
	unmapped := d.EnvUnmapped
	if unmapped && router.EnvAffine {
		s.unmappedEnv(r.Context(), req.EnvID)
	}
	if router.EnvAffine && s.Metrics != nil && d.EnvNode != "" {
		hit := b2i(d.AffinityHeld())
		s.Metrics.ObserveAffinity("select", router.Name, hit, 1-hit)
	}
	resp := api.SelectResponse{
		Index: d.Policy.Index, ID: d.Policy.ID, URL: d.Policy.URL, NodeID: d.Node,
		LeaseID: d.LeaseID, Version: d.Version, WeightVersion: d.WeightLabel, Sticky: string(d.Sticky), EnvUnmapped: unmapped,
	}
	if len(req.PrefixHashes) > 0 {
		match := d.PrefixMatch // its own variable: &d.PrefixMatch put every decision on the heap
		resp.PrefixMatch, resp.PrefixOutcome = &match, d.PrefixOutcome
	}
	writeSelected(w, &resp)
}

// decide makes the one routing decision of a /select or a proxied
// request, and answers the caller itself when there is none (ok false):
// the coded reason, not_leader when this replica stopped leading while the
// call waited, or nothing when the caller left. A caller that left just
// as a policy was granted gets nothing either: the lease goes back at
// once instead of waiting for the poller or its TTL.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, endpoint, router string, req routing.SelectRequest) (d routing.Decision, ok bool) {
	start := time.Now()
	d, err := s.State.Select(r.Context(), req)
	s.observeDecision(endpoint, router, start)
	switch {
	case err == nil && r.Context().Err() != nil:
		if d.Lease != 0 {
			_, _ = s.State.Release(d.Lease)
		}
		return d, false
	case err == nil:
		return d, true
	case r.Context().Err() != nil:
		// Select consumed nothing and there is nobody to answer.
	case errors.Is(err, routing.ErrReset):
		s.writeNotLeader(w, r)
	default:
		s.writeError(w, r, err)
	}
	return d, false
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	var req api.ReleaseRequest
	if err := s.decode(w, r, s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	var (
		sel routing.Decision
		err error
	)
	if req.LeaseID != "" {
		lease, ok := s.State.ParseLeaseID(req.LeaseID)
		if !ok && s.Leader != nil {
			// One of several replicas: the lease may be an earlier
			// leader's, and it ended with that leader's term.
			writeReleased(w, &api.ReleaseResponse{Released: false, LeaseID: req.LeaseID})
			return
		}
		if !ok {
			s.writeError(w, r, routing.ErrUnknownLease)
			return
		}
		sel, err = s.State.Release(lease)
		if errors.Is(err, routing.ErrLeaseEnded) {
			out := api.ReleaseResponse{Released: false, LeaseID: req.LeaseID}
			if errors.Is(err, routing.ErrLeaseAborted) {
				out.Reason = api.ReleaseReasonAborted
			}
			if how, ok := routing.HowEnded(err); ok {
				out.How = how.String()
			}
			writeReleased(w, &out)
			return
		}
	} else {
		sel, err = s.State.ReleaseIndex(*req.Index)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	leaseID := req.LeaseID
	if leaseID == "" {
		leaseID = s.State.LeaseID(sel.Lease)
	}
	s.State.PrefixAdd(sel.Policy.ID, req.PrefixHashes)
	writeReleased(w, &api.ReleaseResponse{Released: true, LeaseID: leaseID, Index: &sel.Policy.Index, ID: sel.Policy.ID})
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request) {
	var req api.CompleteRequest
	if err := s.decode(w, r, s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	load, err := s.State.Complete(*req.Index, int64(count))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.CompleteResponse{Index: *req.Index, Load: load})
}

func (s *Server) observeDecision(endpoint, router string, start time.Time) {
	took := time.Since(start)
	s.decisions.observe(endpoint, took)
	if s.Metrics != nil {
		s.Metrics.ObserveDecision(endpoint, router, took)
	}
}

// observeAffinity counts, over the tasks whose env worker has a node,
// those assigned on that node (hits) and elsewhere (fallbacks).
func (s *Server) observeAffinity(endpoint, router string, snap *routing.Snapshot, envIDs []string, indices []int) {
	if s.Metrics == nil || snap == nil {
		return
	}
	hits, fallbacks := 0, 0
	for i, env := range envIDs {
		node := snap.EnvNode(env)
		if node == "" || i >= len(indices) {
			continue
		}
		if pos, ok := snap.ByIndex(indices[i]); ok && snap.Node(pos) == node {
			hits++
		} else {
			fallbacks++
		}
	}
	s.Metrics.ObserveAffinity(endpoint, router, hits, fallbacks)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sessionKeys turns /assign's session_ids (null entries for none) into one
// key per task, "" for none. decode checked each key (assignRequest).
func sessionKeys(ids []*string) []string {
	if ids == nil {
		return nil
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		if id != nil {
			out[i] = *id
		}
	}
	return out
}

// deref returns *p, or the zero value for nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

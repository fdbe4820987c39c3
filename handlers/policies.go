package handlers

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/registry"
	"github.com/policyrouter/policyrouter/routing"
)

func specOf(field string, req api.PolicyRequest) (registry.Spec, error) {
	if err := checkPolicyURL(field+"url", req.URL); err != nil {
		return registry.Spec{}, err
	}
	if req.ID == byIndexSegment {
		return registry.Spec{}, fieldError(field+"id", "must not be "+strconv.Quote(byIndexSegment)+
			": /policies/"+byIndexSegment+"/{index} addresses policies by index")
	}
	return registry.Spec{URL: req.URL, NodeID: req.NodeID, Index: req.Index, ID: req.ID, Capacity: req.Capacity,
		Labels: req.Labels, Version: req.Version, AllowSharedURL: req.AllowSharedURL,
		Engine: req.Engine, APIKey: req.APIKey, AdminAPIKey: req.AdminAPIKey, Models: req.Models}, nil
}

func specsOf(reqs []api.PolicyRequest) ([]registry.Spec, error) {
	specs := make([]registry.Spec, len(reqs))
	for i, pr := range reqs {
		spec, err := specOf("policies["+strconv.Itoa(i)+"].", pr)
		if err != nil {
			return nil, err
		}
		specs[i] = spec
	}
	return specs, nil
}

// toAPI renders a registered policy with its effective node (the
// registered node, else the topology's node for its index) and its live
// state and health.
func toAPI(p routing.Policy, ps routing.PolicyStats, live bool) api.Policy {
	labels := p.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	out := api.Policy{Index: p.Index, ID: p.ID, URL: p.URL, NodeID: p.NodeID, Capacity: p.Capacity, Labels: labels, Draining: p.Draining, Version: p.Version,
		Engine: p.EngineName(), Models: p.Models}
	if live {
		out.Models = ps.Models
		out.Version = ps.Version
		out.WeightVersion = ps.WeightVersion
		out.NodeID = ps.Node
		out.State = ps.State
		out.LastError = ps.LastError
		out.UnhealthySince = utcOrNil(ps.UnhealthySince)
		out.LastOK = utcOrNil(ps.LastOK)
	}
	if out.Models == nil {
		out.Models = []string{}
	}
	return out
}

// awaitFirstProbes waits, when a poller runs, until the poller has probed
// the policies just registered, for at most one probe timeout plus one
// period: a policy gets no work until it has answered, so a trainer that
// registers and then routes at once would otherwise find nothing to route
// to. The answer shows each policy's state either way. A follower, whose
// poller does not run, does not wait (its registrations are forwarded to
// the leader when it can reach it: follower_forward.go).
func (s *Server) awaitFirstProbes(r *http.Request, ps []routing.Policy) {
	if s.Poller == nil || len(ps) == 0 {
		return
	}
	if s.Leader != nil {
		if leading, _ := s.Leader(); !leading {
			return // a follower's poller does not run: no probe to wait for
		}
	}
	ps0 := s.Poller.Stats()
	ctx, cancel := context.WithTimeout(r.Context(), ps0.Timeout+ps0.Interval)
	defer cancel()
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	_ = s.State.WaitProbed(ctx, ids)
}

func (s *Server) policyToAPI(p routing.Policy) api.Policy {
	ps, ok := s.State.PolicyStats(p.ID)
	return toAPI(p, ps, ok)
}

// liveStats returns the live figures of the registered policies by id,
// from one Stats pass: a lookup that reports false for a policy the
// routing state has no figures for.
func (s *Server) liveStats() func(id string) (routing.PolicyStats, bool) {
	stats := s.State.Stats()
	byID := make(map[string]int, len(stats.Policies))
	for i, st := range stats.Policies {
		byID[st.Policy.ID] = i
	}
	return func(id string) (routing.PolicyStats, bool) {
		j, ok := byID[id]
		if !ok {
			return routing.PolicyStats{}, false
		}
		return stats.Policies[j], true
	}
}

func (s *Server) toAPIList(ps []routing.Policy) api.PolicyList {
	live := s.liveStats()
	out := api.PolicyList{Policies: make([]api.Policy, len(ps))}
	for i, p := range ps {
		st, ok := live(p.ID)
		out.Policies[i] = toAPI(p, st, ok)
	}
	return out
}

func (s *Server) registerPolicy(w http.ResponseWriter, r *http.Request) {
	var req api.PolicyRequest
	if err := s.decode(w, r, s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	spec, err := specOf("", req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p, created, err := s.Registry.Register(r.Context(), spec)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.awaitFirstProbes(r, []routing.Policy{p})
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/policies/"+p.ID)
	}
	writeJSON(w, status, s.policyToAPI(p))
}

func (s *Server) replacePolicies(w http.ResponseWriter, r *http.Request) {
	var req api.ReplacePoliciesRequest
	if err := s.decode(w, r, 16*s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Policies == nil {
		s.writeError(w, r, fieldError("policies", "is required (send [] to remove every policy)"))
		return
	}
	specs, err := specsOf(req.Policies)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ps, err := s.Registry.Replace(r.Context(), specs)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.awaitFirstProbes(r, ps)
	writeJSON(w, http.StatusOK, s.toAPIList(ps))
}

func (s *Server) listPolicies(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.toAPIList(s.Registry.Current().Policies))
}

func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request) {
	id, err := s.policyID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := s.Registry.Get(id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.policyToAPI(p))
}

func (s *Server) deletePolicy(w http.ResponseWriter, r *http.Request) {
	id, err := s.policyID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.Registry.Delete(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) drainPolicy(w http.ResponseWriter, r *http.Request)  { s.setDraining(w, r, true) }
func (s *Server) resumePolicy(w http.ResponseWriter, r *http.Request) { s.setDraining(w, r, false) }

func (s *Server) setDraining(w http.ResponseWriter, r *http.Request, draining bool) {
	id, err := s.policyID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := s.Registry.SetDraining(r.Context(), id, draining)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.policyToAPI(p))
}

func (s *Server) putRegistration(w http.ResponseWriter, r *http.Request) {
	var req api.RegistrationRequest
	if err := s.decode(w, r, 16*s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Policies == nil {
		s.writeError(w, r, fieldError("policies", "is required (send [] to remove every policy)"))
		return
	}
	specs, err := specsOf(req.Policies)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	t, err := decodeTopology(req.Topology, "topology")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	reg, err := s.Registry.ReplaceRegistration(r.Context(), specs, t)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.awaitFirstProbes(r, reg.Policies)
	writeJSON(w, http.StatusOK, api.Registration{Policies: s.toAPIList(reg.Policies).Policies, Topology: orEmpty(reg.Topology)})
}

func (s *Server) getRegistration(w http.ResponseWriter, r *http.Request) {
	reg := s.Registry.Current()
	writeJSON(w, http.StatusOK, api.Registration{Policies: s.toAPIList(reg.Policies).Policies, Topology: orEmpty(reg.Topology)})
}

// byIndexSegment is the path segment of administration by index:
// /policies/by-index/3 is the policy registered at index 3.
const byIndexSegment = "by-index"

// policyID returns the id of the policy a request's path names: the {id}
// path parameter, unescaped (chi matches on the raw path when the client
// escaped characters Go would not have, and then hands back the escaped
// form), or the id of the policy at {index} for /policies/by-index/{index}.
func (s *Server) policyID(r *http.Request) (string, error) {
	if raw := chi.URLParam(r, "index"); raw != "" {
		index, err := strconv.Atoi(raw)
		if err != nil || index < 0 {
			return "", fieldError("index", "must be a policy index (an integer >= 0), not "+strconv.Quote(raw))
		}
		snap := s.State.Snapshot()
		pos, ok := snap.ByIndex(index)
		if !ok {
			return "", errorf(api.CodeNotFound, "no policy is registered at index "+raw)
		}
		return snap.Policies()[pos].ID, nil
	}
	raw := chi.URLParam(r, "id")
	id := raw
	if u, err := url.PathUnescape(raw); err == nil {
		id = u
	}
	if _, err := s.Registry.Get(id); err != nil && isDigits(id) {
		return "", errorf(api.CodeNotFound, "no policy has id "+strconv.Quote(id)+
			"; to address the policy at index "+id+" use /policies/"+byIndexSegment+"/"+id)
	}
	return id, nil
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

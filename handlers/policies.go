package handlers

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/registry"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
)

func specOf(field string, req api.PolicyRequest) (registry.Spec, error) {
	if err := checkPolicyURL(field+"url", req.URL); err != nil {
		return registry.Spec{}, err
	}
	return registry.Spec{URL: req.URL, NodeID: req.NodeID, Index: req.Index, ID: req.ID, Capacity: req.Capacity, Labels: req.Labels}, nil
}

// toAPI renders a stored policy with its effective node: the registered
// node, else the topology's node for its index.
func (s *Server) toAPI(p routing.Policy) api.Policy {
	node := p.NodeID
	snap := s.State.Snapshot()
	if pos, ok := snap.ByID(p.ID); ok {
		node = snap.Node(pos)
	}
	labels := p.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	return api.Policy{Index: p.Index, ID: p.ID, URL: p.URL, NodeID: node, Capacity: p.Capacity, Labels: labels, Draining: p.Draining}
}

func (s *Server) toAPIList(ps []routing.Policy) api.PolicyList {
	out := api.PolicyList{Policies: make([]api.Policy, len(ps))}
	for i, p := range ps {
		out.Policies[i] = s.toAPI(p)
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
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/policies/"+p.ID)
	}
	writeJSON(w, status, s.toAPI(p))
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
	specs := make([]registry.Spec, len(req.Policies))
	for i, pr := range req.Policies {
		spec, err := specOf("policies["+strconv.Itoa(i)+"].", pr)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		specs[i] = spec
	}
	ps, err := s.Registry.Replace(r.Context(), specs)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.toAPIList(ps))
}

func (s *Server) listPolicies(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.toAPIList(s.Registry.Current().Policies))
}

func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request) {
	p, err := s.Registry.Get(policyID(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.toAPI(p))
}

func (s *Server) deletePolicy(w http.ResponseWriter, r *http.Request) {
	if err := s.Registry.Delete(r.Context(), policyID(r)); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) drainPolicy(w http.ResponseWriter, r *http.Request)  { s.setDraining(w, r, true) }
func (s *Server) resumePolicy(w http.ResponseWriter, r *http.Request) { s.setDraining(w, r, false) }

func (s *Server) setDraining(w http.ResponseWriter, r *http.Request, draining bool) {
	p, err := s.Registry.SetDraining(r.Context(), policyID(r), draining)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.toAPI(p))
}

func (s *Server) putTopology(w http.ResponseWriter, r *http.Request) {
	var req api.Topology
	if err := s.decode(w, r, 16*s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req == nil {
		s.writeError(w, r, errorf(api.CodeBadRequest, "topology must be a JSON object of nodes, not null"))
		return
	}
	t := make(store.Topology, len(req))
	for node, kinds := range req {
		if len(node) > 253 {
			s.writeError(w, r, fieldError("topology", "node ids must have at most 253 characters"))
			return
		}
		if kinds == nil {
			s.writeError(w, r, fieldError("topology."+node, "must be an object of components, not null"))
			return
		}
		t[node] = make(map[string][]int, len(kinds))
		for kind, c := range kinds {
			if c.IDs == nil {
				c.IDs = []int{}
			}
			t[node][kind] = c.IDs
		}
	}
	if err := s.Registry.SetTopology(r.Context(), t); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, topologyToAPI(t))
}

func (s *Server) getTopology(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, topologyToAPI(s.Registry.Current().Topology))
}

func topologyToAPI(t store.Topology) api.Topology {
	out := make(api.Topology, len(t))
	for node, kinds := range t {
		out[node] = make(map[string]api.Component, len(kinds))
		for kind, ids := range kinds {
			out[node][kind] = api.Component{IDs: ids}
		}
	}
	return out
}

// policyID returns the {id} path parameter, unescaped: chi matches on the
// raw path when the client escaped characters Go would not have, and then
// hands back the escaped form.
func policyID(r *http.Request) string {
	raw := chi.URLParam(r, "id")
	if id, err := url.PathUnescape(raw); err == nil {
		return id
	}
	return raw
}

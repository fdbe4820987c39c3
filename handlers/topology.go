package handlers

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/policyrouter/policyrouter/routing"
)

// componentKinds are the component kinds a topology node may have: the
// seed's routers read env workers and eval policies, nothing else.
var componentKinds = []string{routing.KindEnv, routing.KindEval}

// decodeTopology reads the seed's component_distribution strictly, so that
// every mistake is a 422 naming its JSON path under field ("topology"):
// a node that is not an object, a kind other than env or eval (a typo
// such as "envs"), a component that is not {"ids": [...]}, an empty node.
func decodeTopology(raw json.RawMessage, field string) (routing.Topology, error) {
	if isNull(raw) {
		return nil, fieldError(field, `must be an object of nodes, e.g. {"node-a": {"env": {"ids": [0]}, "eval": {"ids": [0]}}}`)
	}
	var nodes map[string]json.RawMessage
	if err := json.Unmarshal(raw, &nodes); err != nil {
		return nil, fieldError(field, `must be an object of nodes, e.g. {"node-a": {"env": {"ids": [0]}, "eval": {"ids": [0]}}}`)
	}
	t := make(routing.Topology, len(nodes))
	for node, rawNode := range nodes {
		path := field + "." + node
		if len(node) > 253 {
			return nil, fieldError(field, "node ids must have at most 253 characters")
		}
		var kinds map[string]json.RawMessage
		if isNull(rawNode) || json.Unmarshal(rawNode, &kinds) != nil {
			return nil, fieldError(path, `must be an object of components, e.g. {"env": {"ids": [0]}, "eval": {"ids": [0]}}`)
		}
		if len(kinds) == 0 {
			msg := "has no components: give it env and eval workers, or leave the node out"
			if node == "topology" || node == "policies" {
				msg += "; PUT /topology takes the nodes themselves, not wrapped (PUT /registration takes {\"policies\": [...], \"topology\": {...}})"
			}
			return nil, fieldError(path, msg)
		}
		t[node] = make(map[string][]int, len(kinds))
		for kind, rawComp := range kinds {
			kpath := path + "." + kind
			if !slices.Contains(componentKinds, kind) {
				return nil, fieldError(kpath, "is not a component kind: use "+strings.Join(componentKinds, " or "))
			}
			ids, err := decodeComponent(rawComp, kpath)
			if err != nil {
				return nil, err
			}
			t[node][kind] = ids
		}
	}
	return t, nil
}

// decodeComponent reads {"ids": [int, ...]} and nothing else.
func decodeComponent(raw json.RawMessage, path string) ([]int, error) {
	var c struct {
		IDs *[]int `json:"ids"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if isNull(raw) || dec.Decode(&c) != nil || c.IDs == nil {
		return nil, fieldError(path, `must be {"ids": [integer, ...]}`)
	}
	if *c.IDs == nil {
		return []int{}, nil
	}
	return *c.IDs, nil
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

func (s *Server) putTopology(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	if err := s.decode(w, r, 16*s.MaxBodyBytes, &raw); err != nil {
		s.writeError(w, r, err)
		return
	}
	t, err := decodeTopology(raw, "topology")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.Registry.SetTopology(r.Context(), t); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Server) getTopology(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, orEmpty(s.Registry.Current().Topology))
}

// orEmpty answers an unset topology as {}, not null.
func orEmpty(t routing.Topology) routing.Topology {
	if t == nil {
		return routing.Topology{}
	}
	return t
}

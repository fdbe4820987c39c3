package handlers

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/policyrouter/policyrouter/routing"
)

// GET /v1/models answers the models of the routable policies, then the
// other models some policy serves (registered, or read by the probes:
// routing.State.ServedModels), deduplicated by id, in the OpenAI list format
// ({"object": "list", "data": [{"id", "object": "model", ...}]}). Each
// policy's own GET /v1/models is asked at most once per modelsTTL; a
// policy that does not answer adds nothing.

const (
	modelsTTL     = 10 * time.Second
	modelsTimeout = 2 * time.Second
	modelsMaxBody = 1 << 20
)

// modelsCache remembers each policy URL's answer for modelsTTL.
type modelsCache struct {
	mu      sync.Mutex
	entries map[string]modelsEntry
}

type modelsEntry struct {
	at     time.Time
	models []json.RawMessage
}

// modelList is the OpenAI /v1/models answer.
type modelList struct {
	Object string            `json:"object"`
	Data   []json.RawMessage `json:"data"`
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	var routable []routing.Policy
	for _, ps := range s.State.Stats().Policies {
		if ps.Available {
			routable = append(routable, ps.Policy)
		}
	}
	lists := make([][]json.RawMessage, len(routable))
	var wg sync.WaitGroup
	for i, p := range routable {
		wg.Go(func() { lists[i] = s.policyModels(r.Context(), p) })
	}
	wg.Wait()
	out := modelList{Object: "list", Data: []json.RawMessage{}}
	seen := make(map[string]bool)
	for _, l := range lists {
		for _, m := range l {
			var id struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(m, &id) != nil || id.ID == "" || seen[id.ID] {
				continue
			}
			seen[id.ID] = true
			out.Data = append(out.Data, m)
		}
	}
	// The models the policies were registered with, or that the probes
	// read, that no routable policy listed just now.
	for _, id := range s.State.ServedModels() {
		if !seen[id] {
			seen[id] = true
			m, _ := json.Marshal(modelCard{ID: id, Object: "model", OwnedBy: "policyrouter"})
			out.Data = append(out.Data, m)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// modelCard is an entry of the OpenAI model list.
type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	OwnedBy string `json:"owned_by"`
}

// policyModels returns the entries of p's GET /v1/models, from the cache
// when fresh.
func (s *Server) policyModels(ctx context.Context, p routing.Policy) []json.RawMessage {
	now := time.Now()
	s.models.mu.Lock()
	e, ok := s.models.entries[p.URL]
	s.models.mu.Unlock()
	if ok && now.Sub(e.at) < modelsTTL {
		return e.models
	}
	ctx, cancel := context.WithTimeout(ctx, modelsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(p.URL, "/")+"/v1/models", nil)
	if err != nil {
		return nil
	}
	if s.Proxy.APIKey != nil {
		if key := s.Proxy.APIKey(p); key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
	}
	res, err := s.reverseProxy.Transport.RoundTrip(req)
	if err != nil {
		return nil
	}
	defer res.Body.Close()
	var list modelList
	if res.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(res.Body, modelsMaxBody)).Decode(&list) != nil {
		return nil
	}
	s.models.mu.Lock()
	if s.models.entries == nil {
		s.models.entries = make(map[string]modelsEntry)
	}
	s.models.entries[p.URL] = modelsEntry{at: now, models: list.Data}
	s.models.mu.Unlock()
	return list.Data
}

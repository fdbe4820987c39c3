package proxy

import (
	"bytes"
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
// Leaser.ServedModels), deduplicated by id, in the OpenAI list format
// ({"object": "list", "data": [{"id", "object": "model", ...}]}). Each
// policy's own GET /v1/models is asked at most once per modelsTTL; a
// policy that does not answer adds nothing.

const (
	modelsTTL     = 10 * time.Second
	modelsTimeout = 2 * time.Second
	modelsMaxBody = 1 << 20
)

// modelsEntry is a policy's answer, remembered for modelsTTL.
type modelsEntry struct {
	at     time.Time
	models []json.RawMessage
}

// modelList is the OpenAI /v1/models answer.
type modelList struct {
	Object string            `json:"object"`
	Data   []json.RawMessage `json:"data"`
}

// Models serves GET /v1/models.
func (p *Proxy) Models(w http.ResponseWriter, r *http.Request) {
	routable, err := p.Leaser.Available(r.Context())
	if err != nil {
		p.WriteError(w, r, err)
		return
	}
	lists := make([][]json.RawMessage, len(routable))
	var wg sync.WaitGroup
	for i, pol := range routable {
		wg.Go(func() { lists[i] = p.policyModels(r.Context(), pol) })
	}
	wg.Wait()
	served, err := p.Leaser.ServedModels(r.Context())
	if err != nil {
		p.WriteError(w, r, err)
		return
	}
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
	for _, id := range served {
		if !seen[id] {
			seen[id] = true
			m, _ := json.Marshal(modelCard{ID: id, Object: "model", OwnedBy: "policyrouter"})
			out.Data = append(out.Data, m)
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as the handlers' answers
	_ = enc.Encode(out)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
}

// modelCard is an entry of the OpenAI model list.
type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	OwnedBy string `json:"owned_by"`
}

// policyModels returns the entries of p's GET /v1/models, from the cache
// when fresh.
func (p *Proxy) policyModels(ctx context.Context, pol routing.Policy) []json.RawMessage {
	now := time.Now()
	if e, ok := p.models.Load(pol.URL); ok && now.Sub(e.(modelsEntry).at) < modelsTTL {
		return e.(modelsEntry).models
	}
	ctx, cancel := context.WithTimeout(ctx, modelsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(pol.URL, "/")+"/v1/models", nil)
	if err != nil {
		return nil
	}
	if key := p.APIKey(pol); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := p.reverseProxy.Transport.RoundTrip(req)
	if err != nil {
		return nil
	}
	defer res.Body.Close()
	var list modelList
	if res.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(res.Body, modelsMaxBody)).Decode(&list) != nil {
		return nil
	}
	p.models.Store(pol.URL, modelsEntry{at: now, models: list.Data})
	return list.Data
}

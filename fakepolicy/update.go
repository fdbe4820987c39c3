package fakepolicy

import (
	"encoding/json"
	"io"
	"net/http"
	"time"
)

// updateRequest is the body of POST /update_weights_from_disk, SGLang's
// name for loading new weights. Version, when given, is the weight version
// the policy reports afterwards; without it the version goes up by one.
type updateRequest struct {
	ModelPath string `json:"model_path"`
	Version   *int64 `json:"version"`
}

// SetFailUpdates makes POST /update_weights_from_disk answer 500 (true) or
// work (false).
func (p *Policy) SetFailUpdates(fail bool) { p.failUpdates.Store(fail) }

// Updates returns how many weight updates the policy has completed.
func (p *Policy) Updates() uint64 { return p.updates.Load() }

// serveUpdate simulates a weight update: the policy is busy (its /idle
// answers so) for Options.UpdateTime, then reports the new version, and
// the request answers 200. A policy told to fail updates answers 500 at
// once and keeps its version.
func (p *Policy) serveUpdate(w http.ResponseWriter, r *http.Request) {
	var req updateRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil && len(body) > 0 {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body must be a JSON object: " + err.Error()})
		return
	}
	if p.failUpdates.Load() {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "simulated update failure"})
		return
	}
	d := p.fleet.opts.UpdateTime
	p.StartWorkFor(d)
	if !p.wait(r, d) {
		return
	}
	v := p.version.Load() + 1
	if req.Version != nil {
		v = *req.Version
	}
	p.version.Store(v)
	p.updates.Add(1)
	p.FlushCache()
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "version": v, "took_ms": ms(d)})
}

// defaultUpdateTime is Options.UpdateTime's default.
const defaultUpdateTime = 200 * time.Millisecond

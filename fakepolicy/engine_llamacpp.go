package fakepolicy

import (
	"net/http"

	"github.com/policyrouter/policyrouter/engine"
)

// EngineLlamaCpp is llama.cpp's server (engine.LlamaCpp).
const EngineLlamaCpp = engine.LlamaCpp

// llamacppRoutes are the endpoints of a simulated llama-server, in the
// wire formats of ggml-org/llama.cpp tools/server/server-context.cpp
// (commit fb4026604c67): GET /health, GET /slots (server_slot::to_json
// per slot) and GET /props ("total_slots" among others). Its OpenAI
// routes are the ones every simulated policy serves (openai.go).
var llamacppRoutes = []route{
	{"GET", "/health", (*Policy).serveLlamaCppHealth},
	{"GET", "/slots", (*Policy).serveLlamaCppSlots},
	{"GET", "/props", (*Policy).serveLlamaCppProps},
}

// llamacppSlots is how many slots a simulated llama-server has:
// Options.MaxRunning, or llama-server's default of 4 when it is 0.
func (p *Policy) llamacppSlots() int {
	if n := p.fleet.opts.MaxRunning; n > 0 {
		return n
	}
	return 4
}

// serveLlamaCppHealth answers {"status": "ok"}, or 503 with llama.cpp's
// error envelope while the policy fails or hangs, as the server does while
// its model loads.
func (p *Policy) serveLlamaCppHealth(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	if p.Mode() == ModeFail || p.Mode() == ModeHang {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]any{
			"code": http.StatusServiceUnavailable, "message": "Loading model", "type": "unavailable_error"}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// serveLlamaCppSlots answers GET /slots: one object per slot, the first
// ones processing, one per request running (the requests beyond the
// slots wait, and do not show).
func (p *Policy) serveLlamaCppSlots(w http.ResponseWriter, r *http.Request) {
	if !p.probed(w, r) {
		return
	}
	n := p.llamacppSlots()
	running := min(p.Load(), n)
	slots := make([]map[string]any, n)
	for i := range slots {
		slots[i] = map[string]any{"id": i, "n_ctx": 4096, "speculative": false, "is_processing": i < running}
	}
	writeJSON(w, http.StatusOK, slots)
}

// serveLlamaCppProps answers GET /props with its total_slots and the
// fields around it.
func (p *Policy) serveLlamaCppProps(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"total_slots": p.llamacppSlots(), "model_alias": ModelName, "model_path": "/models/" + ModelName + ".gguf",
		"endpoint_slots": true, "endpoint_props": false, "endpoint_metrics": false,
	})
}

package fakepolicy

import (
	"fmt"
	"net/http"
	"time"
)

// vllmRoutes are the endpoints of a simulated vLLM server, in the wire
// formats of vllm-project/vllm: GET /metrics with the gauges of
// vllm/v1/metrics/loggers.py; GET /health and GET /load of
// vllm/entrypoints/openai/api_server.py; POST /pause?mode=, POST /resume
// and GET /is_paused of vllm/entrypoints/serve/rlhf/api_router.py
// (commit 1ace43ed7b3c, served in dev mode); GET /weight_info and POST
// /update_weight_version of vllm/entrypoints/serve/dev/rlhf/api_router.py
// (commit 0100a2129224); POST /sleep?level=, POST /wake_up?tags= and GET
// /is_sleeping of vllm/entrypoints/serve/dev/sleep/api_router.py (commit
// e7a47b821ef4). SetLegacyVLLM makes the newer ones answer 404, as older
// servers do.
var vllmRoutes = []route{
	{"GET", "/weight_info", (*Policy).serveVLLMWeightInfo},
	{"POST", "/update_weight_version", (*Policy).serveVLLMUpdateVersion},
	{"GET", "/is_sleeping", (*Policy).serveVLLMIsSleeping},
	{"POST", "/sleep", (*Policy).serveVLLMSleep},
	{"POST", "/wake_up", (*Policy).serveVLLMWakeUp},
	{"GET", "/metrics", (*Policy).serveVLLMMetrics},
	{"GET", "/load", (*Policy).serveVLLMLoad},
	{"GET", "/health", (*Policy).serveHealth},
	{"GET", "/is_paused", (*Policy).serveVLLMIsPaused},
	{"POST", "/pause", (*Policy).serveVLLMPause},
	{"POST", "/resume", (*Policy).serveVLLMResume},
}

// serveVLLMMetrics answers GET /metrics in the Prometheus text format,
// with the two scheduler gauges of one engine core (label engine="0").
func (p *Policy) serveVLLMMetrics(w http.ResponseWriter, r *http.Request) {
	if !p.probed(w, r) {
		return
	}
	running, waiting := p.runningWaiting()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = fmt.Fprintf(w, `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="fake/model"} %d.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="fake/model"} %d.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="fake/model"} 0.0
`, running, waiting)
}

// serveVLLMLoad answers GET /load: {"server_load": n}.
func (p *Policy) serveVLLMLoad(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"server_load": p.Load()})
}

func (p *Policy) serveVLLMIsPaused(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"is_paused": p.Paused()})
}

// serveVLLMPause takes mode as a query parameter: "abort" (default),
// "wait" or "keep"; another is a 400 {"error": ...}.
func (p *Policy) serveVLLMPause(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	mode := r.URL.Query().Get("mode")
	switch mode {
	case "", "abort", "wait", "keep":
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid pause mode " + mode})
		return
	}
	if mode == "" {
		mode = "abort"
	}
	p.engine.pauseMode.Store(&mode)
	p.engine.paused.Store(true)
	switch mode {
	case "wait":
		// vLLM's wait lets the requests in flight finish before it
		// answers; new ones wait for the resume meanwhile.
		p.freezeNew()
		for p.Load() > 0 && p.wait(r, 5*time.Millisecond) {
		}
	case "abort":
		p.freeze()
		p.abortWork()
	default: // keep
		p.freeze()
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "paused"})
}

func (p *Policy) serveVLLMResume(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	p.engine.paused.Store(false)
	p.thaw()
	writeJSON(w, http.StatusOK, map[string]string{"status": "resumed"})
}

// legacyVLLM answers 404 for the endpoints older servers lack, and
// reports whether it did.
func (p *Policy) legacyVLLM(w http.ResponseWriter, r *http.Request) bool {
	if !p.engine.legacy.Load() {
		return false
	}
	p.engine.calls.add(r.Method + " " + r.URL.Path)
	writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	return true
}

// serveVLLMWeightInfo answers {"weight_version": str}, null before any
// version was set.
func (p *Policy) serveVLLMWeightInfo(w http.ResponseWriter, r *http.Request) {
	if p.legacyVLLM(w, r) || !p.called(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]*string{"weight_version": p.engine.weightVersion.Load()})
}

// serveVLLMUpdateVersion takes {"new_version": str} (Body(embed=True):
// required) and answers {"success": true, "new_version"}.
func (p *Policy) serveVLLMUpdateVersion(w http.ResponseWriter, r *http.Request) {
	if p.legacyVLLM(w, r) || !p.called(w, r) {
		return
	}
	var req struct {
		NewVersion *string `json:"new_version"`
	}
	if !decodeOptional(w, r, &req) {
		return
	}
	if req.NewVersion == nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "new_version: Field required"})
		return
	}
	p.SetWeightVersion(*req.NewVersion)
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "new_version": *req.NewVersion})
}

func (p *Policy) serveVLLMIsSleeping(w http.ResponseWriter, r *http.Request) {
	if p.legacyVLLM(w, r) || !p.called(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"is_sleeping": p.Asleep()})
}

// serveVLLMSleep sleeps at ?level= (default 1): it aborts the work in
// flight (vLLM's default mode) and answers 200 without a body.
func (p *Policy) serveVLLMSleep(w http.ResponseWriter, r *http.Request) {
	if p.legacyVLLM(w, r) || !p.called(w, r) {
		return
	}
	p.sleep()
	w.WriteHeader(http.StatusOK)
}

// serveVLLMWakeUp wakes (every tag, or those of ?tags=) and answers 200
// without a body.
func (p *Policy) serveVLLMWakeUp(w http.ResponseWriter, r *http.Request) {
	if p.legacyVLLM(w, r) || !p.called(w, r) {
		return
	}
	p.wake()
	w.WriteHeader(http.StatusOK)
}

package fakepolicy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
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
// servers do. The weight-transfer endpoints, by which a trainer moves the
// weights itself, are those of the same dev-mode router at commit
// 0100a2129224 (vllmTransferRoutes).
var vllmRoutes = append([]route{
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
	{"POST", "/reset_prefix_cache", (*Policy).serveVLLMResetPrefixCache},
}, vllmTransferRoutes...)

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
	if kv := p.fleet.opts.KVTokens; kv > 0 { // blockcache.go
		_, _ = fmt.Fprintf(w, `# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="%d",enable_prefix_caching="True",engine="0",num_gpu_blocks="%d"} 1.0
`, kvBlockTokens, kv/kvBlockTokens)
	}
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

// serveVLLMWeightInfo answers {"weight_version": str}: "default" before
// any version was set, the label an EngineCore starts with
// (self._weight_version = "default" in vllm/v1/engine/core.py,
// vllm-project/vllm commit 00080ee13c7a).
func (p *Policy) serveVLLMWeightInfo(w http.ResponseWriter, r *http.Request) {
	if p.legacyVLLM(w, r) || !p.called(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"weight_version": p.WeightVersion()})
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

// vllmTransferRoutes are the weight-transfer endpoints of vLLM's dev-mode
// RLHF router, vllm/entrypoints/serve/dev/rlhf/api_router.py
// (vllm-project/vllm commit 0100a2129224): a trainer that moves the
// weights itself (NCCL broadcast, CUDA IPC) calls, on every engine,
// init_weight_transfer_engine once, then for each update
// start_weight_update, update_weights (once per chunk) and
// finish_weight_update. The fake moves no weights: it checks the bodies
// as upstream does, records the calls, and takes the label that
// finish_weight_update publishes.
var vllmTransferRoutes = []route{
	{"POST", "/init_weight_transfer_engine", (*Policy).serveVLLMInitTransfer},
	{"POST", "/start_weight_update", (*Policy).serveVLLMStartUpdate},
	{"POST", "/update_weights", (*Policy).serveVLLMUpdateWeights},
	{"POST", "/finish_weight_update", (*Policy).serveVLLMFinishUpdate},
}

// vllmRequiredObject reads a body as upstream's handlers do
// (body = await raw_request.json(); body.get(field)): a body that is not
// JSON is a 400 {"detail": "Invalid JSON format"}, one without field a
// 400 {"detail": "Missing '<field>' in request body"}. It reports whether
// the caller should answer normally.
func vllmRequiredObject(w http.ResponseWriter, r *http.Request, field string) bool {
	var body map[string]json.RawMessage
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "Invalid JSON format"})
		return false
	}
	if v, ok := body[field]; !ok || string(v) == "null" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "Missing '" + field + "' in request body"})
		return false
	}
	return true
}

// serveVLLMInitTransfer takes {"init_info": {...}} (the backend's
// WeightTransferInitRequest: NCCL's master address, port, rank offset,
// world size) and answers {"message": "Weight transfer initialized"}.
func (p *Policy) serveVLLMInitTransfer(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) || !vllmRequiredObject(w, r, "init_info") {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "Weight transfer initialized"})
}

// serveVLLMStartUpdate answers {"message": "Weight update started"}; it
// reads no body.
func (p *Policy) serveVLLMStartUpdate(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "Weight update started"})
}

// serveVLLMUpdateWeights takes {"update_info": {...}} (the names, dtypes
// and shapes of a chunk of weights) and answers {"message": "Weights
// updated"}. The label the engine reports does not change.
func (p *Policy) serveVLLMUpdateWeights(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) || !vllmRequiredObject(w, r, "update_info") {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "Weights updated"})
}

// serveVLLMFinishUpdate takes an optional {"weight_version": str|null}
// (Annotated[str | None, Body(embed=True)] = None) and answers
// {"message": "Weight update finished"}: a version given becomes the
// label GET /weight_info reports, none keeps the current one. A server
// from before weight versions (SetLegacy) ignores it. FastAPI answers a
// body it cannot read, or a weight_version that is not a string, 422.
func (p *Policy) serveVLLMFinishUpdate(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var req struct {
		WeightVersion *string `json:"weight_version"`
	}
	if err == nil && len(bytes.TrimSpace(body)) > 0 {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": []map[string]any{{
			"type": "string_type", "loc": []string{"body", "weight_version"}, "msg": "Input should be a valid string"}}})
		return
	}
	if req.WeightVersion != nil && !p.engine.legacy.Load() {
		p.SetWeightVersion(*req.WeightVersion)
	}
	p.FlushCache() // the cached blocks were computed with the old weights
	writeJSON(w, http.StatusOK, map[string]string{"message": "Weight update finished"})
}

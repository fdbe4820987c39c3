package fakepolicy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
)

// sglangRoutes are the endpoints of a simulated SGLang server, in the
// wire formats of sgl-project/sglang:
// python/sglang/srt/entrypoints/http_server.py (commit 0025436eab05) for
// /get_load, /get_model_info, /get_weight_version, /health,
// /pause_generation, /continue_generation, /update_weights_from_disk and
// /update_weight_version, /abort_request and /get_server_info (its newer
// name /server_info too);
// python/sglang/srt/entrypoints/v1_loads.py (commit 0564b5215b33) for
// /v1/loads.
var sglangRoutes = []route{
	{"GET", "/v1/loads", (*Policy).serveSGLangLoads},
	{"GET", "/get_load", (*Policy).serveSGLangGetLoad},
	{"GET", "/model_info", (*Policy).serveSGLangModelInfo},
	{"GET", "/get_model_info", (*Policy).serveSGLangModelInfo},
	{"POST", "/release_memory_occupation", (*Policy).serveSGLangRelease},
	{"POST", "/resume_memory_occupation", (*Policy).serveSGLangResume},
	{"GET", "/get_weight_version", (*Policy).serveSGLangWeightVersion},
	{"GET", "/server_info", (*Policy).serveSGLangServerInfo},
	{"GET", "/get_server_info", (*Policy).serveSGLangServerInfo},
	{"GET", "/health", (*Policy).serveHealth},
	{"POST", "/pause_generation", (*Policy).serveSGLangPause},
	{"POST", "/continue_generation", (*Policy).serveSGLangContinue},
	{"POST", "/update_weights_from_disk", (*Policy).serveSGLangUpdateFromDisk},
	{"POST", "/update_weight_version", (*Policy).serveSGLangUpdateVersion},
	{"POST", "/abort_request", (*Policy).serveSGLangAbort},
	{"POST", "/flush_cache", (*Policy).serveSGLangFlushCache},
	{"GET", "/flush_cache", (*Policy).serveSGLangFlushCache},
}

// serveSGLangLoads answers GET /v1/loads as get_loads does: one load per
// DP rank (one here) from LoadSnapshot.to_dict.
func (p *Policy) serveSGLangLoads(w http.ResponseWriter, r *http.Request) {
	if p.engine.noLoads.Load() {
		p.engine.calls.add(r.Method + " " + r.URL.Path)
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
		return
	}
	if !p.probed(w, r) {
		return
	}
	running, waiting := p.runningWaiting()
	writeJSON(w, http.StatusOK, map[string]any{
		"timestamp":        time.Now().UTC().Format(time.RFC3339Nano),
		"version":          "0.0.0-fake", // SGLang's release, not the weights'
		"accelerator":      nil,
		"num_accelerators": 1,
		"loads": []map[string]any{{
			"dp_rank": 0, "num_running_reqs": running, "num_waiting_reqs": waiting,
			"num_used_tokens": 0, "num_total_tokens": 0, "max_total_num_tokens": p.fleet.opts.KVTokens,
			"max_running_requests": p.fleet.opts.MaxRunning, "token_usage": 0.0,
			"gen_throughput": 0.0, "cache_hit_rate": 0.0, "utilization": 0.0,
		}},
	})
}

// serveSGLangGetLoad answers the older GET /get_load: a list of
// GetLoadReqOutput, num_reqs counting running and waiting requests.
func (p *Policy) serveSGLangGetLoad(w http.ResponseWriter, r *http.Request) {
	if !p.probed(w, r) {
		return
	}
	running, waiting := p.runningWaiting()
	writeJSON(w, http.StatusOK, []map[string]any{{
		"dp_rank": 0, "num_reqs": running + waiting, "num_waiting_reqs": waiting, "num_tokens": 0,
	}})
}

// serveSGLangModelInfo answers GET /get_model_info, and GET /model_info
// (its 0.5.15 name) unless the engine is told to be older (SetLegacy).
func (p *Policy) serveSGLangModelInfo(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/model_info") && !strings.HasSuffix(r.URL.Path, "/get_model_info") && p.engine.legacy.Load() {
		p.engine.calls.add(r.Method + " " + r.URL.Path)
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
		return
	}
	if !p.called(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"model_path": "fake/model", "tokenizer_path": "fake/model", "is_generation": true,
		"preferred_sampling_params": nil, "weight_version": p.WeightVersion(),
	})
}

// serveSGLangServerInfo answers GET /get_server_info, and GET
// /server_info (its newer name) unless the engine is told to be older
// (SetLegacy), with a few of the server's arguments, as
// dataclasses.asdict(server_args) has them, and the version:
// incremental_streaming_output says how the fake streams a native
// /generate (SetIncrementalStreaming). SetNoServerInfo makes both 404.
func (p *Policy) serveSGLangServerInfo(w http.ResponseWriter, r *http.Request) {
	newer := strings.HasSuffix(r.URL.Path, "/server_info") && !strings.HasSuffix(r.URL.Path, "/get_server_info")
	if p.engine.noServerInfo.Load() || newer && p.engine.legacy.Load() {
		p.engine.calls.add(r.Method + " " + r.URL.Path)
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
		return
	}
	if !p.called(w, r) {
		return
	}
	info := map[string]any{
		"model_path": "fake/model", "tokenizer_path": "fake/model", "stream_interval": 1,
		"incremental_streaming_output": p.engine.incremental.Load(),
		"max_running_requests":         p.fleet.opts.MaxRunning, "weight_version": p.WeightVersion(),
		"internal_states": []map[string]any{{}}, "version": "0.0.0-fake",
	}
	if kv := p.fleet.opts.KVTokens; kv > 0 {
		info["max_total_num_tokens"] = kv // the scheduler's get_init_info (blockcache.go)
	}
	writeJSON(w, http.StatusOK, info)
}

// serveSGLangWeightVersion answers GET /get_weight_version.
func (p *Policy) serveSGLangWeightVersion(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"weight_version": p.WeightVersion()})
}

// serveHealth answers GET /health: 200 with no body, 503 in ModeFail.
func (p *Policy) serveHealth(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	if p.Mode() == ModeFail || p.Mode() == ModeHang {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// sglangPauseRequest is PauseGenerationReqInput of
// python/sglang/srt/managers/io_struct.py: mode "abort" (default),
// "retract" or "in_place".
type sglangPauseRequest struct {
	Mode string `json:"mode"`
}

func (p *Policy) serveSGLangPause(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	req := sglangPauseRequest{Mode: "abort"}
	if !decodeOptional(w, r, &req) {
		return
	}
	switch req.Mode {
	case "abort", "retract", "in_place":
	default:
		writeJSON(w, http.StatusBadRequest, map[string]any{"object": "error", "message": "Invalid mode: " + req.Mode, "code": 400})
		return
	}
	p.engine.pauseMode.Store(&req.Mode)
	p.engine.paused.Store(true)
	// Every mode stops the work (freeze.go); abort also ends it, and the
	// requests the aborted ones' clients send again wait for the resume.
	p.freeze()
	if req.Mode == "abort" {
		p.abortWork()
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "Generation paused successfully.", "status": "ok"})
}

func (p *Policy) serveSGLangContinue(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	p.engine.paused.Store(false)
	p.thaw()
	writeJSON(w, http.StatusOK, map[string]string{"message": "Generation continued successfully.", "status": "ok"})
}

// sglangUpdateFromDisk is UpdateWeightFromDiskReqInput: model_path,
// load_format, flush_cache, abort_all_requests, weight_version.
type sglangUpdateFromDisk struct {
	ModelPath     string  `json:"model_path"`
	WeightVersion *string `json:"weight_version"`
}

// serveSGLangUpdateFromDisk loads "weights" for Options.UpdateTime and
// answers {"success", "message", "num_paused_requests"}: 200, or 400 when
// the policy is told to fail updates.
func (p *Policy) serveSGLangUpdateFromDisk(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	var req sglangUpdateFromDisk
	if !decodeOptional(w, r, &req) {
		return
	}
	if p.failUpdates.Load() {
		writeJSON(w, http.StatusBadRequest, map[string]any{"success": false, "message": "simulated update failure", "num_paused_requests": 0})
		return
	}
	if !p.wait(r, p.fleet.opts.UpdateTime) {
		return
	}
	msg := "Succeeded to update model weights."
	if req.WeightVersion != nil {
		p.SetWeightVersion(*req.WeightVersion)
		msg += " Weight version updated to " + *req.WeightVersion + "."
	}
	p.updates.Add(1)
	p.FlushCache() // flush_cache defaults to true
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "message": msg, "num_paused_requests": 0})
}

// sglangUpdateVersion is UpdateWeightVersionReqInput.
type sglangUpdateVersion struct {
	NewVersion       string `json:"new_version"`
	AbortAllRequests bool   `json:"abort_all_requests"`
}

func (p *Policy) serveSGLangUpdateVersion(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	var req sglangUpdateVersion
	if !decodeOptional(w, r, &req) {
		return
	}
	p.SetWeightVersion(req.NewVersion)
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "message": "Weight version updated to " + req.NewVersion, "new_version": req.NewVersion})
}

// sglangAbort is AbortReq of python/sglang/srt/managers/io_struct.py, as
// abort_request in http_server.py (commit 0025436eab05) reads it: rid,
// the request to abort, and abort_all.
type sglangAbort struct {
	RID      string `json:"rid"`
	AbortAll bool   `json:"abort_all"`
}

// serveSGLangAbort answers POST /abort_request as SGLang does: 200 with no
// body, whether or not anything was aborted. With abort_all every
// unfinished request ends now: the generations in flight answer with
// finish_reason {"type": "abort"} and the load reads 0 (what slime's
// abort-until-idle waits for). The fake keeps no request ids, so an abort
// of one rid aborts nothing.
func (p *Policy) serveSGLangAbort(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	var req sglangAbort
	if !decodeOptional(w, r, &req) {
		return
	}
	if req.AbortAll {
		p.abortWork()
	}
	w.WriteHeader(http.StatusOK)
}

// decodeOptional decodes a JSON body into v, if there is one; a bad body
// is answered 400 and false returned.
func decodeOptional(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil && len(body) > 0 {
		err = json.Unmarshal(body, v)
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body must be a JSON object: " + err.Error()})
		return false
	}
	return true
}

// sglangMemoryRequest is ReleaseMemoryOccupationReqInput and
// ResumeMemoryOccupationReqInput: tags, none meaning all.
type sglangMemoryRequest struct {
	Tags []string `json:"tags"`
}

// serveSGLangRelease releases the memory (the work in flight is aborted)
// and answers {"success": true, "message"}. SGLang has no endpoint that
// reports it: the router remembers it did it.
func (p *Policy) serveSGLangRelease(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	var req sglangMemoryRequest
	if !decodeOptional(w, r, &req) {
		return
	}
	p.sleep()
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "message": "Memory released."})
}

func (p *Policy) serveSGLangResume(w http.ResponseWriter, r *http.Request) {
	if !p.called(w, r) {
		return
	}
	var req sglangMemoryRequest
	if !decodeOptional(w, r, &req) {
		return
	}
	p.wake()
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "message": "Memory resumed."})
}

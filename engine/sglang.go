package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// sglang speaks to an SGLang server (python -m sglang.launch_server)
// through its native endpoints.
//
// Probe:
//   - load: GET /v1/loads?include=core, running + waiting summed over the
//     data-parallel ranks; on a server too old to have it (404), the older
//     GET /get_load, remembered per server;
//   - version: GET /model_info's weight_version (0.5.15 serves the model
//     info there, and /get_weight_version answers 404); on a server that
//     answers /model_info 404, GET /get_model_info, remembered; when the
//     info has no weight_version, GET /get_weight_version (404: none);
//   - models: GET /v1/models, on the first probe and every ModelsEvery;
//   - asleep: SGLang has no endpoint that says its memory is released:
//     Probe reads what the fleet verbs recorded (Policy.SleepMarked);
//   - paused: no endpoint either in the sources read; an SGLang paused by
//     someone else answers its loads as before and is routed (its
//     requests wait in its queue). A pause of our own update is the
//     update's to track; one sent through POST /fleet/engine is read from
//     its record (Policy.PauseMarked);
//   - health: when the load endpoints fail, GET /health says whether the
//     server itself is up, and the error says so;
//   - stream form: GET /server_info (else the older /get_server_info),
//     once per Server and again after a failed probe, for
//     incremental_streaming_output (Server.IncrementalStreaming, which
//     the proxy reads to continue an aborted stream in its client's
//     form). Its failure is not the probe's.
//
// Update steps (all ADMIN_OPTIONAL endpoints: the admin key is sent):
//   - pause: POST /pause_generation {"mode": "abort"|"retract"|"in_place"};
//     pause mode "wait" drains the policy first and then pauses in
//     "retract", so that work that outlived drain_timeout_ms survives;
//   - load (model_path): POST /update_weights_from_disk {"model_path",
//     "weight_version", "flush_cache": true}, which also sets the version;
//   - version (external mode): POST /update_weight_version
//     {"new_version", "abort_all_requests": false};
//   - resume: POST /continue_generation {}.
//
// Lifecycle: POST /release_memory_occupation {"tags"} and POST
// /resume_memory_occupation {"tags"} (level does not apply).
type sglang struct{}

var _ Engine = sglang{}

// Routes: SGLang's native /generate and its OpenAI-compatible API
// (python/sglang/srt/entrypoints/http_server.py, sgl-project/sglang
// commit 0025436eab05: @app.api_route("/generate"), @app.post
// ("/v1/completions"), @app.post("/v1/chat/completions"), @app.get
// ("/v1/models")).
func (sglang) Routes() []string { return allRoutes }

// sglangLoads is the answer of GET /v1/loads, as built by get_loads in
// python/sglang/srt/entrypoints/v1_loads.py (sgl-project/sglang, commit
// 0564b5215b33): {"timestamp", "version" (SGLang's own release, not the
// weights'), "accelerator", "num_accelerators", "loads": [...]}, one load
// per DP rank from LoadSnapshot.to_dict in
// python/sglang/srt/managers/load_snapshot.py: {"dp_rank",
// "num_running_reqs", "num_waiting_reqs", "num_used_tokens", ...}.
// include=core keeps only those core fields.
type sglangLoads struct {
	Loads *[]struct {
		NumRunningReqs *int64 `json:"num_running_reqs"`
		NumWaitingReqs *int64 `json:"num_waiting_reqs"`
	} `json:"loads"`
}

// sglangLegacyLoad is one DP rank of GET /get_load, the list of
// GetLoadReqOutput in python/sglang/srt/managers/io_struct.py
// (sgl-project/sglang, read at the versions that serve
// python/sglang/srt/entrypoints/http_server.py commit 0025436eab05):
// {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens"}. num_reqs
// counts running and waiting requests together (the scheduler's
// load projection: num_reqs = running + waiting), so it is the load.
type sglangLegacyLoad struct {
	NumReqs        *int64 `json:"num_reqs"`
	NumWaitingReqs *int64 `json:"num_waiting_reqs"`
}

// sglangModelInfo is the answer of GET /get_model_info in
// python/sglang/srt/entrypoints/http_server.py (sgl-project/sglang commit
// 0025436eab05), and of GET /model_info, its name from 0.5.15 on (the
// issue that asked for it observed /get_weight_version answering 404
// there; the index of sources read holds no 0.5.15 http_server.py to
// quote): {"model_path", "tokenizer_path", "is_generation",
// "preferred_sampling_params", "weight_version"}. weight_version is
// server_args.weight_version, a string that /update_weights_from_disk
// and /update_weight_version set; null on servers older than weight
// versions.
type sglangModelInfo struct {
	WeightVersion *string `json:"weight_version"`
}

// Endpoints of the SGLang version, newest first.
const (
	sglangModelInfoPath       = "/model_info"
	sglangLegacyModelInfoPath = "/get_model_info"
	sglangWeightVersionPath   = "/get_weight_version"
)

func (sglang) Probe(ctx context.Context, c *Client, s *Server) (Answer, error) {
	load, err := sglangLoad(ctx, c, s)
	if err != nil {
		// Down, or restarting: the flags may change; the form known so far
		// stands until the info is read again.
		s.infoRead.Store(false)
		s.infoTries.Store(0)
		if _, herr := c.get(ctx, s, "/health", MaxJSONBytes); herr == nil {
			return Answer{}, fmt.Errorf("%w (GET /health answers: the server is up but its load is unknown)", err)
		}
		return Answer{}, err
	}
	var a Answer
	idleBelow(&a, load, s.Policy.Capacity)
	if err := sglangVersion(ctx, c, s, &a); err != nil {
		return Answer{}, err
	}
	c.probeModels(ctx, s, &a)
	if !s.infoRead.Load() {
		sglangStreamForm(ctx, c, s)
	}
	a.KVTokens = s.kvTokens.Load()
	return a, nil
}

// sglangServerInfo is the part of GET /get_server_info read here: the
// server's arguments, dataclasses.asdict(server_args) merged with the
// scheduler info, "internal_states" and "version" (get_server_info in
// python/sglang/srt/entrypoints/http_server.py, sgl-project/sglang
// commit 0025436eab05). ServerArgs in python/sglang/srt/server_args.py
// (commit 001067fffe33, the "Streaming" section) has
// incremental_streaming_output: bool = False, the flag
// --incremental-streaming-output: "Whether to output as a sequence of
// disjoint segments", i.e. each streamed chunk holds its new tokens only.
// Newer releases serve the same answer at GET /server_info and keep
// /get_server_info as a deprecated alias (the index of sources read holds
// no such http_server.py to quote).
//
// max_total_num_tokens is the size of the KV cache's token pool, one DP
// rank's: the scheduler's get_init_info puts it in the scheduler info
// (python/sglang/srt/managers/scheduler.py, commit 9c0549b727fe). With
// DP ranks, each rank keeps a cache of that size and SGLang's DP
// controller picks the rank of a request: the prefix index keeps one
// cache of that size per engine, so a match on the engine is a match on
// the rank that served the prompt last only while the controller sends
// it there again; the engine's cached_tokens then cut the index back.
type sglangServerInfo struct {
	IncrementalStreamingOutput *bool  `json:"incremental_streaming_output"`
	MaxTotalNumTokens          *int64 `json:"max_total_num_tokens"`
}

// Endpoints of the SGLang server info, newest first.
const (
	sglangServerInfoPath       = "/server_info"
	sglangLegacyServerInfoPath = "/get_server_info"
)

// sglangInfoTries is how many probes ask for the server info before it
// is given up on until the next failed probe: get_server_info awaits
// every scheduler's internal state, and a server too busy to answer it
// within the probe's timeout would otherwise hold each probe that long.
const sglangInfoTries = 3

// sglangStreamForm reads the server's stream form from its server info
// into s. An answer without the flag, or none at all (a 404 on both
// paths, a status error, an answer that does not decode), leaves the form
// unknown until the server fails a probe; a transport error is tried
// again on the next probes, sglangInfoTries in all.
func sglangStreamForm(ctx context.Context, c *Client, s *Server) {
	var info sglangServerInfo
	path := sglangServerInfoPath
	if s.legacyServerInfo.Load() {
		path = sglangLegacyServerInfoPath
	}
	err := c.getJSON(ctx, s, path, &info)
	if IsStatus(err, http.StatusNotFound) && path == sglangServerInfoPath {
		s.legacyServerInfo.Store(true) // older than /server_info
		err = c.getJSON(ctx, s, sglangLegacyServerInfoPath, &info)
	}
	var se *StatusError
	var de *DecodeError
	if err == nil && info.MaxTotalNumTokens != nil && *info.MaxTotalNumTokens > 0 {
		s.kvTokens.Store(*info.MaxTotalNumTokens)
	}
	switch {
	case err == nil && info.IncrementalStreamingOutput != nil:
		form := int32(streamCumulative)
		if *info.IncrementalStreamingOutput {
			form = streamIncremental
		}
		s.streamForm.Store(form)
	case err == nil, errors.As(err, &se), errors.As(err, &de):
		s.streamForm.Store(streamUnknown)
	default:
		if s.infoTries.Add(1) < sglangInfoTries {
			return
		}
		s.streamForm.Store(streamUnknown)
	}
	s.infoRead.Store(true)
}

// sglangVersion reads the weight version into a: /model_info, else
// /get_model_info, else /get_weight_version.
func sglangVersion(ctx context.Context, c *Client, s *Server, a *Answer) error {
	var info sglangModelInfo
	path := sglangModelInfoPath
	if s.legacyModelInfo.Load() {
		path = sglangLegacyModelInfoPath
	}
	err := c.getJSON(ctx, s, path, &info)
	if IsStatus(err, http.StatusNotFound) && path == sglangModelInfoPath {
		s.legacyModelInfo.Store(true) // older than 0.5.15
		path = sglangLegacyModelInfoPath
		err = c.getJSON(ctx, s, path, &info)
	}
	if err != nil {
		return err
	}
	if info.WeightVersion == nil {
		// The info of some releases leaves the version out:
		// /get_weight_version answers {"weight_version"} there.
		path = sglangWeightVersionPath
		err = c.getJSON(ctx, s, path, &info)
		if IsStatus(err, http.StatusNotFound) {
			return nil // a server older than weight versions
		}
		if err != nil {
			return err
		}
		if info.WeightVersion == nil {
			return nil
		}
	}
	if err := versionAnswer(a, *info.WeightVersion); err != nil {
		return endpointError(s, path, err)
	}
	return nil
}

// sglangLoad returns the server's running + waiting requests over all DP
// ranks.
func sglangLoad(ctx context.Context, c *Client, s *Server) (int64, error) {
	const path = "/v1/loads?include=core"
	if !s.legacyLoad.Load() {
		var v sglangLoads
		err := c.getJSON(ctx, s, path, &v)
		switch {
		case err == nil:
			if v.Loads == nil {
				return 0, endpointError(s, path, errors.New(`answer has no "loads"`))
			}
			var n int64
			for i, l := range *v.Loads {
				if l.NumRunningReqs == nil || l.NumWaitingReqs == nil {
					return 0, endpointError(s, path, fmt.Errorf(`loads[%d] lacks "num_running_reqs" or "num_waiting_reqs"`, i))
				}
				n += *l.NumRunningReqs + *l.NumWaitingReqs
			}
			return n, nil
		case IsStatus(err, http.StatusNotFound):
			s.legacyLoad.Store(true) // an SGLang older than /v1/loads
		default:
			return 0, err
		}
	}
	var ranks []sglangLegacyLoad
	if err := c.getJSON(ctx, s, "/get_load", &ranks); err != nil {
		return 0, err
	}
	var n int64
	for i, r := range ranks {
		if r.NumReqs == nil {
			return 0, endpointError(s, "/get_load", fmt.Errorf(`[%d] lacks "num_reqs"`, i))
		}
		n += *r.NumReqs
	}
	return n, nil
}

// sglangPause is PauseGenerationReqInput of
// python/sglang/srt/managers/io_struct.py (sgl-project/sglang commit
// 001067fffe33): mode: Literal["abort", "retract", "in_place"] = "abort".
// (Servers from before pause modes, e.g. http_server.py at commit
// 0025436eab05, take no body and abort.)
type sglangPause struct {
	Mode string `json:"mode"`
}

// sglangUpdateFromDisk is UpdateWeightFromDiskReqInput of the same file:
// model_path (required), load_format, abort_all_requests (default false),
// weight_version (optional: set along with the weights), flush_cache
// (default true), and fields for asynchronous loads not used here. The
// handler, update_weights_from_disk in
// python/sglang/srt/entrypoints/http_server.py (commit 0025436eab05),
// answers {"success", "message", "num_paused_requests"}, 200 or 400.
type sglangUpdateFromDisk struct {
	ModelPath     string `json:"model_path"`
	WeightVersion string `json:"weight_version"`
	FlushCache    bool   `json:"flush_cache"`
}

// sglangUpdateVersion is UpdateWeightVersionReqInput of the same
// io_struct.py: new_version, and abort_all_requests, whose default is
// true there (false in older releases): it is sent false, explicitly
// (no omitempty), since the requests a retract or in_place pause kept
// must survive. update_weight_version in http_server.py answers
// {"success", "message", "new_version"}.
type sglangUpdateVersion struct {
	NewVersion       string `json:"new_version"`
	AbortAllRequests bool   `json:"abort_all_requests"`
}

// sglangMemory is ReleaseMemoryOccupationReqInput and
// ResumeMemoryOccupationReqInput of python/sglang/srt/managers/io_struct.py
// (sgl-project/sglang commit f11d231cea29): tags: Optional[List[str]] =
// None, the regions ("weights", "kv_cache"); none means all.
type sglangMemory struct {
	Tags []string `json:"tags,omitempty"`
}

func (sglang) PauseModes() []string {
	return []string{PauseWait, PauseAbort, PauseRetract, PauseInPlace}
}

func (sglang) Pause(mode string) (Call, bool) {
	if mode == PauseWait {
		mode = PauseRetract // drained already; keep what outlived the drain
	}
	return jsonCall(http.MethodPost, "/pause_generation", sglangPause{Mode: mode}), true
}

func (sglang) LoadFromDisk(modelPath, version string) (Call, bool) {
	return jsonCall(http.MethodPost, "/update_weights_from_disk",
		sglangUpdateFromDisk{ModelPath: modelPath, WeightVersion: version, FlushCache: true}), true
}

func (sglang) SetVersion(version string) (Call, bool) {
	return jsonCall(http.MethodPost, "/update_weight_version", sglangUpdateVersion{NewVersion: version}), true
}

// Resume sends ContinueGenerationReqInput, all of whose fields have
// defaults: an empty object.
func (sglang) Resume() (Call, bool) {
	return Call{Method: http.MethodPost, Path: "/continue_generation", Body: []byte("{}")}, true
}

func (sglang) Sleep(int) (Call, bool) {
	return jsonCall(http.MethodPost, "/release_memory_occupation", sglangMemory{}), true
}

func (sglang) Wake(tags []string) (Call, bool) {
	return jsonCall(http.MethodPost, "/resume_memory_occupation", sglangMemory{Tags: tags}), true
}

func (sglang) SleepReported() bool { return false }

// SGLangDefaultCapacity is the capacity of an SGLang server that reports
// no max_running_requests (a registration that names no capacity gets it:
// DefaultCapacity): SMG's own answer, slots_per_worker, whose default is
// 64 (model_gateway/src/worker/capacity.rs, smg-project/smg commit
// f8daa8835a8b, CapacityTrackerSettings::default). An engine batches
// many requests, so a capacity of 1 would serialise it.
const SGLangDefaultCapacity = 64

// sglangCapacity is the part of GET /v1/loads (without include=core, the
// whole LoadSnapshot.to_dict of each DP rank) that says how many requests
// a rank runs at once: max_running_requests, the scheduler's limit. SMG
// reads the same field for its own capacity (SchedulerLoadSnapshot in
// crates/protocols/src/worker.rs, smg-project/smg commit f8daa8835a8b).
type sglangCapacity struct {
	Loads []struct {
		MaxRunningRequests *int `json:"max_running_requests"`
	} `json:"loads"`
}

var _ capacityReporter = sglang{}

func (sglang) defaultCapacity() int { return SGLangDefaultCapacity }

// reportedCapacity sums max_running_requests over the server's DP ranks.
func (sglang) reportedCapacity(ctx context.Context, c *Client, s *Server) (int, error) {
	var v sglangCapacity
	if err := c.getJSON(ctx, s, "/v1/loads", &v); err != nil {
		return 0, err
	}
	n := 0
	for i, l := range v.Loads {
		if l.MaxRunningRequests == nil || *l.MaxRunningRequests < 1 {
			return 0, endpointError(s, "/v1/loads", fmt.Errorf(`loads[%d] has no positive "max_running_requests"`, i))
		}
		n += min(*l.MaxRunningRequests, MaxCapacity)
	}
	if n == 0 {
		return 0, endpointError(s, "/v1/loads", errors.New(`answer has no "loads"`))
	}
	return n, nil
}

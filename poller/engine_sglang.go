package poller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// sglangEngine probes an SGLang server (python -m sglang.launch_server)
// through its native endpoints:
//
//   - load: GET /v1/loads?include=core, running + waiting summed over the
//     data-parallel ranks; on a server too old to have it (404), the older
//     GET /get_load, remembered per policy;
//   - version: GET /get_model_info's weight_version (a string, "default"
//     unless --weight-version or an update set another);
//   - health: when the load endpoints fail, GET /health says whether the
//     server itself is up, and the error says so.
//
// The issue that asked for this engine named GET /model_info for the
// version; the SGLang sources read (below) serve it as /get_model_info
// (and /get_weight_version), so that is what is probed.
//
// Its update steps (all ADMIN_OPTIONAL endpoints: the admin key is sent):
//
//   - pause: POST /pause_generation {"mode": "abort"|"retract"|"in_place"};
//     pause mode "wait" drains the policy first and then pauses in
//     "retract", so that work that outlived drain_timeout_ms survives;
//   - load (model_path): POST /update_weights_from_disk {"model_path",
//     "weight_version", "flush_cache": true}, which also sets the version;
//   - version (external mode): POST /update_weight_version
//     {"new_version", "abort_all_requests": false};
//   - resume: POST /continue_generation {}.
type sglangEngine struct{}

var _ engine = sglangEngine{}

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
// 0025436eab05): {"model_path", "tokenizer_path", "is_generation",
// "preferred_sampling_params", "weight_version"}. weight_version is
// server_args.weight_version, a string that /update_weights_from_disk
// and /update_weight_version set; null on servers older than weight
// versions.
type sglangModelInfo struct {
	WeightVersion *string `json:"weight_version"`
}

func (sglangEngine) probe(ctx context.Context, p *Poller, m *member) (answer, error) {
	load, err := sglangLoad(ctx, p, m)
	if err != nil {
		if _, herr := p.get(ctx, m, "/health", maxJSONBytes); herr == nil {
			return answer{}, fmt.Errorf("%w (GET /health answers: the server is up but its load is unknown)", err)
		}
		return answer{}, err
	}
	var a answer
	idleBelow(&a, load, m.pol.Capacity)
	body, err := p.get(ctx, m, "/get_model_info", maxJSONBytes)
	if err != nil {
		return answer{}, err
	}
	var info sglangModelInfo
	if err := json.Unmarshal(body, &info); err != nil {
		return answer{}, endpointError(m, "/get_model_info", fmt.Errorf("decode: %w", err))
	}
	if info.WeightVersion != nil {
		if err := versionAnswer(&a, *info.WeightVersion); err != nil {
			return answer{}, endpointError(m, "/get_model_info", err)
		}
	}
	return a, nil
}

// sglangLoad returns the server's running + waiting requests over all DP
// ranks.
func sglangLoad(ctx context.Context, p *Poller, m *member) (int64, error) {
	if !m.legacyLoad.Load() {
		body, err := p.get(ctx, m, "/v1/loads?include=core", maxJSONBytes)
		switch {
		case err == nil:
			var v sglangLoads
			if err := json.Unmarshal(body, &v); err != nil {
				return 0, endpointError(m, "/v1/loads?include=core", fmt.Errorf("decode: %w", err))
			}
			if v.Loads == nil {
				return 0, endpointError(m, "/v1/loads?include=core", errors.New(`answer has no "loads"`))
			}
			var n int64
			for i, l := range *v.Loads {
				if l.NumRunningReqs == nil || l.NumWaitingReqs == nil {
					return 0, endpointError(m, "/v1/loads?include=core", fmt.Errorf(`loads[%d] lacks "num_running_reqs" or "num_waiting_reqs"`, i))
				}
				n += *l.NumRunningReqs + *l.NumWaitingReqs
			}
			return n, nil
		case isStatus(err, http.StatusNotFound):
			m.legacyLoad.Store(true) // an SGLang older than /v1/loads
		default:
			return 0, err
		}
	}
	body, err := p.get(ctx, m, "/get_load", maxJSONBytes)
	if err != nil {
		return 0, err
	}
	var ranks []sglangLegacyLoad
	if err := json.Unmarshal(body, &ranks); err != nil {
		return 0, endpointError(m, "/get_load", fmt.Errorf("decode: %w", err))
	}
	var n int64
	for i, r := range ranks {
		if r.NumReqs == nil {
			return 0, endpointError(m, "/get_load", fmt.Errorf(`[%d] lacks "num_reqs"`, i))
		}
		n += *r.NumReqs
	}
	return n, nil
}

// endpointError names the endpoint whose answer could not be used: a
// decodeError.
func endpointError(m *member, path string, err error) error {
	_, shown := m.endpoint(path)
	return &decodeError{fmt.Errorf("GET %s: %w", shown, err)}
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
// true there (false in older releases): it is sent false, since the
// requests a retract or in_place pause kept must survive.
// update_weight_version in http_server.py answers {"success", "message",
// "new_version"}.
type sglangUpdateVersion struct {
	NewVersion       string `json:"new_version"`
	AbortAllRequests bool   `json:"abort_all_requests"`
}

func (sglangEngine) PauseModes() []string {
	return []string{PauseWait, PauseAbort, PauseRetract, PauseInPlace}
}

func (sglangEngine) Pause(mode string) (Call, bool) {
	if mode == PauseWait {
		mode = PauseRetract // drained already; keep what outlived the drain
	}
	return jsonCall(http.MethodPost, "/pause_generation", sglangPause{Mode: mode}), true
}

func (sglangEngine) LoadFromDisk(modelPath, version string) (Call, bool) {
	return jsonCall(http.MethodPost, "/update_weights_from_disk",
		sglangUpdateFromDisk{ModelPath: modelPath, WeightVersion: version, FlushCache: true}), true
}

func (sglangEngine) SetVersion(version string) (Call, bool) {
	return jsonCall(http.MethodPost, "/update_weight_version", sglangUpdateVersion{NewVersion: version}), true
}

// Resume sends ContinueGenerationReqInput, all of whose fields have
// defaults: an empty object.
func (sglangEngine) Resume() (Call, bool) {
	return Call{Method: http.MethodPost, Path: "/continue_generation", Body: []byte("{}")}, true
}

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

var _ capacityReporter = sglangEngine{}

// reportedCapacity sums max_running_requests over the server's DP ranks.
func (sglangEngine) reportedCapacity(ctx context.Context, p *Poller, m *member) (int, error) {
	body, err := p.get(ctx, m, "/v1/loads", maxJSONBytes)
	if err != nil {
		return 0, err
	}
	var v sglangCapacity
	if err := json.Unmarshal(body, &v); err != nil {
		return 0, endpointError(m, "/v1/loads", fmt.Errorf("decode: %w", err))
	}
	n := 0
	for i, l := range v.Loads {
		if l.MaxRunningRequests == nil || *l.MaxRunningRequests < 1 {
			return 0, endpointError(m, "/v1/loads", fmt.Errorf(`loads[%d] has no positive "max_running_requests"`, i))
		}
		n += min(*l.MaxRunningRequests, MaxCapacity)
	}
	if n == 0 {
		return 0, endpointError(m, "/v1/loads", errors.New(`answer has no "loads"`))
	}
	return n, nil
}

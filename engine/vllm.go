package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/policyrouter/policyrouter/routing"
)

// vllm speaks to a vLLM OpenAI-compatible server (vllm serve). Its
// control endpoints are dev-mode routers (VLLM_SERVER_DEV_MODE=1):
// vllm/entrypoints/serve/dev/rlhf/api_router.py (vllm-project/vllm commit
// 0100a2129224: /pause, /resume, /is_paused, /abort_requests,
// /update_weight_version, /weight_info, /finish_weight_update and the
// weight-transfer calls) and vllm/entrypoints/serve/dev/sleep/api_router.py
// (commit e7a47b821ef4: /sleep, /wake_up, /is_sleeping). Older servers,
// or servers not in dev mode, answer them 404: each such endpoint is
// remembered per server and not asked again, and the probe reads what the
// server has.
//
// Probe:
//   - load: GET /metrics, the Prometheus gauges vllm:num_requests_running
//     and vllm:num_requests_waiting summed over every series (one per
//     engine core, label "engine"), parsed with prometheus/common/expfmt;
//   - paused: GET /is_paused {"is_paused": bool};
//   - version: GET /weight_info {"weight_version": str|null};
//   - asleep: GET /is_sleeping {"is_sleeping": bool};
//   - models: GET /v1/models, on the first probe and every ModelsEvery.
//
// Update steps:
//   - pause: POST /pause?mode=abort|wait|keep (PauseMode, a query
//     parameter; default abort), answered {"status": "paused"}; pause
//     mode "wait" drains the policy first and then pauses in vLLM's own
//     "wait", which lets what outlived drain_timeout_ms finish;
//   - load: none from disk. POST /update_weights takes {"update_info"}
//     for a weight transfer the trainer set up itself
//     (init_weight_transfer_engine, start_weight_update, update_weights,
//     finish_weight_update): external mode only, the trainer's calls (or
//     POST /fleet/engine/... for all at once);
//   - version (external mode): POST /update_weight_version
//     {"new_version"}, answered {"success": true, "new_version"}; a server
//     without it answers 404, which skips the step (Call.Optional), and
//     the update then records the version itself, as before;
//   - resume: POST /resume, answered {"status": "resumed"}.
//
// Lifecycle: POST /sleep?level=N (default 1; mode defaults to abort)
// and POST /wake_up?tags=...&tags=... (none: wake everything), each
// answered 200 without a body.
//
// GET /load ({"server_load": n}, vllm/entrypoints/openai/api_server.py)
// is not used: it counts only while --enable-server-load-tracking is on,
// and counts requests at the HTTP layer rather than in the scheduler.
type vllm struct{}

var _ Engine = vllm{}

// Routes: the OpenAI-compatible API (vllm/entrypoints/openai/api_server.py):
// no SGLang-native /generate.
func (vllm) Routes() []string { return openAIRoutes }

// The gauges of vLLM's PrometheusStatLogger, vllm/v1/metrics/loggers.py
// (vllm-project/vllm): Gauge(name="vllm:num_requests_running",
// documentation="Number of requests in model execution batches.",
// labelnames=["model_name", "engine"]) and likewise
// "vllm:num_requests_waiting" ("Number of requests waiting to be
// processed."), one series per engine core.
const (
	vllmRunning = "vllm:num_requests_running"
	vllmWaiting = "vllm:num_requests_waiting"
)

// vllmPaused is the answer of GET /is_paused:
// JSONResponse(content={"is_paused": paused}).
type vllmPaused struct {
	IsPaused *bool `json:"is_paused"`
}

// vllmWeightInfo is the answer of GET /weight_info:
// JSONResponse(content={"weight_version": weight_version}), the string
// the last /update_weight_version or /finish_weight_update set, "default"
// before any (EngineCore's self._weight_version = "default",
// vllm/v1/engine/core.py at commit 00080ee13c7a); null is taken as no
// version.
type vllmWeightInfo struct {
	WeightVersion *string `json:"weight_version"`
}

// vllmSleeping is the answer of GET /is_sleeping:
// JSONResponse(content={"is_sleeping": is_sleeping}).
type vllmSleeping struct {
	IsSleeping *bool `json:"is_sleeping"`
}

// vllmUpdateVersion is the body of POST /update_weight_version:
// new_version: Annotated[str, Body(embed=True)].
type vllmUpdateVersion struct {
	NewVersion string `json:"new_version"`
}

func (vllm) Probe(ctx context.Context, c *Client, s *Server) (Answer, error) {
	body, err := c.get(ctx, s, "/metrics", MaxMetricsBytes)
	if err != nil {
		return Answer{}, err
	}
	load, kv, err := vllmLoad(body)
	if err != nil {
		return Answer{}, endpointError(s, "/metrics", err)
	}
	a := Answer{KVTokens: kv}
	idleBelow(&a, load, s.Policy.Capacity)
	var paused vllmPaused
	switch err := c.optionalJSON(ctx, s, "/is_paused", &s.noPauseInfo, &paused); {
	case err != nil:
		return Answer{}, err
	case paused.IsPaused != nil:
		a.Paused = *paused.IsPaused
	}
	var sleeping vllmSleeping
	switch err := c.optionalJSON(ctx, s, "/is_sleeping", &s.noSleep, &sleeping); {
	case err != nil:
		return Answer{}, err
	case sleeping.IsSleeping != nil:
		a.Asleep = *sleeping.IsSleeping
	}
	var info vllmWeightInfo
	switch err := c.optionalJSON(ctx, s, "/weight_info", &s.noWeightInfo, &info); {
	case err != nil:
		return Answer{}, err
	case info.WeightVersion != nil:
		if err := versionAnswer(&a, *info.WeightVersion); err != nil {
			return Answer{}, endpointError(s, "/weight_info", err)
		}
	}
	c.probeModels(ctx, s, &a)
	return a, nil
}

// optionalJSON reads a dev-mode endpoint into v: a 404 is remembered in
// missing and is no error, and once missing the endpoint is not asked
// again (v is left as it is).
func (c *Client) optionalJSON(ctx context.Context, s *Server, path string, missing *atomic.Bool, v any) error {
	if missing.Load() {
		return nil
	}
	err := c.getJSON(ctx, s, path, v)
	if IsStatus(err, http.StatusNotFound) {
		missing.Store(true)
		return nil
	}
	return err
}

// vllmLoad reads running + waiting requests from a Prometheus text
// exposition, summed over every series of the two gauges, and the KV
// cache's size in tokens (0 when it does not say).
func vllmLoad(body []byte) (load, kvTokens int64, err error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return 0, 0, fmt.Errorf("parse metrics: %w", err)
	}
	load, err = vllmRequests(families)
	return load, vllmKVTokens(families), err
}

// vllmCacheConfig is the info gauge of the cache config:
// log_metrics_info("cache_config", vllm_config.cache_config) in
// vllm/v1/metrics/loggers.py (vllm-project/vllm, commit 005a810bc40f)
// makes "vllm:cache_config_info" with CacheConfig.metrics_info() as
// labels, among them block_size and num_gpu_blocks.
const vllmCacheConfig = "vllm:cache_config_info"

// vllmKVTokens is num_gpu_blocks × block_size of the cache config's
// info gauge (summed over engine cores: one cache each), 0 when absent.
func vllmKVTokens(families map[string]*dto.MetricFamily) int64 {
	var total int64
	for _, m := range families[vllmCacheConfig].GetMetric() {
		var blocks, size int64
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "num_gpu_blocks":
				blocks, _ = strconv.ParseInt(l.GetValue(), 10, 64)
			case "block_size":
				size, _ = strconv.ParseInt(l.GetValue(), 10, 64)
			}
		}
		if blocks > 0 && size > 0 && blocks <= math.MaxInt64/size-total {
			total += blocks * size
		}
	}
	return total
}

// vllmRequests is running + waiting requests, summed over every series
// of the two gauges.
func vllmRequests(families map[string]*dto.MetricFamily) (int64, error) {
	var total float64
	for _, name := range []string{vllmRunning, vllmWaiting} {
		mf := families[name]
		if mf == nil || len(mf.GetMetric()) == 0 {
			return 0, fmt.Errorf("no %s", name)
		}
		for _, m := range mf.GetMetric() {
			total += gaugeValue(m)
		}
	}
	if total < 0 || total > float64(routing.MaxLoad) {
		return 0, fmt.Errorf("load %g out of range", total)
	}
	return int64(total), nil
}

// gaugeValue is a sample's value, whether typed gauge or untyped.
func gaugeValue(m *dto.Metric) float64 {
	if g := m.GetGauge(); g != nil {
		return g.GetValue()
	}
	return m.GetUntyped().GetValue()
}

func (vllm) PauseModes() []string { return []string{PauseWait, PauseAbort, PauseKeep} }

func (vllm) Pause(mode string) (Call, bool) {
	return Call{Method: http.MethodPost, Path: "/pause?mode=" + url.QueryEscape(mode)}, true
}

func (vllm) LoadFromDisk(string, string) (Call, bool) { return Call{}, false }

func (vllm) SetVersion(version string) (Call, bool) {
	c := jsonCall(http.MethodPost, "/update_weight_version", vllmUpdateVersion{NewVersion: version})
	c.Optional = true
	return c, true
}

func (vllm) Resume() (Call, bool) { return Call{Method: http.MethodPost, Path: "/resume"}, true }

func (vllm) Sleep(level int) (Call, bool) {
	path := "/sleep"
	if level > 0 {
		path += "?level=" + strconv.Itoa(level)
	}
	return Call{Method: http.MethodPost, Path: path}, true
}

func (vllm) Wake(tags []string) (Call, bool) {
	q := url.Values{"tags": tags}
	path := "/wake_up"
	if len(tags) > 0 {
		path += "?" + q.Encode()
	}
	return Call{Method: http.MethodPost, Path: path}, true
}

func (vllm) SleepReported() bool { return true }

// VLLMDefaultCapacity is the capacity of a vLLM server that does not say
// its own (DefaultCapacity): vLLM's default max_num_seqs for the OpenAI
// API server on most GPUs (EngineArgs.get_batch_defaults in
// vllm/engine/arg_utils.py: UsageContext.OPENAI_API_SERVER: 256; 1024 on
// GPUs of 70 GiB or more other than the A100).
const VLLMDefaultCapacity = 256

// vllmServerInfo is the part of GET /server_info?config_format=json that
// says how many requests the server runs at once: show_server_info in
// vllm/entrypoints/serve/instrumentator/server_info.py (vllm-project/vllm
// commit 09cb327f1183; in later releases vllm/entrypoints/serve/dev/
// server_info, served in dev mode only, VLLM_SERVER_DEV_MODE=1) answers
// {"vllm_config": PydanticVllmConfig.dump_python(vllm_config, mode="json"),
// "vllm_env", "system_env"}, whose scheduler_config.max_num_seqs is the
// most sequences one engine core schedules at once. A data-parallel server
// is taken at one core's count: less than it can run, never more.
type vllmServerInfo struct {
	VLLMConfig *struct {
		SchedulerConfig *struct {
			MaxNumSeqs *int `json:"max_num_seqs"`
		} `json:"scheduler_config"`
	} `json:"vllm_config"`
}

var _ capacityReporter = vllm{}

func (vllm) defaultCapacity() int { return VLLMDefaultCapacity }

func (vllm) reportedCapacity(ctx context.Context, c *Client, s *Server) (int, error) {
	const path = "/server_info?config_format=json"
	var v vllmServerInfo
	if err := c.getJSON(ctx, s, path, &v); err != nil {
		return 0, err
	}
	if v.VLLMConfig == nil || v.VLLMConfig.SchedulerConfig == nil || v.VLLMConfig.SchedulerConfig.MaxNumSeqs == nil ||
		*v.VLLMConfig.SchedulerConfig.MaxNumSeqs < 1 {
		return 0, endpointError(s, path, errors.New(`answer has no positive "vllm_config.scheduler_config.max_num_seqs"`))
	}
	return *v.VLLMConfig.SchedulerConfig.MaxNumSeqs, nil
}

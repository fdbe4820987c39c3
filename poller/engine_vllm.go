package poller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/policyrouter/policyrouter/routing"
)

// vllmEngine probes a vLLM OpenAI-compatible server (vllm serve):
//
//   - load: GET /metrics, the Prometheus gauges vllm:num_requests_running
//     and vllm:num_requests_waiting summed over every series (one per
//     engine core, label "engine"), parsed with prometheus/common/expfmt;
//   - paused: GET /is_paused, served only in dev mode
//     (VLLM_SERVER_DEV_MODE=1); a paused server is busy. A 404 is
//     remembered and the endpoint not asked again;
//   - version: none. The vLLM sources read have no endpoint that reports
//     a weight version (the issue named GET /weight_info; it does not
//     exist there), so a vLLM policy reports no version and keeps the one
//     it was registered with.
//
// Its update steps, all in vllm/entrypoints/serve/rlhf/api_router.py
// (vllm-project/vllm commit 1ace43ed7b3c), served in dev mode only:
//
//   - pause: POST /pause?mode=abort|wait|keep (PauseMode, a query
//     parameter; default abort), answered {"status": "paused"}; pause
//     mode "wait" drains the policy first and then pauses in vLLM's own
//     "wait", which lets what outlived drain_timeout_ms finish;
//   - load: none from disk. That router's POST /update_weights takes
//     {"update_info"} for a weight transfer the trainer set up itself
//     (init_weight_transfer_engine): external mode only;
//   - version: none. No vLLM endpoint sets a weight version, so the step
//     is skipped and the policy keeps the version the update records
//     (vLLM reports none to contradict it);
//   - resume: POST /resume, answered {"status": "resumed"}.
//
// GET /load ({"server_load": n}, vllm/entrypoints/openai/api_server.py)
// is not used: it counts only while --enable-server-load-tracking is on,
// and counts requests at the HTTP layer rather than in the scheduler.
type vllmEngine struct{}

var _ engine = vllmEngine{}

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

// vllmPaused is the answer of GET /is_paused in
// vllm/entrypoints/serve/rlhf/api_router.py (vllm-project/vllm commit
// 1ace43ed7b3c): JSONResponse(content={"is_paused": paused}); the router
// is attached only when envs.VLLM_SERVER_DEV_MODE is set.
type vllmPaused struct {
	IsPaused *bool `json:"is_paused"`
}

func (vllmEngine) probe(ctx context.Context, p *Poller, m *member) (answer, error) {
	body, err := p.get(ctx, m, "/metrics", maxMetricsBytes)
	if err != nil {
		return answer{}, err
	}
	load, err := vllmLoad(body)
	if err != nil {
		return answer{}, endpointError(m, "/metrics", err)
	}
	var a answer
	idleBelow(&a, load, m.pol.Capacity)
	if m.noPauseInfo.Load() {
		return a, nil
	}
	body, err = p.get(ctx, m, "/is_paused", maxJSONBytes)
	switch {
	case isStatus(err, http.StatusNotFound):
		m.noPauseInfo.Store(true) // not in dev mode
		return a, nil
	case err != nil:
		return answer{}, err
	}
	var v vllmPaused
	if err := json.Unmarshal(body, &v); err != nil || v.IsPaused == nil {
		if err == nil {
			err = fmt.Errorf(`answer has no boolean "is_paused"`)
		}
		return answer{}, endpointError(m, "/is_paused", err)
	}
	if *v.IsPaused {
		a.idle = false
	}
	return a, nil
}

// vllmLoad reads running + waiting requests from a Prometheus text
// exposition, summed over every series of the two gauges.
func vllmLoad(body []byte) (int64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("parse metrics: %w", err)
	}
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

func (vllmEngine) PauseModes() []string { return []string{PauseWait, PauseAbort, PauseKeep} }

func (vllmEngine) Pause(mode string) (Call, bool) {
	return Call{Method: http.MethodPost, Path: "/pause?mode=" + url.QueryEscape(mode)}, true
}

func (vllmEngine) LoadFromDisk(string, string) (Call, bool) { return Call{}, false }

func (vllmEngine) SetVersion(string) (Call, bool) { return Call{}, false }

func (vllmEngine) Resume() (Call, bool) { return Call{Method: http.MethodPost, Path: "/resume"}, true }

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

var _ capacityReporter = vllmEngine{}

func (vllmEngine) reportedCapacity(ctx context.Context, p *Poller, m *member) (int, error) {
	const path = "/server_info?config_format=json"
	body, err := p.get(ctx, m, path, maxJSONBytes)
	if err != nil {
		return 0, err
	}
	var v vllmServerInfo
	if err := json.Unmarshal(body, &v); err != nil {
		return 0, endpointError(m, path, fmt.Errorf("decode: %w", err))
	}
	if v.VLLMConfig == nil || v.VLLMConfig.SchedulerConfig == nil || v.VLLMConfig.SchedulerConfig.MaxNumSeqs == nil ||
		*v.VLLMConfig.SchedulerConfig.MaxNumSeqs < 1 {
		return 0, endpointError(m, path, fmt.Errorf(`answer has no positive "vllm_config.scheduler_config.max_num_seqs"`))
	}
	return *v.VLLMConfig.SchedulerConfig.MaxNumSeqs, nil
}

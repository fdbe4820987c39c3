package fakepolicy

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/policyrouter/policyrouter/engine"
)

// Engines a Fleet can simulate (Options.Engine), beside the default
// "policyrouter", which serves GET /idle: one fake per row of the engine
// table (engine.Names), by the same names.
const (
	EngineSGLang = engine.SGLang
	EngineVLLM   = engine.VLLM
)

// route is one endpoint of a simulated policy: method, path and handler.
type route struct {
	method, path string
	h            func(*Policy, http.ResponseWriter, *http.Request)
}

// routes returns the endpoints a policy of the given engine serves: the
// work endpoints every policy has, and its engine's own.
func routes(engine string) []route {
	rs := []route{
		{"POST", "/work", (*Policy).serveWork},
		{"POST", "/generate", (*Policy).serveGenerate},
		{"POST", "/v1/completions", (*Policy).serveCompletions},
		{"POST", "/v1/chat/completions", (*Policy).serveChat},
		{"GET", "/v1/models", (*Policy).serveModels},
		{"GET", "/cache", (*Policy).serveCache},
		{"GET", "/peak", (*Policy).servePeak},
	}
	if own, ok := engineRoutes[engine]; ok {
		return append(rs, own...)
	}
	return append(rs,
		route{"GET", "/idle", (*Policy).serveIdle},
		route{"POST", "/update_weights_from_disk", (*Policy).serveUpdate})
}

// engineRoutes are the fakes of the engine table's rows other than the
// native one, by engine name: each engine_*.go file's routes, one line
// each. A test checks that every engine of the table has its line.
var engineRoutes = map[string][]route{
	EngineSGLang:   sglangRoutes,
	EngineVLLM:     vllmRoutes,
	EngineLlamaCpp: llamacppRoutes,
}

// engineState is what a simulated engine adds to a policy.
type engineState struct {
	// weightVersion is the engine's version string; nil reads "default",
	// SGLang's own default.
	weightVersion atomic.Pointer[string]
	paused        atomic.Bool
	// noLoads makes SGLang's GET /v1/loads answer 404, as on servers older
	// than it, so that GET /get_load is used.
	noLoads atomic.Bool
	// calls counts engine calls by "METHOD /path", for tests.
	calls callLog
	// pauseMode is the mode of the last pause.
	pauseMode atomic.Pointer[string]
	// asleep: the engine released its memory (vLLM /sleep, SGLang
	// /release_memory_occupation).
	asleep atomic.Bool
	// incremental streams native /generate chunks as deltas, as SGLang
	// with --incremental-streaming-output does.
	incremental atomic.Bool
	// legacy makes vLLM's newer dev-mode endpoints (weight_info,
	// update_weight_version, sleep) and SGLang's /model_info and
	// /server_info answer 404.
	legacy atomic.Bool
	// noServerInfo makes SGLang's /server_info and /get_server_info
	// answer 404.
	noServerInfo atomic.Bool
}

// Asleep reports whether the simulated engine released its memory.
func (p *Policy) Asleep() bool { return p.engine.asleep.Load() }

// SetLegacy makes the simulated engine an older release: vLLM without
// /weight_info, /update_weight_version, /sleep, /wake_up and
// /is_sleeping; SGLang without /model_info (0.5.15's name) and
// /server_info (/get_server_info's newer name).
func (p *Policy) SetLegacy(legacy bool) { p.engine.legacy.Store(legacy) }

// SetNoServerInfo makes a simulated SGLang answer GET /server_info and
// /get_server_info with 404, like a server whose info cannot be had: how
// it streams is then not known but from its chunks.
func (p *Policy) SetNoServerInfo(on bool) { p.engine.noServerInfo.Store(on) }

// sleep releases the engine's memory: the work in flight is aborted and
// new work waits for the wake.
func (p *Policy) sleep() {
	p.engine.asleep.Store(true)
	p.FlushCache() // the KV cache's memory is released
	p.freeze()
	p.abortWork()
}

// wake takes the memory back: the work waiting resumes.
func (p *Policy) wake() {
	p.engine.asleep.Store(false)
	if !p.Paused() {
		p.thaw()
	}
}

// PauseMode returns the mode the simulated engine was last paused in ("" if
// never): SGLang's body "mode", vLLM's query "mode" ("abort" when absent).
func (p *Policy) PauseMode() string {
	if m := p.engine.pauseMode.Load(); m != nil {
		return *m
	}
	return ""
}

// SetIncrementalStreaming makes the simulated engine stream native
// /generate chunks with only their new tokens, as SGLang started with
// --incremental-streaming-output does; by default each chunk has all the
// tokens so far.
func (p *Policy) SetIncrementalStreaming(on bool) { p.engine.incremental.Store(on) }

// SetWeightVersion sets the version string the simulated engine reports.
func (p *Policy) SetWeightVersion(v string) { p.engine.weightVersion.Store(&v) }

// WeightVersion returns the version string the simulated engine reports.
func (p *Policy) WeightVersion() string {
	if v := p.engine.weightVersion.Load(); v != nil {
		return *v
	}
	return "default"
}

// SetLegacySGLang makes a simulated SGLang answer GET /v1/loads with 404,
// like a server from before that endpoint.
func (p *Policy) SetLegacySGLang(legacy bool) { p.engine.noLoads.Store(legacy) }

// Paused reports whether the simulated engine's generation is paused.
func (p *Policy) Paused() bool { return p.engine.paused.Load() }

// Calls returns the engine calls the policy received, in order, as
// "METHOD /path" (without the fleet's /p/{n} prefix).
func (p *Policy) Calls() []string { return p.engine.calls.list() }

// runningWaiting splits the policy's unfinished work into running and
// waiting requests: Options.MaxRunning run at once (all of them when 0),
// the rest wait.
func (p *Policy) runningWaiting() (running, waiting int) {
	load := p.Load()
	if n := p.fleet.opts.MaxRunning; n > 0 && load > n {
		return n, load - n
	}
	return load, 0
}

// authorized checks the engine's --api-key, as SGLang's and vLLM's
// API-key middlewares do: with Options.APIKey set, a request without
// "Authorization: Bearer <key>" is answered 401 {"error": "Unauthorized"}.
func (p *Policy) authorized(w http.ResponseWriter, r *http.Request) bool {
	key := p.fleet.opts.APIKey
	if key == "" || r.Header.Get("Authorization") == "Bearer "+key {
		return true
	}
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
	return false
}

// probed handles what every load endpoint of a simulated engine shares:
// the probe count, the delay, the key, and the failure modes (ModeFail
// 500, ModeGarbage an HTML page, ModeHang no answer). It reports whether
// the caller should answer normally.
func (p *Policy) probed(w http.ResponseWriter, r *http.Request) bool {
	p.probes.Add(1)
	p.engine.calls.add(r.Method + " " + r.URL.Path)
	if !p.wait(r, time.Duration(p.delay.Load())) || !p.authorized(w, r) {
		return false
	}
	switch p.Mode() {
	case ModeHang:
		select {
		case <-r.Context().Done():
		case <-p.fleet.closed:
		}
		return false
	case ModeFail:
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "simulated failure"})
		return false
	case ModeGarbage:
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html>not an engine answer</html>\n"))
		return false
	}
	return true
}

// called is probed for the engine's control endpoints: counted (with
// the query, if any: "POST /pause?mode=keep"), keyed, but not subject to
// the failure modes.
func (p *Policy) called(w http.ResponseWriter, r *http.Request) bool {
	call := r.Method + " " + r.URL.Path
	if r.URL.RawQuery != "" {
		call += "?" + r.URL.RawQuery
	}
	p.engine.calls.add(call)
	return p.authorized(w, r)
}

// abortWork drops the policy's unfinished work items, as an engine paused
// in abort mode aborts its requests in flight: its load reads 0 at once,
// the generations in flight end now with finish reason "abort"
// (openai.go), and the busy ledger ends its period now, so that work that
// never ran does not count as busy.
func (p *Policy) abortWork() { p.endWork(false) }

// DropGenerations ends every generation in flight as an engine that dies
// does: each one's connection drops in the middle of its answer, with no
// finish reason, and the work is gone.
func (p *Policy) DropGenerations() { p.endWork(true) }

// endWork is abortWork; drop makes the generations drop their connections
// instead of answering.
func (p *Policy) endWork(drop bool) {
	now := p.fleet.opts.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.jobs)
	p.jobs = p.jobs[:0]
	if p.busy.to.After(now) {
		p.busy.to = now
		if now.Before(p.busy.from) {
			p.busy.to = p.busy.from
		}
	}
	if p.aborted != nil {
		p.aborted.drop = drop
		close(p.aborted.done)
	}
	p.aborted = &abortSignal{done: make(chan struct{})}
}

// abortSignal ends the generations started before it: done is closed by
// the next abort; drop, read once done is closed, says the connections
// drop instead.
type abortSignal struct {
	done chan struct{}
	drop bool
}

// nextAbort returns the signal of the next abort.
func (p *Policy) nextAbort() *abortSignal {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.aborted == nil {
		p.aborted = &abortSignal{done: make(chan struct{})}
	}
	return p.aborted
}

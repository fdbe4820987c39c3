package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/app"
	"github.com/policyrouter/policyrouter/client"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/benchkit"
	"github.com/policyrouter/policyrouter/prefix"
	"github.com/policyrouter/policyrouter/proxy"
)

// fleetShape is the stand-in fleet of a prefix run: SGLang fakes with a
// block prefix cache of KVTokens each, a prefill of PrefillPerToken per
// uncached prompt token (one prefill at a time per engine), decoding at
// TokensPerSecond per request, registered with Capacity.
type fleetShape struct {
	Policies, Capacity, KVTokens int
	PrefillPerToken              time.Duration
	TokensPerSecond              float64
}

// defaultFleet is the fleet of the reported runs: 4 policies of capacity
// 16, 64k KV tokens each, 20 µs a prefill token (50k tokens/s), 1000
// tokens/s of decode per request (scaled down from an engine's real rates
// so that a run takes seconds).
var defaultFleet = fleetShape{Policies: 4, Capacity: 16, KVTokens: 65536, PrefillPerToken: 20 * time.Microsecond, TokensPerSecond: 1000}

// prefixRouter is a router (app.New with serve's defaults, prefix affinity
// on) over a fleet of stand-ins, on loopback.
type prefixRouter struct {
	fleet  *fakepolicy.Fleet
	app    *app.App
	srv    *http.Server
	base   string
	api    *client.Client
	cancel context.CancelFunc
	done   chan error
	// onClose stops what a variant started beside the router, first.
	onClose []func()
}

// startPrefixRouter starts the fleet and the router and registers the
// fleet's policies with their engine and capacity.
func startPrefixRouter(ctx context.Context, fs fleetShape, seed uint64, hc *http.Client) (_ *prefixRouter, err error) {
	r := &prefixRouter{}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	r.fleet, err = fakepolicy.New(fs.Policies, rand.NewPCG(seed, seed), fakepolicy.Options{
		Engine: fakepolicy.EngineSGLang, PerPolicyListeners: true, KVTokens: fs.KVTokens,
		PrefillPerToken: fs.PrefillPerToken, TokensPerSecond: fs.TokensPerSecond, MaxRunning: fs.Capacity,
	})
	if err != nil {
		return nil, err
	}
	cfg := app.DefaultConfig()
	cfg.Addr = ""
	cfg.Logger = slog.New(slog.DiscardHandler)
	runCtx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	r.app, err = app.New(runCtx, cfg)
	if err != nil {
		return nil, err
	}
	r.done = make(chan error, 1)
	go func() { r.done <- r.app.Run(runCtx) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r.srv = r.app.HTTPServer()
	go func() { _ = r.srv.Serve(ln) }()
	r.base = "http://" + ln.Addr().String()
	r.api = client.New(r.base, hc)
	var policies []api.PolicyRequest
	for i := range fs.Policies {
		policies = append(policies, api.PolicyRequest{URL: r.fleet.URL(i), Index: &i, Engine: engine.SGLang, Capacity: &fs.Capacity})
	}
	if _, err := r.api.PutRegistration(ctx, policies, benchkit.Topology(fs.Policies, fs.Policies, 1)); err != nil {
		return nil, fmt.Errorf("register the fleet: %w", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := r.api.Ready(ctx)
		if err == nil {
			return r, nil
		}
		if time.Now().After(deadline) || !benchkit.SleepUntil(ctx, time.Now().Add(20*time.Millisecond)) {
			return nil, fmt.Errorf("router not ready: %w", err)
		}
	}
}

// close stops the router and the fleet.
func (r *prefixRouter) close() {
	for _, f := range r.onClose {
		f()
	}
	if r.app != nil {
		r.app.Stop()
	}
	if r.srv != nil {
		_ = r.srv.Close()
	}
	if r.cancel != nil {
		r.cancel()
	}
	if r.done != nil {
		<-r.done
	}
	if r.app != nil {
		_ = r.app.Close()
	}
	if r.fleet != nil {
		_ = r.fleet.Close()
	}
}

// sent is what a client learns of one generation.
type sent struct {
	policy         int
	prompt, cached int
}

// sender sends one generation, however the strategy routes it.
type sender func(ctx context.Context, req prefixRequest) (sent, error)

// genAnswer is what a client reads of SGLang's /generate answer.
type genAnswer struct {
	OutputIDs []int64 `json:"output_ids"`
	Meta      struct {
		PromptTokens int `json:"prompt_tokens"`
		CachedTokens int `json:"cached_tokens"`
	} `json:"meta_info"`
}

// generateBody is the native /generate body of req.
func generateBody(req prefixRequest) []byte {
	b, _ := json.Marshal(map[string]any{"input_ids": req.Prompt, "sampling_params": map[string]any{"max_new_tokens": req.MaxNew}})
	return b
}

// generate posts req to url+"/generate" with the headers h and returns
// the answer and its headers.
func generate(ctx context.Context, hc *http.Client, url string, req prefixRequest, h http.Header) (genAnswer, http.Header, error) {
	var g genAnswer
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/generate", bytes.NewReader(generateBody(req)))
	if err != nil {
		return g, nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	for k, v := range h {
		hr.Header[k] = v
	}
	resp, err := hc.Do(hr)
	if err != nil {
		return g, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return g, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return g, nil, fmt.Errorf("POST %s/generate: %d %s", url, resp.StatusCode, bytes.TrimSpace(body))
	}
	return g, resp.Header, json.Unmarshal(body, &g)
}

// leaseSender routes through POST /select (sessions: session_id = the
// request's session; hashes: prefix_hashes of the prompt), generates on
// the chosen policy and releases, with the hashes of prompt + output when
// hashes is set so that the next turn matches.
func leaseSender(r *prefixRouter, hc *http.Client, sessions, hashes bool) sender {
	timeout := 60000
	return func(ctx context.Context, req prefixRequest) (sent, error) {
		sel := api.SelectRequest{TimeoutMS: &timeout}
		if sessions {
			sel.SessionID = req.Session
		}
		if hashes {
			sel.PrefixHashes = prefix.TokenHashes(req.Prompt, 0)
		}
		s, err := selectRetrying(ctx, r.api, sel)
		if err != nil {
			return sent{}, err
		}
		g, _, err := generate(ctx, hc, s.URL, req, nil)
		if err != nil {
			return sent{}, err
		}
		rel := api.ReleaseRequest{LeaseID: s.LeaseID}
		if hashes {
			// The prompt's chain continued by its last partial block and
			// the output: the hashes of prompt + output, without hashing
			// the prompt again.
			whole := len(sel.PrefixHashes) * prefix.BlockTokens
			tail := append(slices.Clip(req.Prompt[whole:]), g.OutputIDs...)
			rel.PrefixHashes = prefix.AppendTokenHashes(slices.Clip(sel.PrefixHashes), tail, 0)
		}
		body, _ := json.Marshal(rel)
		if err := r.api.Do(ctx, http.MethodPost, "/release", body, nil); err != nil {
			return sent{}, err
		}
		return sent{policy: s.Index, prompt: g.Meta.PromptTokens, cached: g.Meta.CachedTokens}, nil
	}
}

// cacheAwareSender routes with SGLang Model Gateway's cache_aware rule
// (prefix_cacheaware.go) run as the gateway it is: one HTTP hop in front
// of r's engines (prefix_gateway.go), to which the client sends the
// request as it would to an engine. The gateway stops with r.
func cacheAwareSender(r *prefixRouter, hc *http.Client) (sender, error) {
	transport := benchkit.NewClient(256).Transport.(*http.Transport)
	g, err := startCacheAwareGateway(r.fleet.URLs(), transport)
	if err != nil {
		return nil, err
	}
	r.onClose = append(r.onClose, func() {
		_ = g.close()
		transport.CloseIdleConnections()
	})
	return func(ctx context.Context, req prefixRequest) (sent, error) {
		ans, rh, err := generate(ctx, hc, g.url, req, nil)
		if err != nil {
			return sent{}, err
		}
		i, err := strconv.Atoi(rh.Get(gatewayWorkerHeader))
		if err != nil {
			return sent{}, fmt.Errorf("answer without %s: %w", gatewayWorkerHeader, err)
		}
		return sent{policy: i, prompt: ans.Meta.PromptTokens, cached: ans.Meta.CachedTokens}, nil
	}, nil
}

// proxySender sends through the router's proxy (POST /generate): with a
// session key (X-Session-ID) when sessions is set, with prefix affinity
// off (X-Prefix-Affinity: 0) when off is set. The policy is the answer's
// X-Policy-Index.
func proxySender(r *prefixRouter, hc *http.Client, sessions, off bool) sender {
	return func(ctx context.Context, req prefixRequest) (sent, error) {
		h := http.Header{}
		if sessions {
			h.Set(proxy.HeaderSessionID, req.Session)
		}
		if off {
			h.Set(proxy.HeaderPrefixAffinity, "0")
		}
		g, rh, err := generate(ctx, hc, r.base, req, h)
		if err != nil {
			return sent{}, err
		}
		i, err := strconv.Atoi(rh.Get(proxy.HeaderPolicyIndex))
		if err != nil {
			return sent{}, fmt.Errorf("answer without %s: %w", proxy.HeaderPolicyIndex, err)
		}
		return sent{policy: i, prompt: g.Meta.PromptTokens, cached: g.Meta.CachedTokens}, nil
	}
}

// prefixResult is one workload run with one strategy.
type prefixResult struct {
	Workload string  `json:"workload"`
	Strategy string  `json:"strategy"`
	WallS    float64 `json:"wall_s"`
	// CPUS is the CPU time the whole process (router, stand-ins,
	// clients, gateway) spent during the run, user and system.
	CPUS float64 `json:"cpu_s"`
	// Hit is cached prompt tokens over prompt tokens, as the engines
	// reported them (SGLang's meta_info.cached_tokens).
	Hit          float64 `json:"prefix_hit"`
	PromptTokens int     `json:"prompt_tokens"`
	CachedTokens int     `json:"cached_tokens"`
	// PerPolicy counts the requests each policy served; MaxOverMean is
	// its max over its mean.
	PerPolicy   []int   `json:"per_policy"`
	MaxOverMean float64 `json:"max_over_mean"`
	// Groups is the units of more than one request (GRPO groups);
	// GroupsTogether those with at least 6 on one policy.
	Groups         int `json:"groups,omitempty"`
	GroupsTogether int `json:"groups_together,omitempty"`
	// PeakLoad is the most requests any engine held at once after their
	// prefill (the fake's own counter), against Capacity.
	PeakLoad int64 `json:"peak_load"`
	Capacity int   `json:"capacity"`
}

// togetherShare is the fraction of groups with at least 6 samples on one
// policy.
func (r prefixResult) togetherShare() float64 {
	if r.Groups == 0 {
		return 0
	}
	return float64(r.GroupsTogether) / float64(r.Groups)
}

// runWorkload runs w's clients side by side through send on r's fleet and
// measures it.
func runWorkload(ctx context.Context, r *prefixRouter, w prefixWorkload, strategy string, capacity int, send sender) (prefixResult, error) {
	res := prefixResult{Workload: w.Name, Strategy: strategy, PerPolicy: make([]int, r.fleet.Len()), Capacity: capacity}
	for i := range r.fleet.Len() {
		r.fleet.Policy(i).ResetPeak()
	}
	var mu sync.Mutex
	var errs []error
	record := func(s sent, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		res.PromptTokens += s.prompt
		res.CachedTokens += s.cached
		if s.policy >= 0 && s.policy < len(res.PerPolicy) {
			res.PerPolicy[s.policy]++
		}
	}
	start, cpu := time.Now(), processCPU()
	var wg sync.WaitGroup
	for _, c := range w.Clients {
		wg.Go(func() {
			for _, u := range c.Units {
				if u.Step > 0 && !benchkit.SleepUntil(ctx, time.Now().Add(u.Step)) {
					return
				}
				on := make([]int, len(u.Requests))
				var uw sync.WaitGroup
				for k, req := range u.Requests {
					uw.Go(func() {
						s, err := send(ctx, req)
						on[k] = s.policy
						if err != nil {
							on[k] = -1
						}
						record(s, err)
					})
				}
				uw.Wait()
				if len(u.Requests) > 1 {
					mu.Lock()
					res.Groups++
					if maxOnOne(on) >= 6 {
						res.GroupsTogether++
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	res.WallS = time.Since(start).Seconds()
	res.CPUS = (processCPU() - cpu).Seconds()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if res.PromptTokens > 0 {
		res.Hit = float64(res.CachedTokens) / float64(res.PromptTokens)
	}
	total, top := 0, 0
	for _, n := range res.PerPolicy {
		total += n
		top = max(top, n)
	}
	if total > 0 {
		res.MaxOverMean = float64(top) * float64(len(res.PerPolicy)) / float64(total)
	}
	for i := range r.fleet.Len() {
		res.PeakLoad = max(res.PeakLoad, r.fleet.Policy(i).PeakLoad())
	}
	return res, nil
}

// processCPU is the CPU time the process has used so far, user and
// system (getrusage); 0 where it cannot be read.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// maxOnOne is the most entries of on that name one policy (-1 counts for
// none).
func maxOnOne(on []int) int {
	counts := map[int]int{}
	top := 0
	for _, p := range on {
		if p >= 0 {
			counts[p]++
			top = max(top, counts[p])
		}
	}
	return top
}

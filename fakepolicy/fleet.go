// Package fakepolicy simulates policy servers, for demos and tests.
//
// A Fleet serves n simulated policies over HTTP on loopback. Each answers
// the poller's `GET {url}/idle` with `{"idle": bool, "load": n}` and takes
// work through `POST {url}/work` (busy at once for a random duration in
// [MinWork, MaxWork], or log-normal with Options.GenMedian; answers 202
// without waiting) or `POST {url}/generate` (answers 200 when the work is
// done, like an inference server). Its load is the number of work items not
// yet done, and it keeps account of its busy time (Policy.BusyTime); with
// Options.Serial it works on one item at a time. Tests can make
// a policy fail, hang, answer garbage, flap, answer slowly or answer a bare
// true/false (Policy.SetMode, Policy.SetDelay).
//
// By default the whole fleet shares one listener and policy i's URL is
// http://127.0.0.1:port/p/i, which keeps a thousand policies down to one
// file descriptor on the server side. With Options.PerPolicyListeners each
// policy has its own listener and its URL is http://127.0.0.1:port, like
// real policy servers.
package fakepolicy

import (
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/policyrouter/policyrouter/engine"
)

// Options configure a Fleet. Zero fields take the defaults.
type Options struct {
	// MinWork and MaxWork bound the random duration of one work item.
	// Defaults 100ms and 1s; MaxWork below MinWork is raised to MinWork.
	MinWork, MaxWork time.Duration
	// FlapProbes is the length of a ModeFlap phase: that many probes are
	// answered normally, then that many fail, and so on. Default 5.
	FlapProbes int
	// PerPolicyListeners gives each policy its own listener.
	PerPolicyListeners bool
	// Host is the address the listeners bind, with port 0. Default
	// "127.0.0.1".
	Host string
	// Addr, when set, is the host:port of the shared listener instead of
	// Host with a free port (e.g. for a fixed address in a walk-through or
	// a container). Not used with PerPolicyListeners.
	Addr string
	// Now is the clock that decides when work is done; default time.Now.
	// POST /generate still waits in real time.
	Now func() time.Time
	// Logger receives the HTTP servers' own errors; default none.
	Logger *slog.Logger
	// PrefixCache is K, how many session keys each policy's simulated
	// prefix cache holds (an LRU); 0 simulates none.
	PrefixCache int
	// PrefixSpeedup divides the duration of a POST /generate whose session
	// is in the policy's prefix cache. Default 4.
	PrefixSpeedup float64
	// UpdateTime is how long a POST /update_weights_from_disk keeps the
	// policy busy. Default 200ms.
	UpdateTime time.Duration
	// GenMedian, when positive, draws work durations from a log-normal
	// distribution of this median and shape GenSigma (the standard
	// deviation of the duration's logarithm) instead of uniformly in
	// [MinWork, MaxWork]; a draw is capped at one minute.
	GenMedian time.Duration
	GenSigma  float64
	// Engine is the kind of server the policies simulate: "" or
	// "policyrouter" (GET /idle), EngineSGLang or EngineVLLM, each serving
	// its engine's load, version, pause and update endpoints in the
	// engine's own wire formats (engine_*.go).
	Engine string
	// MaxRunning is how many work items a simulated engine runs at once;
	// the rest wait (num_waiting_reqs, vllm:num_requests_waiting). 0: all
	// run.
	MaxRunning int
	// APIKey, when set, is the simulated engine's --api-key: its endpoints
	// answer 401 to requests without "Authorization: Bearer <APIKey>".
	APIKey string
	// Serial makes each policy work on one item at a time, like a server
	// with one slot: work given to a busy policy starts when the work ahead
	// of it ends (and POST /generate answers then). Otherwise items run
	// side by side.
	Serial bool
	// TokensPerSecond, when positive, is how fast a generation's tokens
	// come (openai.go): n tokens keep the policy busy n / TokensPerSecond.
	// 0 takes a work item's duration for the whole generation.
	TokensPerSecond float64
	// KVTokens, when positive, is each simulated engine's KV cache in
	// tokens: the engine keeps a prefix cache of blocks of 16 tokens, LRU
	// within it, reports it (SGLang's max_total_num_tokens, vLLM's
	// num_gpu_blocks) and reports the cached tokens of each prompt
	// (blockcache.go). 0 simulates none, and cached_tokens reads 0.
	KVTokens int
	// PrefillPerToken is how long a prefill takes per prompt token not in
	// the KV cache; prefills run one at a time. 0 takes no time.
	PrefillPerToken time.Duration
	// PromptTokensDetails makes the OpenAI answers carry
	// usage.prompt_tokens_details.cached_tokens, as vLLM started with
	// --enable-prompt-tokens-details does.
	PromptTokensDetails bool
}

// Fleet is a set of simulated policy servers. All methods are safe for
// concurrent use.
type Fleet struct {
	opts     Options
	policies []*Policy

	randMu sync.Mutex
	rand   *rand.Rand

	servers []*http.Server
	serving sync.WaitGroup // Serve goroutines
	conns   connTracker

	closeOnce sync.Once
	closeErr  error
	closed    chan struct{} // closed by Close: unblocks hung and working handlers
}

// New starts a fleet of n simulated policies, with indices 0..n-1. Work
// durations are drawn from src, so a fleet given the same source and the
// same sequence of work requests behaves the same; nil means a fixed seed.
// Close the fleet to stop its servers.
func New(n int, src rand.Source, opts Options) (*Fleet, error) {
	if n < 0 {
		return nil, fmt.Errorf("fakepolicy: %d policies", n)
	}
	if opts.MinWork <= 0 {
		opts.MinWork = 100 * time.Millisecond
	}
	if opts.MaxWork <= 0 {
		opts.MaxWork = time.Second
	}
	opts.MaxWork = max(opts.MaxWork, opts.MinWork)
	if opts.Engine != "" && !engine.Is(opts.Engine) {
		return nil, fmt.Errorf("fakepolicy: unknown engine %q", opts.Engine)
	}
	if opts.FlapProbes <= 0 {
		opts.FlapProbes = 5
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.UpdateTime <= 0 {
		opts.UpdateTime = defaultUpdateTime
	}
	if opts.PrefixSpeedup < 1 {
		opts.PrefixSpeedup = 4
	}
	if opts.GenSigma < 0 || math.IsNaN(opts.GenSigma) || math.IsInf(opts.GenSigma, 0) {
		return nil, fmt.Errorf("fakepolicy: GenSigma %v", opts.GenSigma)
	}
	if src == nil {
		src = rand.NewPCG(1, 2)
	}
	f := &Fleet{opts: opts, rand: rand.New(src), closed: make(chan struct{})}
	f.conns.zero = sync.NewCond(&f.conns.mu)
	f.policies = make([]*Policy, n)
	for i := range f.policies {
		f.policies[i] = &Policy{fleet: f, index: i}
		f.policies[i].prefix.init(opts.PrefixCache, opts.PrefixSpeedup)
		f.policies[i].blocks.init(opts.KVTokens, opts.PrefillPerToken)
	}

	if !opts.PerPolicyListeners {
		base, err := f.listen(f.sharedHandler(), opts.Addr)
		if err != nil {
			return nil, errors.Join(err, f.Close())
		}
		for i, p := range f.policies {
			p.url = base + "/p/" + strconv.Itoa(i)
		}
		return f, nil
	}
	for i, p := range f.policies {
		base, err := f.listen(p.handler(), "")
		if err != nil {
			return nil, errors.Join(fmt.Errorf("policy %d: %w", i, err), f.Close())
		}
		p.url = base
	}
	return f, nil
}

// listen starts one server of h on addr, or a free port of Host when addr
// is empty, and returns its base URL.
func (f *Fleet) listen(h http.Handler, addr string) (string, error) {
	if addr == "" {
		addr = net.JoinHostPort(f.opts.Host, "0")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("fakepolicy: listen: %w", err)
	}
	errLog := log.New(io.Discard, "", 0)
	if f.opts.Logger != nil {
		errLog = slog.NewLogLogger(f.opts.Logger.Handler(), slog.LevelWarn)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ConnState:         f.conns.track,
		ErrorLog:          errLog,
	}
	f.servers = append(f.servers, srv)
	f.serving.Go(func() { _ = srv.Serve(ln) })
	return "http://" + ln.Addr().String(), nil
}

// sharedHandler serves every policy under /p/{n}/ on one listener.
func (f *Fleet) sharedHandler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern string, h func(*Policy, http.ResponseWriter, *http.Request)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			i, err := strconv.Atoi(r.PathValue("n"))
			if err != nil || i < 0 || i >= len(f.policies) {
				http.NotFound(w, r)
				return
			}
			h(f.policies[i], w, r)
		})
	}
	for _, rt := range routes(f.opts.Engine) {
		route(rt.method+" /p/{n}"+rt.path, rt.h)
	}
	return mux
}

// Len returns the number of policies.
func (f *Fleet) Len() int { return len(f.policies) }

// Policy returns policy i; it panics when i is out of range.
func (f *Fleet) Policy(i int) *Policy { return f.policies[i] }

// URL returns policy i's base URL, the one to register; it panics when i is
// out of range.
func (f *Fleet) URL(i int) string { return f.policies[i].url }

// URLs returns every policy's base URL in index order.
func (f *Fleet) URLs() []string {
	out := make([]string, len(f.policies))
	for i, p := range f.policies {
		out[i] = p.url
	}
	return out
}

// Probes returns the number of /idle requests the fleet has received.
func (f *Fleet) Probes() uint64 {
	var n uint64
	for _, p := range f.policies {
		n += p.probes.Load()
	}
	return n
}

// Conns returns the number of connections open now and the number accepted
// since the fleet started, over all its listeners: a client that reuses
// keep-alive connections opens few.
func (f *Fleet) Conns() (open int, accepted uint64) {
	f.conns.mu.Lock()
	defer f.conns.mu.Unlock()
	return f.conns.n, f.conns.total
}

// Close stops every server: listeners and connections close, hung and
// working handlers return, and Close returns once every server goroutine has
// exited. It may be called more than once; later calls return the first
// call's error.
func (f *Fleet) Close() error {
	f.closeOnce.Do(func() {
		// Connections close first, so that handlers woken below cannot answer
		// any more.
		var errs []error
		for _, srv := range f.servers {
			if err := srv.Close(); err != nil {
				errs = append(errs, fmt.Errorf("fakepolicy: close server: %w", err))
			}
		}
		close(f.closed)
		// Serve has returned for every server once serving is done, so every
		// accepted connection has been counted by then.
		f.serving.Wait()
		f.conns.wait()
		f.closeErr = errors.Join(errs...)
	})
	return f.closeErr
}

// maxGeneration caps a log-normal work duration.
const maxGeneration = time.Minute

// workDuration draws the duration of one work item.
func (f *Fleet) workDuration() time.Duration {
	f.randMu.Lock()
	defer f.randMu.Unlock()
	if f.opts.GenMedian > 0 {
		d := float64(f.opts.GenMedian) * math.Exp(f.opts.GenSigma*f.rand.NormFloat64())
		return time.Duration(min(d, float64(maxGeneration)))
	}
	span := int64(f.opts.MaxWork - f.opts.MinWork)
	return f.opts.MinWork + time.Duration(f.rand.Int64N(span+1))
}

// connTracker counts the servers' open connections, so that Close can wait
// for their goroutines.
type connTracker struct {
	mu    sync.Mutex
	n     int    // open
	total uint64 // accepted
	zero  *sync.Cond
}

// track is an http.Server ConnState hook.
func (c *connTracker) track(_ net.Conn, s http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch s {
	case http.StateNew:
		c.n++
		c.total++
	case http.StateClosed, http.StateHijacked:
		c.n--
		if c.n == 0 {
			c.zero.Broadcast()
		}
	}
}

// wait returns when no connection is open.
func (c *connTracker) wait() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.n > 0 {
		c.zero.Wait()
	}
}

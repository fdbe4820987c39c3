// Package benchkit is what policyrouter's two measuring commands share:
// policyrouter-bench (the router against the bare net/http floor, and the
// seed's algorithms against the Go core) and policyrouter-rollout (a
// simulated RL job through the router). It holds the router under test,
// in-process and wired as `policyrouter serve` wires it, over a fleet of
// simulated policies; the load client; the pprof labels that tell the
// sides apart; and the quantiles both report.
package benchkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/app"
	"github.com/policyrouter/policyrouter/client"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/metrics"
	"github.com/policyrouter/policyrouter/routing"
)

// Profile label values of the "side" key: every goroutine of the harness
// carries one, so `go tool pprof -tagfocus side=router` shows the router's
// HTTP serving alone.
const (
	SideRouter = "router" // the router's HTTP server and its handlers
	SidePoller = "poller" // the router's /idle poller
	SideFleet  = "fleet"  // the simulated policies answering /idle
	SideFloor  = "floor"  // the floor server
	SideClient = "client" // the load generator
)

// GoLabelled starts f in a goroutine labelled side=side; goroutines it
// starts inherit the label.
func GoLabelled(wg *sync.WaitGroup, side string, f func()) {
	pprof.Do(context.Background(), pprof.Labels("side", side), func(context.Context) {
		wg.Go(f)
	})
}

// NewLogger returns the router's logger: JSON to io.Discard at the given
// level, so that logging is paid for (at info, one line per request, as
// serve in production) but no terminal is.
func NewLogger(level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	return slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: lvl})), nil
}

// Config is one router under test.
type Config struct {
	Policies     int
	Nodes        int
	PollInterval time.Duration // 0: no poller
	LogLevel     string
	// Fleet configures the simulated policies; zero takes the defaults.
	Fleet fakepolicy.Options
	// Grace is the router's --grace; zero takes serve's default.
	Grace time.Duration
	// Envs, when above Policies, is the number of env workers in the
	// topology (env worker i on node i % nodes); otherwise there are as
	// many as policies.
	Envs int
	// Seed seeds the fleet's work durations; 0 keeps the fixed default.
	Seed uint64
}

// Router is the real router, in-process, wired as `policyrouter
// serve` wires it with its defaults (memory store, open on loopback, router
// "simple"), over a fleet of simulated policies.
type Router struct {
	API     *client.Client
	HTTP    *http.Client // the one API sends through
	State   *routing.State
	Metrics *metrics.Metrics

	Fleet   *fakepolicy.Fleet
	App     *app.App
	srv     *http.Server
	serving sync.WaitGroup

	pollMu   sync.Mutex
	pollStop context.CancelFunc
	polling  sync.WaitGroup
}

// Start starts the fleet and the router, registers the fleet's
// policies (index i on node "node-<i % nodes>", through the topology, with
// env worker i on the same node), starts the poller and, with one, waits
// until every policy has answered. Its API client sends through hc.
func Start(ctx context.Context, cfg Config, hc *http.Client) (_ *Router, err error) {
	logger, err := NewLogger(cfg.LogLevel)
	if err != nil {
		return nil, err
	}
	r := &Router{HTTP: hc}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	pprof.Do(ctx, pprof.Labels("side", SideFleet), func(context.Context) {
		src := rand.NewPCG(1, 2)
		if cfg.Seed != 0 {
			src = rand.NewPCG(cfg.Seed, cfg.Seed)
		}
		r.Fleet, err = fakepolicy.New(cfg.Policies, src, cfg.Fleet)
	})
	if err != nil {
		return nil, err
	}

	// The rest is serve's wiring, with serve's defaults.
	r.App, err = app.New(ctx, app.Config{PollInterval: cfg.PollInterval, Grace: cfg.Grace, Logger: logger})
	if err != nil {
		return nil, err
	}
	r.State, r.Metrics = r.App.State, r.App.Metrics
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r.srv = r.App.HTTPServer()
	GoLabelled(&r.serving, SideRouter, func() { _ = r.srv.Serve(ln) })
	r.API = client.New("http://"+ln.Addr().String(), hc)

	// Polling first: registration waits for the first probes of the new
	// policies, which get no work until they have answered.
	if cfg.PollInterval > 0 {
		r.StartPolling()
	}
	if err := r.register(ctx, cfg.Nodes, cfg.Envs, cfg.Fleet.Engine); err != nil {
		return nil, fmt.Errorf("register the fleet: %w", err)
	}
	if cfg.PollInterval > 0 {
		return r, r.waitReady(ctx)
	}
	return r, nil
}

// register puts the fleet and its topology through the router's own API,
// as a trainer does at start-up: policy i and env worker i on node
// i % nodes, with max(policies, envs) env workers, each policy registered
// with the fleet's engine ("" for the native /idle).
func (r *Router) register(ctx context.Context, nodes, envs int, engine string) error {
	var policies []api.PolicyRequest
	for i := range r.Fleet.Len() {
		policies = append(policies, api.PolicyRequest{URL: r.Fleet.URL(i), Index: &i, Engine: engine})
	}
	_, err := r.API.PutRegistration(ctx, policies, Topology(r.Fleet.Len(), envs, nodes))
	return err
}

// Topology places policy i and env worker i on node NodeName(i, nodes),
// for policies policies and max(policies, envs) env workers.
func Topology(policies, envs, nodes int) routing.Topology {
	topo := routing.Topology{}
	for i := range max(policies, envs) {
		node := NodeName(i, nodes)
		if topo[node] == nil {
			topo[node] = map[string][]int{}
		}
		topo[node][routing.KindEnv] = append(topo[node][routing.KindEnv], i)
		if i < policies {
			topo[node][routing.KindEval] = append(topo[node][routing.KindEval], i)
		}
	}
	return topo
}

// waitReady waits, up to 20 s, for the router's /readyz: the poller has
// heard from the policies, so none is unknown.
func (r *Router) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := r.API.Ready(ctx)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		if !SleepUntil(ctx, time.Now().Add(20*time.Millisecond)) {
			return ctx.Err()
		}
	}
}

// Handler is the router's whole handler chain, for in-process timing.
func (r *Router) Handler() http.Handler { return r.srv.Handler }

// NodeName is the node of policy i and env worker i.
func NodeName(i, nodes int) string { return "node-" + strconv.Itoa(i%nodes) }

// StartPolling runs the poller until StopPolling. The harness polls only
// while the router side runs, so that the floor side does not pay for it.
func (r *Router) StartPolling() {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	if r.pollStop != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.pollStop = cancel
	GoLabelled(&r.polling, SidePoller, func() { _ = r.App.Run(ctx) })
}

// StopPolling stops the poller and waits for it. The routing state keeps
// every policy's health and leases as they are.
func (r *Router) StopPolling() {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	if r.pollStop == nil {
		return
	}
	r.pollStop()
	r.polling.Wait()
	r.pollStop = nil
}

// Close stops the router as serve does on SIGTERM (end /select waits,
// drain, stop the poller) and then the fleet.
func (r *Router) Close() error {
	var errs []error
	if r.App != nil {
		r.App.Stop()
	}
	if r.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := r.srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("router shutdown: %w", err))
		}
		cancel()
		r.serving.Wait()
	}
	r.StopPolling()
	if r.App != nil {
		errs = append(errs, r.App.Close())
	}
	if r.Fleet != nil {
		errs = append(errs, r.Fleet.Close())
	}
	return errors.Join(errs...)
}

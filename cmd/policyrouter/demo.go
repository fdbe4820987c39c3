package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/app"
	"github.com/policyrouter/policyrouter/client"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/routing"
)

// demoConfig is `serve`'s configuration plus the simulation's.
type demoConfig struct {
	app.Config
	Policies int
	Workers  int
	MinWork  time.Duration
	MaxWork  time.Duration
	// Engine is the engine the simulated policies are: policyrouter (GET
	// /idle), sglang or vllm (their own wire formats, fakepolicy).
	Engine string
	// FleetAddr is the host:port the simulated policies listen on, one
	// listener for all (policy i at http://FleetAddr/p/i); empty takes a
	// free loopback port.
	FleetAddr string
}

// register registers serve's flags, with their defaults, and the
// simulation's.
func (c *demoConfig) register(fs *flag.FlagSet) {
	c.Config = app.DefaultConfig()
	c.Config.RegisterFlags(fs)
	fs.IntVar(&c.Policies, "policies", 8, "simulated policies, split over two nodes")
	fs.IntVar(&c.Workers, "workers", 6, "simulated env workers driving /select and /release (0 for none)")
	fs.DurationVar(&c.MinWork, "min-work", 200*time.Millisecond, "shortest simulated rollout step")
	fs.DurationVar(&c.MaxWork, "max-work", 1500*time.Millisecond, "longest simulated rollout step")
	fs.StringVar(&c.Engine, "engine", "policyrouter", "engine the simulated policies are: policyrouter (GET /idle), sglang or vllm (their own endpoints, registered with that engine)")
	fs.StringVar(&c.FleetAddr, "fleet-addr", "", "`host:port` the simulated policies listen on, one listener for all (policy i at http://HOST:PORT/p/i); empty: a free loopback port")
}

// demoCommand runs the router with simulated policies on two nodes, a
// topology, and simulated env workers, so that curl and the dashboard show
// real routing on a fresh machine with no other setup.
func demoCommand(ctx context.Context, args []string) error {
	var cfg demoConfig
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	cfg.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if cfg.Policies < 2 || cfg.Policies > 10000 {
		return fmt.Errorf("--policies must be between 2 and 10000, not %d", cfg.Policies)
	}
	if !engine.Is(cfg.Engine) {
		return fmt.Errorf("--engine must be %s, not %q", routing.NameList(engine.Names()), cfg.Engine)
	}
	if cfg.FleetAddr != "" {
		if _, _, err := net.SplitHostPort(cfg.FleetAddr); err != nil {
			return fmt.Errorf("--fleet-addr must be host:port, not %q: %w", cfg.FleetAddr, err)
		}
	}
	// The simulated workers send several requests a second: their request
	// lines show at --log-level debug only.
	cfg.RequestLogLevel = slog.LevelDebug
	fleet, err := fakepolicy.New(cfg.Policies, rand.NewPCG(uint64(time.Now().UnixNano()), 7), fakepolicy.Options{
		MinWork: cfg.MinWork, MaxWork: cfg.MaxWork, PrefixCache: 8, Engine: cfg.Engine, Addr: cfg.FleetAddr,
	})
	if err != nil {
		if cfg.FleetAddr != "" {
			return fmt.Errorf("--fleet-addr %s: %w", cfg.FleetAddr, err)
		}
		return err
	}
	defer fleet.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a, ln, err := startApp(ctx, cfg.Config)
	if err != nil {
		return err
	}
	logger, addr := a.Config.Logger, ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()
	base := "http://" + addr
	c := client.New(base, demoClient)
	if err := demoSetup(ctx, c, fleet, cfg.Engine); err != nil {
		cancel()
		return errors.Join(fmt.Errorf("demo setup: %w", err), <-served)
	}
	logger.Info("demo ready", "policies", cfg.Policies, "workers", cfg.Workers, "engine", cfg.Engine, "addr", addr)
	fmt.Fprintf(os.Stderr, `
policyrouter demo: %[1]d simulated %[4]s policies on node-a and node-b, %[2]d simulated env workers.
  policies   %[6]s … %[7]s
  dashboard  %[3]s/
  stats      curl -s %[3]s/stats
  select     curl -s -XPOST %[3]s/select -H 'Content-Type: application/json' -d '{"env_id": "env-0"}'
  assign     curl -s -XPOST %[3]s/assign -H 'Content-Type: application/json' -d '{"num_tasks": 4}'
  update     %[5]s
Requests are logged at --log-level debug; Ctrl-C stops.

`, cfg.Policies, cfg.Workers, base, cfg.Engine, demoUpdateHint(base, cfg.Engine), fleet.URL(0), fleet.URL(fleet.Len()-1))

	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Go(func() { demoWorker(ctx, c, w, cfg.Policies, logger) })
	}
	err = <-served
	cancel()
	wg.Wait()
	return err
}

// demoUpdateHint is the curl that rolls new weights through the demo's
// policies: from disk for SGLang, external mode for vLLM (the trainer
// says done), the simulated update endpoint for policyrouter's.
func demoUpdateHint(base, eng string) string {
	switch eng {
	case engine.SGLang:
		return `curl -s -XPOST ` + base + `/updates -H 'Content-Type: application/json' -d '{"version": 1, "model_path": "/ckpt/step-1", "max_unavailable": 2}'`
	case engine.VLLM:
		return `curl -s -XPOST ` + base + `/updates -H 'Content-Type: application/json' -d '{"version": 1, "max_unavailable": 2}'  (then POST /updates/{id}/done with its "ready" ids)`
	}
	return `curl -s -XPOST ` + base + `/updates -H 'Content-Type: application/json' -d '{"version": 1, "action": {"path": "/update_weights_from_disk", "body": {"version": 1}}}'`
}

// demoSetup registers the fleet with its engine, the first half on node-a
// and the rest on node-b, and a topology with as many env workers as
// policies, in one call: affinity routing never runs without its topology.
func demoSetup(ctx context.Context, c *client.Client, fleet *fakepolicy.Fleet, engine string) error {
	n := fleet.Len()
	var policies []api.PolicyRequest
	topo := routing.Topology{"node-a": {}, "node-b": {}}
	var envA, envB, evalA, evalB []int
	for i := range n {
		policies = append(policies, api.PolicyRequest{URL: fleet.URL(i), Index: new(i), Engine: engine})
		if i < n/2 {
			evalA, envA = append(evalA, i), append(envA, i)
		} else {
			evalB, envB = append(evalB, i), append(envB, i)
		}
	}
	topo["node-a"][routing.KindEnv], topo["node-a"][routing.KindEval] = envA, evalA
	topo["node-b"][routing.KindEnv], topo["node-b"][routing.KindEval] = envB, evalB
	_, err := c.PutRegistration(ctx, policies, topo)
	return err
}

// demoWorker is one simulated env worker: select a policy (preferring its
// node) for the current trajectory's turn, run the turn on it, release it,
// and now and then send an async batch through /assign and /complete. A
// trajectory has 4 turns; its id is the session, so that the turns find
// their prefix in the policy's (simulated) cache. Every other worker sends
// its turns through the router's proxy mode instead (POST /generate with
// X-Session-ID and X-Env-ID), which selects and releases for it.
func demoWorker(ctx context.Context, c *client.Client, w, nEnv int, logger *slog.Logger) {
	env := "env-" + strconv.Itoa(w%nEnv)
	proxied := w%2 == 1
	for step := 0; ctx.Err() == nil; step++ {
		traj := env + "-traj-" + strconv.Itoa(step/4)
		if proxied {
			if err := demoProxied(ctx, c.BaseURL(), env, traj); err != nil && ctx.Err() == nil {
				logger.Debug("demo worker: proxied generate", "env_id", env, "err", err)
				sleepCtx(ctx, 200*time.Millisecond)
			}
			continue
		}
		sel, err := c.Select(ctx, api.SelectRequest{EnvID: env, Router: "idle_affinity", SessionID: traj})
		if err != nil {
			if ctx.Err() == nil {
				logger.Debug("demo worker: select", "env_id", env, "err", err)
				sleepCtx(ctx, 200*time.Millisecond)
			}
			continue
		}
		// The turn goes to the policy itself, a JSON server too.
		turn := []byte(`{"session_id": "` + traj + `"}`)
		if err := client.New(sel.URL, demoClient).Do(ctx, http.MethodPost, "/generate", turn, nil); err != nil && ctx.Err() == nil {
			logger.Debug("demo worker: generate", "url", sel.URL, "err", err)
		}
		// The context may be done: release anyway so nothing stays leased.
		relCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = c.Release(relCtx, sel.LeaseID)
		cancel()
		if step%5 == 4 {
			if a, err := c.Assign(ctx, api.AssignRequest{NumTasks: new(4)}); err == nil {
				for _, idx := range a.Assignments {
					_, _ = c.Complete(ctx, api.CompleteRequest{Index: new(idx)})
				}
			}
		}
	}
}

// demoProxied runs one turn through proxy mode. It is proxy traffic, not
// the control API, and the session, env and router travel in headers,
// which the shared client does not send: a plain request.
func demoProxied(ctx context.Context, base, env, traj string) error {
	body := `{"text": "turn", "session_id": "` + traj + `", "sampling_params": {"max_new_tokens": 16}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/generate", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", traj)
	req.Header.Set("X-Env-ID", env)
	req.Header.Set("X-Router", "idle_affinity")
	resp, err := demoClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST /generate: %d", resp.StatusCode)
	}
	return nil
}

// demoClient carries every request of the simulated workers.
var demoClient = &http.Client{Timeout: 30 * time.Second}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

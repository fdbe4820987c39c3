package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/policyrouter/policyrouter/internal/benchkit"
)

// report is everything one run measured.
type report struct {
	Machine  benchkit.Machine
	Config   config
	Upstream string // what answered as the policies
	Binary   string // the router side's policyrouter
	Notes    []string
	Sides    []sideResult
	Elapsed  time.Duration
}

// phase is one side's measured window in one round.
type phase struct {
	Requests    int64
	Failed      int64
	Seconds     float64
	ProxyCPU    time.Duration // 0 for direct
	UpstreamCPU time.Duration
	// P99 is the 99th percentile of the answers' latency (from the
	// request's write to its answer's end) over the window.
	P99 time.Duration
}

func (p phase) throughput() float64 { return float64(p.Requests) / p.Seconds }

// cpuPerRequest is CPU µs per request of d over the phase.
func (p phase) cpuPerRequest(d time.Duration) float64 {
	if p.Requests == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(p.Requests)
}

// sideResult is one side's phases, one per round.
type sideResult struct {
	Name       string
	Phases     []phase
	FirstError string
}

// side is a running proxy (or none, for direct) and the addresses the
// load generator connects to.
type side struct {
	name  string
	proxy *child // nil for direct
	addrs []string
}

// runHarness starts the upstream and the proxies of cfg, runs the rounds
// and returns the report; progress goes to progress.
func runHarness(ctx context.Context, cfg config, progress io.Writer) (*report, error) {
	start := time.Now()
	rep := &report{Machine: benchkit.ReadMachine(), Config: cfg}
	dir, err := os.MkdirTemp("", "policyrouter-proxybench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	nginx := findNginx(cfg.Nginx)
	if nginx == "" {
		rep.Notes = append(rep.Notes, "no nginx binary (-nginx "+cfg.Nginx+"): the nginx side is skipped and the upstream is the Go server; on Debian: apt-get install nginx-light")
		cfg.Sides = removeSide(cfg.Sides, sideNginx)
	}
	var up *child
	var policies []string
	if cfg.Upstream == "nginx" || cfg.Upstream == "auto" && nginx != "" {
		if nginx == "" {
			return nil, fmt.Errorf("-upstream nginx: no nginx binary")
		}
		rep.Upstream = "nginx (" + nginx + "), fixed JSON from `return 200`"
		up, policies, err = nginxUpstream(ctx, nginx, dir, cfg.Workload, cfg.Policies)
	} else {
		rep.Upstream = "Go net/http server, fixed JSON"
		up, policies, err = goUpstream(dir, cfg.Workload, cfg.Policies)
		if err == nil {
			err = up.waitHTTP(ctx, policies[0]+"/idle")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	defer up.stop()

	var sides []*side
	defer func() {
		for _, s := range sides {
			if s.proxy != nil {
				s.proxy.stop()
			}
		}
	}()
	hostPorts := func(urls ...string) []string {
		var out []string
		for _, u := range urls {
			out = append(out, strings.TrimPrefix(u, "http://"))
		}
		return out
	}
	for _, name := range cfg.Sides {
		s := &side{name: name}
		var base string
		switch name {
		case sideDirect:
			s.addrs = hostPorts(policies...)
		case sideNginx:
			s.proxy, base, err = nginxProxy(ctx, nginx, dir, policies, cfg.Connections)
		case sideBare:
			s.proxy, base, err = startBare(ctx, dir, policies)
		case sideBase:
			s.proxy, base, err = startRouter(ctx, "base", cfg.BaseBinary, "", dir, cfg.ServeArgs, policies, cfg.Capacity)
		case sideBase2:
			s.proxy, base, err = startRouter(ctx, "base2", cfg.Base2Binary, "", dir, cfg.ServeArgs, policies, cfg.Capacity)
		case sideRouter:
			bin := cfg.Binary
			switch {
			case cfg.Profile != "":
				bin = ""
				rep.Binary = "this tree's router, in this binary, under a CPU profile (" + cfg.Profile + ")"
			case bin == "":
				fmt.Fprintln(progress, "policyrouter-proxybench: building ./cmd/policyrouter")
				if bin, err = buildRouter(ctx, dir); err != nil {
					return nil, err
				}
				rep.Binary = "./cmd/policyrouter of this tree"
			default:
				rep.Binary = bin
			}
			if err == nil {
				s.proxy, base, err = startRouter(ctx, "router", bin, cfg.Profile, dir, cfg.ServeArgs, policies, cfg.Capacity)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if base != "" {
			s.addrs = hostPorts(base)
		}
		sides = append(sides, s)
		rep.Sides = append(rep.Sides, sideResult{Name: name})
	}

	fmt.Fprintf(progress, "policyrouter-proxybench: %d rounds x %d sides x (%s + %s warm-up), %d connections, %d policies of capacity %d\n",
		cfg.Rounds, len(sides), cfg.Duration, cfg.Warmup, cfg.Connections, cfg.Policies, cfg.Capacity)
	for r := range cfg.Rounds {
		for _, i := range roundOrder(len(sides), r) {
			s := sides[i]
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			p, first, err := runPhase(ctx, cfg, s, up)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", r+1, s.name, err)
			}
			res := &rep.Sides[i]
			res.Phases = append(res.Phases, p)
			if res.FirstError == "" {
				res.FirstError = first
			}
			fmt.Fprintf(progress, "  round %d %-7s %8.0f req/s  proxy %6.1f CPU µs/req  upstream %6.1f CPU µs/req\n",
				r+1, s.name, p.throughput(), p.cpuPerRequest(p.ProxyCPU), p.cpuPerRequest(p.UpstreamCPU))
		}
	}
	rep.Machine.LoadEnd = benchkit.LoadAvg()
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// roundOrder is the order the sides run in round r: as given, and
// reversed in every other round, so that over an even number of rounds
// each side runs as often before another as after it (on a machine whose
// load drifts, the order favours one side: BENCHMARKS.md).
func roundOrder(n, r int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
		if r%2 == 1 {
			order[i] = n - 1 - i
		}
	}
	return order
}

// runPhase drives side s for the warm-up and then the measured window,
// and reads the CPU its proxy and the upstream used over the window.
func runPhase(ctx context.Context, cfg config, s *side, up *child) (phase, string, error) {
	wl := workloads[cfg.Workload]
	l := startLoad(s.addrs, cfg.Connections, wl)
	defer l.stop()
	if !benchkit.SleepUntil(ctx, time.Now().Add(cfg.Warmup)) {
		return phase{}, "", ctx.Err()
	}
	type mark struct {
		at            time.Time
		ok, failed    int64
		proxy, upstrm time.Duration
	}
	read := func() (m mark, err error) {
		m.at, m.ok, m.failed = time.Now(), l.ok.Load(), l.failed.Load()
		if s.proxy != nil {
			if m.proxy, err = s.proxy.cpu(); err != nil {
				return m, err
			}
		}
		m.upstrm, err = up.cpu()
		return m, err
	}
	l.measuring.Store(true)
	m0, err := read()
	if err != nil {
		return phase{}, "", err
	}
	if !benchkit.SleepUntil(ctx, m0.at.Add(cfg.Duration)) {
		return phase{}, "", ctx.Err()
	}
	m1, err := read()
	l.measuring.Store(false)
	if err != nil {
		return phase{}, "", err
	}
	var first string
	if p := l.first.Load(); p != nil {
		first = *p
	}
	return phase{
		Requests:    m1.ok - m0.ok,
		Failed:      m1.failed - m0.failed,
		Seconds:     m1.at.Sub(m0.at).Seconds(),
		ProxyCPU:    m1.proxy - m0.proxy,
		UpstreamCPU: m1.upstrm - m0.upstrm,
		P99:         l.latency.quantile(0.99),
	}, first, nil
}

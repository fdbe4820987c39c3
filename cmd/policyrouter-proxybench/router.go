package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/app"
	"github.com/policyrouter/policyrouter/client"
)

// startRouter runs `bin serve` on a free loopback port (bin "" runs this
// binary's own router, as serve wires it, writing a CPU profile to
// profile), registers the policies with capacity each, and waits until
// every one is idle. It returns the child and the router's base URL.
func startRouter(ctx context.Context, name, bin, profile, dir string, extra []string, policies []string, capacity int) (*child, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	args := append([]string{"-addr", "127.0.0.1:" + strconv.Itoa(port), "-log-format", "json"}, extra...)
	var cmd *exec.Cmd
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, "", err
		}
		cmd = exec.Command(self, append([]string{"-cpuprofile", profile, "--"}, args...)...)
		cmd.Env = append(os.Environ(), childEnv+"=serve")
	} else {
		cmd = exec.Command(bin, append([]string{"serve"}, args...)...)
	}
	c, err := startChild(name, dir, cmd)
	if err != nil {
		return nil, "", err
	}
	if err := c.waitHTTP(ctx, base+"/healthz"); err != nil {
		c.stop()
		return nil, "", err
	}
	if err := register(ctx, base, policies, capacity); err != nil {
		c.stop()
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	return c, base, nil
}

// register puts the policies (index i at policies[i], serving the
// benchmark's model) and waits until the poller has seen each idle.
func register(ctx context.Context, base string, policies []string, capacity int) error {
	cl := client.New(base, nil)
	var reqs []api.PolicyRequest
	for i, u := range policies {
		reqs = append(reqs, api.PolicyRequest{URL: u, Index: &i, Capacity: &capacity, Models: []string{modelName}})
	}
	body, err := json.Marshal(map[string]any{"policies": reqs})
	if err != nil {
		return err
	}
	if err := cl.Do(ctx, "PUT", "/policies", body, nil); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		list, err := cl.Policies(ctx)
		if err != nil {
			return err
		}
		idle := 0
		for _, p := range list.Policies {
			if p.State == "idle" {
				idle++
			}
		}
		if idle == len(policies) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d policies idle after 30s", idle, len(policies))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// serveProfiled is the child that runs this tree's router as `policyrouter
// serve` does (serve.go: app.DefaultConfig, its flags, app.New, Listen,
// Serve) under a CPU profile written to the file of -cpuprofile when
// SIGTERM ends it, and its allocations to FILE.allocs. Its arguments are
// -cpuprofile FILE -- serve's flags.
func serveProfiled(args []string) error {
	fs := flag.NewFlagSet("serve-profiled", flag.ContinueOnError)
	profile := fs.String("cpuprofile", "", "write a CPU profile to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := app.DefaultConfig()
	sfs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.RegisterFlags(sfs)
	if err := sfs.Parse(fs.Args()); err != nil {
		return err
	}
	if *profile == "" {
		return errors.New("serve-profiled: -cpuprofile is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	uuid.EnableRandPool()
	a, err := app.New(ctx, cfg)
	if err != nil {
		return err
	}
	ln, err := a.Listen()
	if err != nil {
		_ = a.Close()
		return err
	}
	f, err := os.Create(*profile)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	defer pprof.StopCPUProfile()
	if err := a.Serve(ctx, ln); err != nil {
		return err
	}
	af, err := os.Create(*profile + ".allocs")
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(af, 0); err != nil {
		_ = af.Close()
		return err
	}
	return af.Close()
}

package main

import (
	"context"
	"flag"
	"net"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/google/uuid"

	"github.com/policyrouter/policyrouter/app"
)

// defaultGCPercent is serve's GOGC when neither --gc-percent nor GOGC
// says otherwise. Go's 100 collects each time the heap doubles; a
// proxying router allocates per request and keeps little, so it spent a
// fifth of its CPU collecting: at 400 the heap grows to five times what
// is live between collections (BENCHMARKS.md: CPU per proxied request).
const defaultGCPercent = 400

func serveCommand(ctx context.Context, args []string) error {
	cfg := app.DefaultConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	gcPercent := fs.Int("gc-percent", 0, "the garbage collector's heap growth between collections, in percent, as GOGC: higher spends memory to save CPU; 0 is GOGC when set, else "+strconv.Itoa(defaultGCPercent)+"; negative turns collection off")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *gcPercent != 0:
		debug.SetGCPercent(*gcPercent)
	case os.Getenv("GOGC") == "":
		debug.SetGCPercent(defaultGCPercent)
	}
	return serve(ctx, cfg, nil)
}

// serve runs the router until ctx is done, then drains in-flight requests
// and stops background work. When listening is non-nil it receives the
// bound address once the server accepts connections.
func serve(ctx context.Context, cfg app.Config, listening chan<- string) error {
	a, ln, err := startApp(ctx, cfg)
	if err != nil {
		return err
	}
	if listening != nil {
		listening <- ln.Addr().String()
	}
	if err := a.Serve(ctx, ln); err != nil {
		return err
	}
	a.Config.Logger.Info("stopped")
	return nil
}

// startApp builds the router from cfg (app.New validates it) and binds
// its address; Serve takes it from there.
func startApp(ctx context.Context, cfg app.Config) (*app.App, net.Listener, error) {
	// Request ids are UUIDs: draw their randomness in batches.
	uuid.EnableRandPool()
	a, err := app.New(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	ln, err := a.Listen()
	if err != nil {
		_ = a.Close()
		return nil, nil, err
	}
	return a, ln, nil
}

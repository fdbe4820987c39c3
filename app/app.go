// Package app builds a whole policyrouter from one Config: store, registry,
// routing state, poller, metrics and HTTP handlers. The serve and demo
// commands, the benchmark harness and the end-to-end tests all build the
// router here, so that what is tested and measured is what runs.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmittmann/tint"

	"github.com/policyrouter/policyrouter"
	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/auth"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fleet"
	"github.com/policyrouter/policyrouter/handlers"
	"github.com/policyrouter/policyrouter/internal/logbuf"
	"github.com/policyrouter/policyrouter/metrics"
	"github.com/policyrouter/policyrouter/poller"
	"github.com/policyrouter/policyrouter/proxy"
	"github.com/policyrouter/policyrouter/registry"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
	"github.com/policyrouter/policyrouter/updates"
)

// App is one router: its parts are exported for the commands and tests
// that need to reach them.
type App struct {
	Config   Config
	Store    store.Store
	State    *routing.State
	Registry *registry.Registry
	// Poller is nil when PollInterval is 0.
	Poller  *poller.Poller
	Metrics *metrics.Metrics
	// Updates runs rolling weight updates.
	Updates *updates.Manager
	Server  *handlers.Server
	// TLS is the listener's TLS configuration; nil serves plain HTTP.
	TLS *tls.Config

	ready atomic.Bool // the first probe round (of this term) has been answered
	// etcd is the store when it is shared by replicas; nil otherwise.
	etcd *store.Etcd
	// logs holds the access log's lines when New made the logger; nil
	// otherwise. Close flushes it.
	logs    *logbuf.Writer
	leading atomic.Bool            // this replica is the elected leader
	leader  atomic.Pointer[string] // the leader's advertised URL; "" none known
	// storeCheck is the last check of the store by electable.
	storeCheck storeCheck
}

// The store kinds of Config.Store.
const (
	StoreMemory = "memory"
	StoreBolt   = "bolt"
	StoreEtcd   = "etcd"
)

// New builds a router from cfg, after Validate, and restores its
// registration from the store. It starts nothing: Listen binds Addr and
// Serve (or Run) starts the work. Close releases the store.
func New(ctx context.Context, cfg Config) (_ *App, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var logs *logbuf.Writer
	var accessLogger *slog.Logger
	if cfg.Logger == nil {
		// The access log's ordinary lines are held up to
		// logbuf.DefaultInterval and written together (one write for many
		// requests); every other line goes out at once, after them.
		logs = logbuf.New(os.Stderr, 0, 0)
		format := logFormat(os.Stderr, cfg.LogFormat)
		cfg.Logger = newLogger(logs, format, cfg.LogLevel)
		accessLogger = newLogger(logs.Buffered(), format, cfg.LogLevel)
	}
	if cfg.ProxyNetHTTP {
		cfg.Logger.Warn("--proxy-net-http changes nothing and will be removed: net/http serves every request, proxied ones included")
	}
	if cfg.Auth, err = cfg.Verifier(); err != nil {
		return nil, err
	}
	cfg.Store = cfg.storeKind()
	a := &App{Config: cfg, logs: logs}
	if a.TLS, err = serverTLS(cfg); err != nil {
		return nil, err
	}
	ptls, err := policyTLS(cfg)
	if err != nil {
		return nil, err
	}
	peers, err := peerTLS(cfg)
	if err != nil {
		return nil, err
	}
	a.Store, err = openStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	a.etcd, _ = a.Store.(*store.Etcd)
	defer func() {
		if err != nil {
			_ = a.Store.Close()
		}
	}()

	a.State = routing.New(routing.Options{
		Grace:         cfg.Grace,
		FailThreshold: cfg.FailThreshold,
		PassThreshold: cfg.PassThreshold,
		Polled:        cfg.PollInterval > 0,
		LeaseTTL:      cfg.LeaseTTL,
		AssignTTL:     cfg.AssignTTL,
		MaxWaiters:    cfg.MaxWaiters,
		LoadFactor:    cfg.StickyLoadFactor,
		Serves:        engine.Serves,
		// Each policy's budget in the prefix index, when its engine
		// reports no KV size.
		PrefixIndexTokens: cfg.PrefixIndexTokens,
	})
	// The store is read once: the registration for the registry, the
	// rolling updates' documents for the update manager.
	loadStart := time.Now()
	stored, err := a.Store.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("registry: load: %w", err)
	}
	a.Registry, err = registry.OpenLoaded(a.Store, a.State, stored)
	if err != nil {
		return nil, err
	}
	a.Registry.SetDefaultEngine(cfg.DefaultEngine)
	cfg.Logger.Info("registration restored", "policies", len(a.State.Snapshot().Policies()),
		"store", a.Config.Store, "duration", time.Since(loadStart))
	a.Registry.WarnSharedServers(cfg.Logger)

	a.Metrics = metrics.New(a.State)
	hcfg := handlers.Config{
		Registry:          a.Registry,
		State:             a.State,
		Logger:            cfg.Logger,
		DefaultRouter:     cfg.Router,
		MaxSelectWait:     cfg.MaxSelectWait,
		DefaultStickyWait: cfg.StickyWait,
		RequestLogLevel:   cfg.RequestLogLevel,
		NoAccessLog:       cfg.NoAccessLog,
		AccessLogger:      accessLogger,
		Ready:             a.readiness,
		Metrics:           a.Metrics,
		Auth:              cfg.Auth,
		OpenAPI:           policyrouter.OpenAPI,
		PeerTLS:           peers,
		Proxy: proxy.Options{
			Retries: cfg.ProxyRetries,
			Timeout: cfg.ProxyTimeout,
			MaxBody: cfg.ProxyMaxBody,
			Resume:  cfg.ProxyResume,
			// Every replica hashes its own requests' prompts.
			PrefixAffinity: cfg.PrefixAffinity,
			Transport:      proxy.NewTransport(ptls),
		},
	}
	if a.etcd != nil {
		hcfg.Leader, hcfg.Election, hcfg.MaxLeaderWaiters = a.Leader, a.electable, cfg.MaxWaiters
		if hcfg.Replica, err = a.replicaConfig(); err != nil {
			return nil, err
		}
	} else {
		a.Metrics.SetLeader(true)
	}
	if cfg.PollInterval > 0 {
		m := a.Metrics
		a.Poller = poller.New(a.State, poller.Config{
			Interval: cfg.PollInterval,
			Timeout:  cfg.PollTimeout,
			Client:   cfg.PollClient,
			// TLS towards https:// policies; the poller keeps its transport.
			TLSClientConfig: ptls,
			Logger:          cfg.Logger,
			OnProbe: func(id string, p routing.Probe, tr routing.Transition) {
				m.ObserveProbe(p, tr)
				a.Server.ObserveProbe(id, p) // set before the poller runs
			},
		})
		hcfg.Poller = a.Poller
		hcfg.EngineCapacity = a.Poller.EngineCapacity
	} else {
		a.ready.Store(true)
	}
	// One refit lock for the fleet verbs and the updates.
	hcfg.FleetLocks = &fleet.Locks{}
	a.Updates, err = updates.New(updates.Config{
		Registry: a.Registry, State: a.State, Store: a.Store, Logger: cfg.Logger,
		OnChange: a.Metrics.ObserveUpdate,
		Ready:    func() bool { return a.Ready() == nil },
		Locks:    hcfg.FleetLocks,
	}, stored.Updates)
	if err != nil {
		return nil, err
	}
	hcfg.Updates = a.Updates
	a.Server = handlers.New(hcfg)
	return a, nil
}

// openStore opens the store cfg names.
func openStore(ctx context.Context, cfg Config) (store.Store, error) {
	switch cfg.Store {
	case StoreBolt:
		st, err := store.OpenBolt(cfg.DataDir, store.BoltOptions{})
		if err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		return st, nil
	case StoreEtcd:
		tc, err := etcdTLS(cfg)
		if err != nil {
			return nil, err
		}
		return store.OpenEtcd(ctx, store.EtcdOptions{Endpoints: cfg.EtcdEndpoints, Prefix: cfg.EtcdPrefix, TLS: tc, Logger: cfg.Logger})
	default:
		return store.NewMemory(), nil
	}
}

// logFormat resolves the log format auto for the file f: text on a
// terminal, else json. Other formats are as they are.
func logFormat(f *os.File, format string) string {
	if format != "auto" {
		return format
	}
	if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		return "text"
	}
	return "json"
}

// newLogger returns a logger of the given format (text or json, as
// logFormat resolves it) and level, which Validate has checked.
func newLogger(w io.Writer, format, level string) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(level))
	if format == "text" {
		return slog.New(tint.NewTextHandler(w, &tint.Options{Level: lvl, TimeFormat: time.TimeOnly}))
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl}))
}

// Listen binds Config.Addr and logs it. When AdvertiseURL is empty it
// becomes the URL of the bound address: its host, or this machine's name
// when it listens on every interface. Call it before Serve.
func (a *App) Listen() (net.Listener, error) {
	c := &a.Config
	if c.Addr == "" {
		return nil, errors.New("listen: no address (--addr)")
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", c.Addr, err)
	}
	if c.AdvertiseURL == "" {
		c.AdvertiseURL = advertiseURL(ln.Addr(), a.TLS != nil)
	}
	if !auth.IsLoopbackAddr(c.Addr) {
		if c.Auth == nil {
			c.Logger.Warn("serving WITHOUT authentication on a non-loopback address (--insecure)", "addr", c.Addr)
		}
		if a.TLS == nil {
			c.Logger.Info("serving plain HTTP on a non-loopback address: TLS is left to the proxy in front (--behind-tls-proxy)", "addr", c.Addr)
		}
	}
	c.Logger.Info("policyrouter listening", "addr", ln.Addr().String(), "router", c.Router, "auth", c.Auth != nil,
		"tls", a.TLS != nil, "mtls", c.TLSClientCA != "", "store", c.Store, "advertise_url", c.AdvertiseURL)
	return ln, nil
}

// advertiseURL is the URL of the bound address addr.
func advertiseURL(addr net.Addr, https bool) string {
	scheme := "http"
	if https {
		scheme = "https"
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return scheme + "://" + addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil {
			host = name
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// Handler returns the HTTP API.
func (a *App) Handler() http.Handler { return a.Server.Handler() }

// Run runs the background work (the poller and the rolling updates)
// until ctx is done, and returns when it has stopped. On an etcd store it
// also follows the registration other replicas write and campaigns for
// leadership, and runs the poller and the updates only while it leads.
func (a *App) Run(ctx context.Context) error {
	if a.Poller == nil {
		a.Config.Logger.Warn("polling disabled (poll interval 0): no health checks, policies are trusted idle and freed only by /release or lease expiry")
	}
	if a.etcd != nil {
		if a.Config.AdvertiseURL == "" {
			return errors.New("a replica on etcd needs its advertise URL: set AdvertiseURL, or Listen first")
		}
		return a.runReplica(ctx)
	}
	a.runTerm(ctx)
	return nil
}

// runTerm runs the poller and the rolling updates until ctx is done.
func (a *App) runTerm(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { _ = a.Updates.Run(ctx) })
	if a.Poller == nil {
		<-ctx.Done()
		return
	}
	if err := a.Poller.Run(ctx); err != nil {
		a.Config.Logger.Error("poller stopped", "err", err)
	}
}

// Ready reports whether the router routes: once every policy it started
// with has had its first probe answered or timed out (the poller probes
// them all at once at start), and from then on. It says why not.
func (a *App) Ready() error {
	if leading, leader := a.Leader(); !leading {
		return fmt.Errorf("a follower: the leader is %q", leader)
	}
	if a.ready.Load() {
		return nil
	}
	if n, total := a.State.Unprobed(); n > 0 {
		return fmt.Errorf("waiting for the first probe of %d of %d policies", n, total)
	}
	a.ready.Store(true)
	return nil
}

// storePingTimeout bounds the store check of /readyz.
const storePingTimeout = time.Second

// readiness is the router's part of /readyz, which adds that a policy
// must be available: Ready, and on etcd that the store answers (a leader
// cut off from etcd loses its term within the leader ttl; until then it
// is not ready either).
func (a *App) readiness() error {
	if err := a.Ready(); err != nil {
		return err
	}
	if a.etcd == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), storePingTimeout)
	defer cancel()
	if err := a.etcd.Ping(ctx); err != nil {
		return &handlers.Error{Code: api.CodeStoreDown, Message: "not ready: the store (etcd) does not answer: " + err.Error()}
	}
	return nil
}

// Stop ends the waits of /select calls (they answer 503) so that a
// graceful shutdown does not wait for them. Call it when shutdown begins.
func (a *App) Stop() { a.Server.Stop() }

// Close releases the store and writes out the access log lines still
// held. Call it after Run has returned.
func (a *App) Close() error {
	err := a.Store.Close()
	if a.logs != nil {
		_ = a.logs.Flush()
	}
	return err
}

// HTTPServer returns the router's HTTP server, with its timeouts and
// limits set: a slow-header client is cut off after ReadHeaderTimeout.
// Its TLSConfig is App.TLS: serve it with ServeTLS(ln, "", "") when that
// is set.
func (a *App) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           a.Handler(),
		TLSConfig:         a.TLS,
		ReadHeaderTimeout: a.Config.ReadHeaderTimeout,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      a.Config.MaxSelectWait + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(a.Config.Logger.Handler(), slog.LevelWarn),
	}
}

// Serve serves the router on ln (over TLS when App.TLS is set), with its
// background work, until ctx is
// done; then it ends /select waits, drains in-flight requests (for at most
// 10 seconds), stops the background work and closes the store. It is what
// `policyrouter serve` runs.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	srv := a.HTTPServer()
	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := a.Run(bg); err != nil {
			a.Config.Logger.Error("background work stopped", "err", err)
		}
	})
	defer func() {
		stopBG()
		wg.Wait()
		if err := a.Close(); err != nil {
			a.Config.Logger.Error("close store", "err", err)
		}
	}()

	serveErr := make(chan error, 1)
	if srv.TLSConfig != nil {
		// The certificate comes from TLSConfig.GetCertificate.
		go func() { serveErr <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { serveErr <- srv.Serve(ln) }()
	}
	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	a.Config.Logger.Info("shutting down: draining in-flight requests")
	a.Stop()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	<-serveErr
	a.Server.CloseIdleConnections()
	return nil
}

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
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/policyrouter/policyrouter"
	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/auth"
	"github.com/policyrouter/policyrouter/handlers"
	"github.com/policyrouter/policyrouter/metrics"
	"github.com/policyrouter/policyrouter/poller"
	"github.com/policyrouter/policyrouter/registry"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
	"github.com/policyrouter/policyrouter/updates"
)

// Config is everything a router is built from. Zero fields take the
// defaults of `policyrouter serve`.
type Config struct {
	// Router is the default router of requests that name none: a name of
	// routing.DefaultRouterNames. Default api.RouterSimple.
	Router string
	// PollInterval is the period of each policy's /idle probe; 0 runs no
	// poller, and policies are then trusted idle from registration.
	PollInterval time.Duration
	// PollTimeout bounds one probe. Default poller.DefaultTimeout.
	PollTimeout time.Duration
	// PollClient, when set, sends the probes; the Policy* TLS settings must
	// then be empty.
	PollClient *http.Client
	// PolicyCA is a PEM file of CA certificates trusted, besides the
	// system's, for https:// policies. PolicyClientCert and PolicyClientKey
	// are PEM files of the client certificate presented to policies that
	// require one (mutual TLS); they are read again when they change.
	PolicyCA         string
	PolicyClientCert string
	PolicyClientKey  string
	// TLSCert and TLSKey are PEM files of the router's certificate and key:
	// when set it serves HTTPS (TLS 1.2 or later, HTTP/2), and reads them
	// again when they change on disk. TLSClientCA, a PEM file of CA
	// certificates, makes it require client certificates signed by them.
	TLSCert     string
	TLSKey      string
	TLSClientCA string
	// ReadHeaderTimeout cuts off a client that has not sent its request
	// headers in that time. Default 5 seconds.
	ReadHeaderTimeout time.Duration
	// Grace, FailThreshold and PassThreshold configure the routing state
	// (routing.Options).
	Grace         time.Duration
	FailThreshold int
	PassThreshold int
	// LeaseTTL is the lifetime of a lease whose /select names none; 0 means
	// leases do not expire.
	LeaseTTL time.Duration
	// MaxWaiters bounds the /select calls waiting at once; one more is
	// answered 503 overloaded. Default routing.DefaultMaxWaiters.
	MaxWaiters int
	// StickyLoadFactor is c of the sticky stage's load bound for requests
	// that name no load_factor; 0 means routing.DefaultLoadFactor.
	StickyLoadFactor float64
	// MaxSelectWait caps /select's timeout_ms. Default 1 minute.
	MaxSelectWait time.Duration
	// Store is where the registration lives: StoreMemory, StoreBolt (in
	// DataDir) or StoreEtcd (shared by router replicas, which elect one
	// leader to route). Empty means StoreBolt when DataDir is set, else
	// StoreMemory.
	Store string
	// DataDir holds the durable (bbolt) store.
	DataDir string
	// EtcdEndpoints are the etcd members' client URLs of StoreEtcd, and
	// EtcdPrefix the prefix of its keys (default store.DefaultEtcdPrefix).
	// EtcdCA, EtcdCert and EtcdKey are PEM files: a CA trusted besides the
	// system's, and the client certificate for a cluster that requires one.
	EtcdEndpoints []string
	EtcdPrefix    string
	EtcdCA        string
	EtcdCert      string
	EtcdKey       string
	// LeaderTTL is the etcd session TTL of the leader election, in whole
	// seconds: a leader that dies is replaced after about that long.
	// Default DefaultLeaderTTL.
	LeaderTTL time.Duration
	// AdvertiseURL is this router's URL as clients reach it: followers name
	// the leader's in their not_leader answers. Required with StoreEtcd.
	AdvertiseURL string
	// Auth verifies bearer tokens; nil serves without authentication.
	Auth *auth.Verifier
	// Logger is the router's logger. Default slog.Default().
	Logger *slog.Logger
	// RequestLogLevel is the level of the one log line per request.
	RequestLogLevel slog.Level
}

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
	etcd    *store.Etcd
	leading atomic.Bool            // this replica is the elected leader
	leader  atomic.Pointer[string] // the leader's advertised URL; "" none known
}

// The store kinds of Config.Store.
const (
	StoreMemory = "memory"
	StoreBolt   = "bolt"
	StoreEtcd   = "etcd"
)

// New builds a router from cfg and restores its registration from the
// store. It starts nothing: Run starts the background work. Close releases
// the store.
func New(ctx context.Context, cfg Config) (_ *App, err error) {
	if cfg.Router == "" {
		cfg.Router = api.RouterSimple
	}
	if !slices.Contains(routing.DefaultRouterNames(), cfg.Router) {
		return nil, fmt.Errorf("router must be %s, not %q", routing.NameList(routing.DefaultRouterNames()), cfg.Router)
	}
	if cfg.PollInterval < 0 || cfg.LeaseTTL < 0 || cfg.MaxWaiters < 0 {
		return nil, errors.New("poll interval, lease ttl and max waiters must be >= 0")
	}
	if cfg.MaxSelectWait <= 0 {
		cfg.MaxSelectWait = time.Minute
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = 5 * time.Second
	}
	if err := routing.CheckLoadFactor("sticky load factor", cfg.StickyLoadFactor); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &App{Config: cfg}
	if a.TLS, err = serverTLS(cfg); err != nil {
		return nil, err
	}
	ptls, err := policyTLS(cfg)
	if err != nil {
		return nil, err
	}
	if ptls != nil && cfg.PollClient != nil {
		return nil, errors.New("a poll client and policy TLS settings are exclusive")
	}
	a.Store, err = openStore(ctx, &a.Config)
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
		MaxWaiters:    cfg.MaxWaiters,
		LoadFactor:    cfg.StickyLoadFactor,
	})
	loadStart := time.Now()
	a.Registry, err = registry.Open(ctx, a.Store, a.State)
	if err != nil {
		return nil, err
	}
	cfg.Logger.Info("registration restored", "policies", len(a.State.Snapshot().Policies()),
		"store", a.Config.Store, "duration", time.Since(loadStart))

	a.Metrics = metrics.New(a.State)
	hcfg := handlers.Config{
		Registry:        a.Registry,
		State:           a.State,
		Logger:          cfg.Logger,
		DefaultRouter:   cfg.Router,
		MaxSelectWait:   cfg.MaxSelectWait,
		RequestLogLevel: cfg.RequestLogLevel,
		Ready:           a.Ready,
		Metrics:         a.Metrics,
		Auth:            cfg.Auth,
		OpenAPI:         policyrouter.OpenAPI,
	}
	if a.etcd != nil {
		hcfg.Leader = a.Leader
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
			OnProbe:         func(_ string, p routing.Probe, tr routing.Transition) { m.ObserveProbe(p, tr) },
		})
		hcfg.Poller = a.Poller
	} else {
		a.ready.Store(true)
	}
	stored, err := a.Store.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("load updates: %w", err)
	}
	a.Updates, err = updates.New(updates.Config{
		Registry: a.Registry, State: a.State, Store: a.Store, Logger: cfg.Logger,
		OnChange: a.Metrics.ObserveUpdate,
		Ready:    func() bool { return a.Ready() == nil },
	}, stored.Updates)
	if err != nil {
		return nil, err
	}
	hcfg.Updates = a.Updates
	a.Server = handlers.New(hcfg)
	return a, nil
}

// openStore opens the store cfg names, and fills in cfg's defaults for it.
func openStore(ctx context.Context, cfg *Config) (store.Store, error) {
	if cfg.Store == "" {
		cfg.Store = StoreMemory
		if cfg.DataDir != "" {
			cfg.Store = StoreBolt
		}
	}
	switch cfg.Store {
	case StoreMemory:
		return store.NewMemory(), nil
	case StoreBolt:
		if cfg.DataDir == "" {
			return nil, errors.New("the bolt store needs a data dir")
		}
		st, err := store.OpenBolt(cfg.DataDir, store.BoltOptions{})
		if err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		return st, nil
	case StoreEtcd:
		if len(cfg.EtcdEndpoints) == 0 {
			return nil, errors.New("the etcd store needs etcd endpoints")
		}
		if cfg.AdvertiseURL == "" {
			return nil, errors.New("the etcd store needs this router's advertise URL, which followers name as the leader's")
		}
		if cfg.LeaderTTL == 0 {
			cfg.LeaderTTL = DefaultLeaderTTL
		}
		if cfg.LeaderTTL < time.Second {
			return nil, fmt.Errorf("leader ttl must be at least 1s (etcd leases are in whole seconds), not %s", cfg.LeaderTTL)
		}
		tc, err := etcdTLS(*cfg)
		if err != nil {
			return nil, err
		}
		return store.OpenEtcd(ctx, store.EtcdOptions{Endpoints: cfg.EtcdEndpoints, Prefix: cfg.EtcdPrefix, TLS: tc, Logger: cfg.Logger})
	default:
		return nil, fmt.Errorf("store must be %s, %s or %s, not %q", StoreMemory, StoreBolt, StoreEtcd, cfg.Store)
	}
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

// Stop ends the waits of /select calls (they answer 503) so that a
// graceful shutdown does not wait for them. Call it when shutdown begins.
func (a *App) Stop() { a.Server.Stop() }

// Close releases the store. Call it after Run has returned.
func (a *App) Close() error { return a.Store.Close() }

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
	go func() {
		if srv.TLSConfig != nil {
			// The certificate comes from TLSConfig.GetCertificate.
			serveErr <- srv.ServeTLS(ln, "", "")
			return
		}
		serveErr <- srv.Serve(ln)
	}()
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
	return nil
}

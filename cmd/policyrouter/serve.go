package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/lmittmann/tint"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/app"
	"github.com/policyrouter/policyrouter/auth"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
)

// serveConfig is everything `serve` reads from flags and the environment.
type serveConfig struct {
	Addr          string
	Router        string
	PollInterval  time.Duration
	PollTimeout   time.Duration
	Grace         time.Duration
	FailThreshold int
	PassThreshold int
	MaxSelectWait time.Duration
	LeaseTTL      time.Duration
	MaxWaiters    int
	StickyLoad    float64
	DataDir       string
	// The store, and for replicas on etcd, the election.
	Store         string
	EtcdEndpoints string
	EtcdPrefix    string
	EtcdCA        string
	EtcdCert      string
	EtcdKey       string
	LeaderTTL     time.Duration
	AdvertiseURL  string
	JWTSecret     string
	JWTPublicKey  string
	JWTIssuer     string
	JWTAudience   string
	Insecure      bool
	// TLS of the listener, TLS towards the policies, and the escape hatch
	// from the plain-text refusal.
	TLSCert          string
	TLSKey           string
	TLSClientCA      string
	PolicyCA         string
	PolicyClientCert string
	PolicyClientKey  string
	BehindTLSProxy   bool
	LogFormat        string
	LogLevel         string

	// requestLogLevel is the level of per-request log lines (the demo
	// lowers it to keep its simulated traffic quiet).
	requestLogLevel slog.Level
}

func (c *serveConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "listen address")
	fs.StringVar(&c.Router, "router", api.RouterSimple, "default router of requests that name none: "+routing.NameList(routing.DefaultRouterNames()))
	fs.DurationVar(&c.PollInterval, "poll-interval", 100*time.Millisecond, "how often each policy's /idle is polled; 0 disables polling (no health checks: policies are trusted idle and freed only by /release or --lease-ttl)")
	fs.DurationVar(&c.PollTimeout, "poll-timeout", time.Second, "timeout of one /idle probe")
	fs.DurationVar(&c.Grace, "grace", routing.DefaultGrace, "an idle answer frees a lease no probe has seen working only if sent this long after the hand-out (a lease seen working is freed by the next idle answer)")
	fs.IntVar(&c.FailThreshold, "fail-threshold", 3, "consecutive failed probes that make a policy unhealthy")
	fs.IntVar(&c.PassThreshold, "pass-threshold", 2, "consecutive good probes that make an unhealthy policy healthy")
	fs.DurationVar(&c.MaxSelectWait, "max-select-wait", time.Minute, "cap on /select timeout_ms")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", 0, "lifetime of a /select lease that names no lease_ttl_ms; 0: leases do not expire")
	fs.IntVar(&c.MaxWaiters, "max-waiters", routing.DefaultMaxWaiters, "most /select calls waiting at once for an idle policy; one more is answered 503 overloaded")
	fs.Float64Var(&c.StickyLoad, "sticky-load-factor", routing.DefaultLoadFactor, "c of the sticky load bound ceil(c*(total+1)/available) for sessions whose request names no load_factor; 1 to 1000")
	fs.StringVar(&c.DataDir, "data-dir", "", "directory of the durable (bolt) store; empty keeps registrations in memory")
	fs.StringVar(&c.Store, "store", "", "where registrations live: memory, bolt (in --data-dir) or etcd (shared by router replicas, which elect a leader); default bolt with --data-dir, else memory")
	fs.StringVar(&c.EtcdEndpoints, "etcd-endpoints", "", "comma-separated client URLs of the etcd members (--store etcd)")
	fs.StringVar(&c.EtcdPrefix, "etcd-prefix", store.DefaultEtcdPrefix, "prefix of the router's etcd keys; replicas on one prefix share a registration and elect one leader")
	fs.StringVar(&c.EtcdCA, "etcd-ca", "", "PEM file of CA certificates trusted, besides the system's, for https:// etcd endpoints")
	fs.StringVar(&c.EtcdCert, "etcd-cert", "", "PEM file of the client certificate presented to etcd (mutual TLS)")
	fs.StringVar(&c.EtcdKey, "etcd-key", "", "PEM file of the key of --etcd-cert")
	fs.DurationVar(&c.LeaderTTL, "leader-ttl", app.DefaultLeaderTTL, "etcd session TTL of the leader election, whole seconds: a dead leader is replaced after about this long (--store etcd)")
	fs.StringVar(&c.AdvertiseURL, "advertise-url", "", "this router's URL as clients reach it, named by followers as the leader's (--store etcd); default from --addr and the TLS flags")
	fs.StringVar(&c.JWTSecret, "jwt-secret", "", "HS256 secret for bearer tokens (at least 32 bytes)")
	fs.StringVar(&c.JWTPublicKey, "jwt-public-key", "", "PEM file of an RSA or Ed25519 public key for bearer tokens")
	fs.StringVar(&c.JWTIssuer, "jwt-issuer", "", "required iss claim, if set")
	fs.StringVar(&c.JWTAudience, "jwt-audience", "", "required aud claim, if set")
	fs.BoolVar(&c.Insecure, "insecure", false, "allow running without a token key on a non-loopback address")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "PEM file of the certificate (chain) to serve HTTPS with; read again when it changes")
	fs.StringVar(&c.TLSKey, "tls-key", "", "PEM file of the key of --tls-cert")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", "", "PEM file of CA certificates: require client certificates signed by them (mutual TLS)")
	fs.StringVar(&c.PolicyCA, "policy-ca", "", "PEM file of CA certificates trusted, besides the system's, for https:// policy URLs")
	fs.StringVar(&c.PolicyClientCert, "policy-client-cert", "", "PEM file of the client certificate presented to https:// policies (mutual TLS)")
	fs.StringVar(&c.PolicyClientKey, "policy-client-key", "", "PEM file of the key of --policy-client-cert")
	fs.BoolVar(&c.BehindTLSProxy, "behind-tls-proxy", false, "allow plain HTTP on a non-loopback address: a TLS-terminating proxy in front of the router does TLS")
	fs.StringVar(&c.LogFormat, "log-format", "auto", "text, json, or auto (text on a terminal, else json)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
}

func (c *serveConfig) check() error {
	if names := routing.DefaultRouterNames(); !slices.Contains(names, c.Router) {
		return fmt.Errorf("--router must be %s, not %q", routing.NameList(names), c.Router)
	}
	if c.PollInterval < 0 || c.PollTimeout <= 0 {
		return errors.New("--poll-interval must be >= 0 and --poll-timeout positive")
	}
	if c.LeaseTTL < 0 {
		return errors.New("--lease-ttl must be >= 0")
	}
	if c.MaxWaiters < 1 {
		return fmt.Errorf("--max-waiters must be >= 1, not %d", c.MaxWaiters)
	}
	if err := c.checkStore(); err != nil {
		return err
	}
	if err := c.checkTransport(); err != nil {
		return err
	}
	if !(c.StickyLoad >= routing.MinLoadFactor && c.StickyLoad <= routing.MaxLoadFactor) {
		return fmt.Errorf("--sticky-load-factor must be between %g and %g", routing.MinLoadFactor, routing.MaxLoadFactor)
	}
	switch c.LogFormat {
	case "auto", "text", "json":
	default:
		return fmt.Errorf("--log-format must be text, json or auto, not %q", c.LogFormat)
	}
	return nil
}

func serveCommand(ctx context.Context, args []string) error {
	var cfg serveConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cfg.check(); err != nil {
		return err
	}
	logger, err := newLogger(os.Stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	return serve(ctx, cfg, logger, nil)
}

// checkStore checks the store flags against each other.
func (c *serveConfig) checkStore() error {
	etcdSet := c.EtcdEndpoints != "" || c.EtcdCA != "" || c.EtcdCert != "" || c.EtcdKey != ""
	switch c.Store {
	case "", app.StoreMemory, app.StoreBolt:
		if etcdSet {
			return errors.New("--etcd-endpoints, --etcd-ca, --etcd-cert and --etcd-key need --store etcd")
		}
		if c.Store == app.StoreBolt && c.DataDir == "" {
			return errors.New("--store bolt needs --data-dir")
		}
		if c.Store == app.StoreMemory && c.DataDir != "" {
			return errors.New("--data-dir is the bolt store's: drop it, or --store memory")
		}
	case app.StoreEtcd:
		if c.EtcdEndpoints == "" {
			return errors.New("--store etcd needs --etcd-endpoints, e.g. http://127.0.0.1:2379")
		}
		if c.DataDir != "" {
			return errors.New("--data-dir is the bolt store's; with --store etcd the registration lives in etcd")
		}
		for _, e := range splitList(c.EtcdEndpoints) {
			if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("--etcd-endpoints: %q is not an http:// or https:// URL", e)
			}
		}
		if c.LeaderTTL < time.Second || c.LeaderTTL%time.Second != 0 {
			return fmt.Errorf("--leader-ttl must be whole seconds, at least 1s (etcd leases are), not %s", c.LeaderTTL)
		}
		if c.AdvertiseURL != "" {
			if u, err := url.Parse(c.AdvertiseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("--advertise-url: %q is not an http:// or https:// URL", c.AdvertiseURL)
			}
		}
	default:
		return fmt.Errorf("--store must be memory, bolt or etcd, not %q", c.Store)
	}
	return nil
}

// advertiseURL is --advertise-url, or the URL of the bound address ln:
// its host, or this machine's name when it listens on every interface.
func (c *serveConfig) advertiseURL(ln net.Addr) string {
	if c.AdvertiseURL != "" {
		return c.AdvertiseURL
	}
	scheme := "http"
	if c.TLSCert != "" {
		scheme = "https"
	}
	host, port, err := net.SplitHostPort(ln.String())
	if err != nil {
		return scheme + "://" + ln.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil {
			host = name
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// checkTransport refuses plain HTTP on a non-loopback address, where
// bearer tokens would cross the network in clear text, unless a
// TLS-terminating proxy is said to be in front. --insecure does not lift
// it: it is about tokens, not transport.
func (c *serveConfig) checkTransport() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key")
	}
	if (c.PolicyClientCert == "") != (c.PolicyClientKey == "") {
		return errors.New("--policy-client-cert and --policy-client-key go together")
	}
	if c.TLSCert == "" && !c.BehindTLSProxy && !auth.IsLoopbackAddr(c.Addr) {
		return fmt.Errorf("refusing to serve plain HTTP on %s, which is not a loopback address: "+
			"set --tls-cert and --tls-key to serve HTTPS, or pass --behind-tls-proxy when a TLS-terminating proxy in front of the router does TLS", c.Addr)
	}
	return nil
}

// authConfig is the part of the configuration that names token keys.
func (c *serveConfig) authConfig() (auth.Config, bool, error) {
	ac := auth.Config{Issuer: c.JWTIssuer, Audience: c.JWTAudience}
	if c.JWTSecret != "" {
		ac.Secret = []byte(c.JWTSecret)
	}
	if c.JWTPublicKey != "" {
		pem, err := os.ReadFile(c.JWTPublicKey)
		if err != nil {
			return ac, false, fmt.Errorf("--jwt-public-key: %w", err)
		}
		ac.PublicKeyPEM = pem
	}
	return ac, ac.Secret != nil || ac.PublicKeyPEM != nil, nil
}

// verifier returns the token verifier, or nil for an open server, which
// is allowed only on a loopback address or with --insecure.
func (c *serveConfig) verifier() (*auth.Verifier, error) {
	ac, keyed, err := c.authConfig()
	if err != nil {
		return nil, err
	}
	if !keyed {
		if !auth.IsLoopbackAddr(c.Addr) && !c.Insecure {
			return nil, fmt.Errorf("refusing to serve without authentication on %s, which is not a loopback address: "+
				"set --jwt-secret or --jwt-public-key, or pass --insecure to accept the risk", c.Addr)
		}
		return nil, nil
	}
	v, err := auth.NewVerifier(ac)
	if err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	return v, nil
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				format = "text"
			}
		}
	}
	if format == "text" {
		return slog.New(tint.NewHandler(w, &tint.Options{Level: lvl, TimeFormat: time.TimeOnly})), nil
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}

// serve runs the router until ctx is done, then drains in-flight requests
// and stops background work. When listening is non-nil it receives the
// bound address once the server accepts connections.
func serve(ctx context.Context, cfg serveConfig, logger *slog.Logger, listening chan<- string) error {
	// Request ids are UUIDs: draw their randomness in batches.
	uuid.EnableRandPool()
	verifier, err := cfg.verifier()
	if err != nil {
		return err
	}
	if verifier == nil && !auth.IsLoopbackAddr(cfg.Addr) {
		logger.Warn("serving WITHOUT authentication on a non-loopback address (--insecure)", "addr", cfg.Addr)
	}
	if cfg.TLSCert == "" && !auth.IsLoopbackAddr(cfg.Addr) {
		logger.Info("serving plain HTTP on a non-loopback address: TLS is left to the proxy in front (--behind-tls-proxy)", "addr", cfg.Addr)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	acfg := cfg.appConfig(verifier, logger)
	acfg.AdvertiseURL = cfg.advertiseURL(ln.Addr())
	a, err := app.New(ctx, acfg)
	if err != nil {
		_ = ln.Close()
		return err
	}
	logger.Info("policyrouter listening", "addr", ln.Addr().String(), "router", cfg.Router, "auth", verifier != nil,
		"tls", cfg.TLSCert != "", "mtls", cfg.TLSClientCA != "", "store", a.Config.Store, "advertise_url", acfg.AdvertiseURL)
	if listening != nil {
		listening <- ln.Addr().String()
	}
	if err := a.Serve(ctx, ln); err != nil {
		return err
	}
	logger.Info("stopped")
	return nil
}

// appConfig is the router's configuration from the flags.
func (c *serveConfig) appConfig(verifier *auth.Verifier, logger *slog.Logger) app.Config {
	return app.Config{
		Router:           c.Router,
		PollInterval:     c.PollInterval,
		PollTimeout:      c.PollTimeout,
		Grace:            c.Grace,
		FailThreshold:    c.FailThreshold,
		PassThreshold:    c.PassThreshold,
		LeaseTTL:         c.LeaseTTL,
		MaxWaiters:       c.MaxWaiters,
		MaxSelectWait:    c.MaxSelectWait,
		DataDir:          c.DataDir,
		Store:            c.Store,
		EtcdEndpoints:    splitList(c.EtcdEndpoints),
		EtcdPrefix:       c.EtcdPrefix,
		EtcdCA:           c.EtcdCA,
		EtcdCert:         c.EtcdCert,
		EtcdKey:          c.EtcdKey,
		LeaderTTL:        c.LeaderTTL,
		TLSCert:          c.TLSCert,
		TLSKey:           c.TLSKey,
		TLSClientCA:      c.TLSClientCA,
		PolicyCA:         c.PolicyCA,
		PolicyClientCert: c.PolicyClientCert,
		PolicyClientKey:  c.PolicyClientKey,
		StickyLoadFactor: c.StickyLoad,
		Auth:             verifier,
		Logger:           logger,
		RequestLogLevel:  c.requestLogLevel,
	}
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

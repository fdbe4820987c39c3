package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/routing"
)

// The defaults are a valid configuration, and the default router is one
// the table offers as a default.
func TestDefaultConfigIsValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
	if !slices.Contains(routing.DefaultRouterNames(), routing.DefaultRouter) {
		t.Errorf("routing.DefaultRouter %q is not among %v", routing.DefaultRouter, routing.DefaultRouterNames())
	}
}

// Each invalid setting is refused with the flag that sets it named.
func TestValidateNamesTheFlag(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"router", func(c *Config) { c.Router = "least_busy" }, `--router must be simple, node_affinity, idle_affinity or power_of_two, not "least_busy"`},
		{"poll interval", func(c *Config) { c.PollInterval = -time.Second }, "--poll-interval must be >= 0"},
		{"poll timeout", func(c *Config) { c.PollTimeout = 0 }, "--poll-timeout must be positive, not 0s"},
		{"lease ttl", func(c *Config) { c.LeaseTTL = -1 }, "--lease-ttl must be >= 0"},
		{"max waiters", func(c *Config) { c.MaxWaiters = 0 }, "--max-waiters must be >= 1, not 0"},
		{"grace", func(c *Config) { c.Grace = 0 }, "--grace must be positive, not 0s"},
		{"jwt leeway", func(c *Config) { c.JWTLeeway = -time.Second }, "--jwt-leeway must be >= 0 (0 allows no clock skew), not -1s"},
		{"fail threshold", func(c *Config) { c.FailThreshold = 0 }, "--fail-threshold must be >= 1, not 0"},
		{"pass threshold", func(c *Config) { c.PassThreshold = -2 }, "--pass-threshold must be >= 1, not -2"},
		{"max select wait", func(c *Config) { c.MaxSelectWait = 0 }, "--max-select-wait must be positive"},
		{"sticky load factor", func(c *Config) { c.StickyLoadFactor = 0.5 }, "--sticky-load-factor must be between 1 and 1000, not 0.5"},
		{"store", func(c *Config) { c.Store = "sqlite" }, `--store must be memory, bolt or etcd, not "sqlite"`},
		{"bolt without data dir", func(c *Config) { c.Store = StoreBolt }, "--store bolt needs --data-dir"},
		{"data dir in memory", func(c *Config) { c.Store, c.DataDir = StoreMemory, "/tmp/x" }, "--data-dir is the bolt store's"},
		{"etcd flags without etcd", func(c *Config) { c.EtcdEndpoints = []string{"http://e:2379"} }, "need --store etcd"},
		{"peer flags without etcd", func(c *Config) { c.PeerCA = "ca.pem" }, "--peer-ca, --peer-cert and --peer-key are for replicas"},
		{"peer key", func(c *Config) {
			c.Store, c.EtcdEndpoints, c.PeerCert = StoreEtcd, []string{"http://e:2379"}, "c.pem"
		}, "--peer-cert and --peer-key go together"},
		{"replica token file without etcd", func(c *Config) { c.JWTPublicKey, c.ReplicaTokenFile = "k.pem", "token" }, "--replica-token-file is for replicas: it needs --store etcd"},
		{"replica token file without a key", func(c *Config) {
			c.Store, c.EtcdEndpoints, c.ReplicaTokenFile = StoreEtcd, []string{"http://e:2379"}, "token"
		}, "--replica-token-file is the token a follower presents to a leader that checks tokens: it needs --jwt-public-key"},
		{"etcd without endpoints", func(c *Config) { c.Store = StoreEtcd }, "--store etcd needs --etcd-endpoints"},
		{"etcd endpoint", func(c *Config) { c.Store, c.EtcdEndpoints = StoreEtcd, []string{"e:2379"} }, `--etcd-endpoints: "e:2379" is not`},
		{"leader ttl", func(c *Config) {
			c.Store, c.EtcdEndpoints, c.LeaderTTL = StoreEtcd, []string{"http://e:2379"}, 1500*time.Millisecond
		}, "--leader-ttl must be whole seconds"},
		{"advertise url", func(c *Config) {
			c.Store, c.EtcdEndpoints, c.AdvertiseURL = StoreEtcd, []string{"http://e:2379"}, "router-a:8080"
		}, `--advertise-url: "router-a:8080" is not`},
		{"tls key", func(c *Config) { c.TLSCert = "c.pem" }, "--tls-cert and --tls-key go together"},
		{"tls client ca", func(c *Config) { c.TLSClientCA = "ca.pem" }, "--tls-client-ca needs --tls-cert"},
		{"policy key", func(c *Config) { c.PolicyClientKey = "k.pem" }, "--policy-client-cert and --policy-client-key go together"},
		{"plain http", func(c *Config) { c.Addr, c.Insecure = "0.0.0.0:8080", true }, "refusing to serve plain HTTP on 0.0.0.0:8080"},
		{"open server", func(c *Config) { c.Addr, c.BehindTLSProxy = "0.0.0.0:8080", true }, "refusing to serve without authentication on 0.0.0.0:8080"},
		{"log format", func(c *Config) { c.LogFormat = "xml" }, `--log-format must be text, json or auto, not "xml"`},
		{"log level", func(c *Config) { c.LogLevel = "loud" }, `--log-level must be debug, info, warn or error, not "loud"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.change(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v; want an error with %q", err, tt.want)
			}
		})
	}
	for _, key := range []func(*Config){
		func(c *Config) { c.JWTPublicKey = "k.pem" },
		func(c *Config) { c.JWTSecret = strings.Repeat("k", 32) },
	} {
		c := DefaultConfig()
		c.Store, c.EtcdEndpoints, c.ReplicaTokenFile = StoreEtcd, []string{"http://e:2379"}, "token"
		key(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("--replica-token-file with a token key: %v", err)
		}
	}
	ok := DefaultConfig()
	ok.Addr, ok.Insecure, ok.BehindTLSProxy = "0.0.0.0:8080", true, true
	if err := ok.Validate(); err != nil {
		t.Errorf("--insecure --behind-tls-proxy on 0.0.0.0: %v", err)
	}
}

// A Config literal's zero fields take the defaults; a zero that means
// something stays.
func TestLiteralZeroFieldsTakeDefaults(t *testing.T) {
	a, err := New(context.Background(), Config{Grace: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// The fields that take a default, and those whose zero means something.
	type settings struct {
		Router                    string
		PollInterval, PollTimeout time.Duration
		Grace, MaxSelectWait      time.Duration
		ReadHeaderTimeout         time.Duration
		FailThreshold, MaxWaiters int
		StickyLoadFactor          float64
		Addr, Store, LogFormat    string
		JWTLeeway                 time.Duration
	}
	of := func(c Config) settings {
		return settings{c.Router, c.PollInterval, c.PollTimeout, c.Grace, c.MaxSelectWait, c.ReadHeaderTimeout,
			c.FailThreshold, c.MaxWaiters, c.StickyLoadFactor, c.Addr, c.Store, c.LogFormat, c.JWTLeeway}
	}
	want := DefaultConfig()
	want.Grace, want.PollInterval, want.Addr, want.Store = time.Second, 0, "", StoreMemory
	if got, want := of(a.Config), of(want); got != want {
		t.Errorf("New(literal).Config = %+v\nwant %+v", got, want)
	}
	if a.Poller != nil {
		t.Error("a literal without PollInterval polls; 0 means no poller")
	}
}

// A zero set on DefaultConfig is meant: it is refused, not replaced.
func TestZeroOnDefaultConfigRefused(t *testing.T) {
	c := DefaultConfig()
	c.MaxWaiters = 0
	if _, err := New(context.Background(), c); err == nil || !strings.Contains(err.Error(), "--max-waiters must be >= 1, not 0") {
		t.Errorf("New(DefaultConfig with MaxWaiters 0) = %v; want the --max-waiters error", err)
	}
}

// The flags bind to the fields, with DefaultConfig's values as defaults.
func TestRegisterFlags(t *testing.T) {
	c := DefaultConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	if got := fs.Lookup("grace").DefValue; got != routing.DefaultGrace.String() {
		t.Errorf("--grace default %s; want %s", got, routing.DefaultGrace)
	}
	if got := fs.Lookup("router").DefValue; got != routing.DefaultRouter {
		t.Errorf("--router default %s; want %s", got, routing.DefaultRouter)
	}
	err := fs.Parse([]string{"--addr", "127.0.0.1:0", "--max-waiters", "7", "--store", "etcd",
		"--etcd-endpoints", "http://a:2379, ,http://b:2379", "--sticky-load-factor", "2", "--lease-ttl", "1m",
		"--replica-token-file", "/run/secrets/replica-token"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:0" || c.MaxWaiters != 7 || c.Store != StoreEtcd || c.StickyLoadFactor != 2 || c.LeaseTTL != time.Minute ||
		!slices.Equal(c.EtcdEndpoints, []string{"http://a:2379", "http://b:2379"}) || c.ReplicaTokenFile != "/run/secrets/replica-token" {
		t.Errorf("parsed %+v", c)
	}
	if c.Grace != routing.DefaultGrace || c.PollInterval != 100*time.Millisecond {
		t.Errorf("unset flags: grace %s, poll interval %s; want the defaults", c.Grace, c.PollInterval)
	}
}

// A verifier passed in is used as is; the JWT settings build one.
func TestVerifier(t *testing.T) {
	c := DefaultConfig()
	if v, err := c.Verifier(); v != nil || err != nil {
		t.Errorf("Verifier() without a key = %v, %v; want nil, nil", v, err)
	}
	c.JWTSecret = "short"
	if _, err := c.Verifier(); err == nil || !strings.Contains(err.Error(), "token key") {
		t.Errorf("Verifier() with a short secret = %v; want a token key error", err)
	}
	c.JWTSecret = strings.Repeat("k", 32)
	v, err := c.Verifier()
	if err != nil || v == nil {
		t.Fatalf("Verifier() with a secret = %v, %v", v, err)
	}
	c = DefaultConfig()
	c.Auth = v
	if got, _ := c.Verifier(); got != v {
		t.Error("Verifier() does not return Auth")
	}
	c.JWTSecret = strings.Repeat("k", 32)
	if err := c.Validate(); err == nil {
		t.Error("Auth and --jwt-secret together validated")
	}
}

// Listen binds Addr, and the advertise URL defaults to the bound address.
func TestListenAdvertisesTheBoundAddress(t *testing.T) {
	c := DefaultConfig()
	c.Addr, c.Logger = "127.0.0.1:0", slog.New(slog.DiscardHandler)
	a, err := New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ln, err := a.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got, want := a.Config.AdvertiseURL, "http://"+ln.Addr().String(); got != want {
		t.Errorf("AdvertiseURL = %q; want %q", got, want)
	}
	if _, leader := a.Leader(); leader != a.Config.AdvertiseURL {
		t.Errorf("Leader() names %q; want this router, %q", leader, a.Config.AdvertiseURL)
	}
}

func TestAccessLogFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool // NoAccessLog
	}{
		{nil, false},
		{[]string{"--access-log"}, false},
		{[]string{"--access-log=false"}, true},
		{[]string{"--access-log=false", "--access-log=true"}, false},
	} {
		cfg := DefaultConfig()
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.RegisterFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if cfg.NoAccessLog != c.want {
			t.Errorf("%v: NoAccessLog %t, want %t", c.args, cfg.NoAccessLog, c.want)
		}
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := DefaultConfig()
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--access-log=maybe"}); err == nil {
		t.Error("--access-log=maybe accepted")
	}
}

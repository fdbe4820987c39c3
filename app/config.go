package app

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/policyrouter/policyrouter/auth"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/handlers"
	"github.com/policyrouter/policyrouter/poller"
	"github.com/policyrouter/policyrouter/prefix"
	"github.com/policyrouter/policyrouter/proxy"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
)

// Config is everything a router is built from: the flags of `policyrouter
// serve` bind to it (RegisterFlags), DefaultConfig holds their defaults and
// Validate checks it.
//
// Start from DefaultConfig and change what differs. A Config literal works
// too: New gives its zero fields the defaults first, except where zero has
// a meaning of its own (PollInterval, LeaseTTL, Addr and the optional
// settings).
type Config struct {
	// Addr is the address Listen binds. Empty: the caller listens, and
	// passes its listener to Serve.
	Addr string
	// Router is the default router of requests that name none: a name of
	// routing.DefaultRouterNames.
	Router string
	// PollInterval is the period of each policy's /idle probe; 0 runs no
	// poller, and policies are then trusted idle from registration.
	PollInterval time.Duration
	// PollTimeout bounds one probe.
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
	// BehindTLSProxy allows plain HTTP on a non-loopback Addr: a
	// TLS-terminating proxy in front of the router does TLS.
	BehindTLSProxy bool
	// ReadHeaderTimeout cuts off a client that has not sent its request
	// headers in that time.
	ReadHeaderTimeout time.Duration
	// Grace, FailThreshold and PassThreshold configure the routing state
	// (routing.Options).
	Grace         time.Duration
	FailThreshold int
	PassThreshold int
	// LeaseTTL is the lifetime of a lease whose /select names none; 0 means
	// leases do not expire.
	LeaseTTL time.Duration
	// AssignTTL is how long tracked /assign tasks count in their policies'
	// loads unless completed first, for requests that name no
	// assign_ttl_ms; 0 means until completed.
	AssignTTL time.Duration
	// MaxWaiters bounds the /select calls waiting at once; one more is
	// answered 503 overloaded.
	MaxWaiters int
	// StickyWait is how long a session whose request names no
	// sticky_wait_ms waits for its busy home before the router picks.
	StickyWait time.Duration
	// StickyLoadFactor is c of the sticky stage's load bound for requests
	// that name no load_factor.
	StickyLoadFactor float64
	// MaxSelectWait caps /select's timeout_ms.
	MaxSelectWait time.Duration
	// ProxyRetries, ProxyTimeout and ProxyMaxBody configure proxy mode:
	// retries on other policies after a connect error or a 502/503, the
	// bound of each upstream attempt (0: none), the largest request body.
	ProxyRetries int
	ProxyTimeout time.Duration
	ProxyMaxBody int64
	// ProxyResume continues an aborted native /generate on another policy
	// (--proxy-resume). On in DefaultConfig (so for the flags); a Config
	// literal that leaves it false has it off.
	ProxyResume bool
	// PrefixAffinity routes each proxied request where its prompt's
	// prefix is cached (--prefix-affinity). On in DefaultConfig; a Config
	// literal that leaves it false has it off.
	PrefixAffinity bool
	// PrefixIndexTokens is each policy's budget in the prefix index, in
	// tokens, when its engine reports no KV size (--prefix-index-tokens);
	// 0 is the index's default.
	PrefixIndexTokens int
	// ProxyNetHTTP is --proxy-net-http, accepted for one release after
	// the router stopped serving proxy traffic with a server of its own:
	// net/http serves every request now, and the flag changes nothing
	// but a line in the log.
	ProxyNetHTTP bool
	// Store is where the registration lives: StoreMemory, StoreBolt (in
	// DataDir) or StoreEtcd (shared by router replicas, which elect one
	// leader to route). Empty means StoreBolt when DataDir is set, else
	// StoreMemory.
	Store string
	// DataDir holds the durable (bbolt) store.
	DataDir string
	// EtcdEndpoints are the etcd members' client URLs of StoreEtcd, and
	// EtcdPrefix the prefix of its keys. EtcdCA, EtcdCert and EtcdKey are
	// PEM files: a CA trusted besides the system's, and the client
	// certificate for a cluster that requires one.
	EtcdEndpoints []string
	EtcdPrefix    string
	EtcdCA        string
	EtcdCert      string
	EtcdKey       string
	// PeerCA is a PEM file of CA certificates trusted, besides the
	// system's, for the other replicas' https:// advertise URLs: a
	// follower reads the leader's GET /stats there, and leases from it. PeerCert and PeerKey
	// are the client certificate it presents to a leader that requires
	// one (--tls-client-ca); they are read again when they change.
	PeerCA, PeerCert, PeerKey string
	// ReplicaTokenFile is a file holding the bearer token (scope route) a
	// follower presents to the leader, minted by the operator: how
	// replicas that only verify tokens (JWTPublicKey) proxy on followers.
	// It is read again when it changes, so a rotated token is used without
	// a restart. With JWTSecret too, it wins over minting one. It needs
	// StoreEtcd and a token key (or Auth).
	ReplicaTokenFile string
	// LeaderTTL is the etcd session TTL of the leader election, in whole
	// seconds: a leader that dies is replaced after about that long.
	LeaderTTL time.Duration
	// AdvertiseURL is this router's URL as clients reach it: followers name
	// the leader's in their not_leader answers. Empty: Listen makes it the
	// URL of the bound address. StoreEtcd needs one or the other.
	AdvertiseURL string
	// JWTSecret (HS256) or JWTPublicKey (a PEM file of an RSA or Ed25519
	// public key) is the key of bearer tokens; JWTIssuer and JWTAudience,
	// when set, are the iss and aud claims they must carry.
	JWTSecret    string
	JWTPublicKey string
	JWTIssuer    string
	JWTAudience  string
	// JWTLeeway is the clock skew allowed on a token's exp, nbf and iat: a
	// token is accepted until JWTLeeway after its exp. DefaultConfig's is
	// auth.DefaultLeeway, and 0 there allows none; a Config literal's zero
	// takes the default. Not used with Auth.
	JWTLeeway time.Duration
	// Auth, when set, verifies bearer tokens instead of a verifier built
	// from the JWT settings, which must then be empty.
	Auth *auth.Verifier
	// Insecure allows serving without a token key on a non-loopback Addr.
	Insecure bool
	// LogFormat is text, json or auto (text on a terminal, else json), and
	// LogLevel debug, info, warn or error: those of the logger New builds
	// on standard error when Logger is nil.
	LogFormat string
	LogLevel  string
	// Logger, when set, is the router's logger.
	Logger *slog.Logger
	// RequestLogLevel is the level of the one log line per request.
	RequestLogLevel slog.Level
	// NoAccessLog turns off the per-request log line (--access-log=false)
	// but for faults: 5xx other than 503 are logged still.
	NoAccessLog bool
	// DefaultEngine is the engine of policies registered without one: a
	// name of engine.Names (routing.EnginePolicyrouter by default).
	DefaultEngine string

	// complete is set by DefaultConfig: every field holds what is meant,
	// so that New takes a zero as given (and Validate refuses it where it
	// must) rather than as "the default".
	complete bool
}

// DefaultAssignTTL is the default --assign-ttl: longer than a rollout
// task plausibly runs, short enough that a caller that never calls
// /complete does not stall a rolling update for long.
const DefaultAssignTTL = 5 * time.Minute

// DefaultLeaseTTL is the default --lease-ttl: an explicit lease ends only
// by its holder, so a holder that crashed must not hold its slot forever;
// longer than a rollout turn plausibly runs.
const DefaultLeaseTTL = 10 * time.Minute

// DefaultConfig returns the configuration of `policyrouter serve` run
// without flags. It is the one place the defaults are written.
func DefaultConfig() Config {
	return Config{
		Addr:              "127.0.0.1:8080",
		Router:            routing.DefaultRouter,
		PollInterval:      100 * time.Millisecond,
		PollTimeout:       poller.DefaultTimeout,
		ReadHeaderTimeout: 5 * time.Second,
		Grace:             routing.DefaultGrace,
		LeaseTTL:          DefaultLeaseTTL,
		FailThreshold:     routing.DefaultFailThreshold,
		PassThreshold:     routing.DefaultPassThreshold,
		MaxWaiters:        routing.DefaultMaxWaiters,
		StickyLoadFactor:  routing.DefaultLoadFactor,
		StickyWait:        routing.DefaultStickyWait,
		MaxSelectWait:     handlers.DefaultMaxSelectWait,
		ProxyRetries:      proxy.DefaultRetries,
		ProxyTimeout:      proxy.DefaultTimeout,
		ProxyMaxBody:      proxy.DefaultMaxBody,
		ProxyResume:       true,
		PrefixAffinity:    true,
		EtcdPrefix:        store.DefaultEtcdPrefix,
		LeaderTTL:         DefaultLeaderTTL,
		AssignTTL:         DefaultAssignTTL,
		JWTLeeway:         auth.DefaultLeeway,
		LogFormat:         "auto",
		LogLevel:          "info",
		DefaultEngine:     routing.EnginePolicyrouter,
		complete:          true,
	}
}

// withDefaults gives the zero fields of a Config literal DefaultConfig's
// values, but for those where zero means something.
func (c Config) withDefaults() Config {
	if c.complete {
		return c
	}
	d := DefaultConfig()
	orDefault(&c.Router, d.Router)
	orDefault(&c.PollTimeout, d.PollTimeout)
	orDefault(&c.ReadHeaderTimeout, d.ReadHeaderTimeout)
	orDefault(&c.Grace, d.Grace)
	orDefault(&c.FailThreshold, d.FailThreshold)
	orDefault(&c.PassThreshold, d.PassThreshold)
	orDefault(&c.MaxWaiters, d.MaxWaiters)
	orDefault(&c.StickyLoadFactor, d.StickyLoadFactor)
	orDefault(&c.MaxSelectWait, d.MaxSelectWait)
	orDefault(&c.ProxyMaxBody, d.ProxyMaxBody)
	orDefault(&c.EtcdPrefix, d.EtcdPrefix)
	orDefault(&c.LeaderTTL, d.LeaderTTL)
	orDefault(&c.JWTLeeway, d.JWTLeeway)
	orDefault(&c.LogFormat, d.LogFormat)
	orDefault(&c.LogLevel, d.LogLevel)
	orDefault(&c.DefaultEngine, d.DefaultEngine)
	c.complete = true
	return c
}

func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// RegisterFlags binds the flags of `policyrouter serve` to c's fields,
// with c's values as their defaults: register on DefaultConfig().
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", c.Addr, "listen address")
	fs.StringVar(&c.Router, "router", c.Router, "default router of requests that name none: "+routing.NameList(routing.DefaultRouterNames()))
	fs.DurationVar(&c.PollInterval, "poll-interval", c.PollInterval, "how often each policy's /idle is polled; 0 disables polling (no health checks: policies are trusted idle and freed only by /release or --lease-ttl)")
	fs.DurationVar(&c.PollTimeout, "poll-timeout", c.PollTimeout, "timeout of one /idle probe")
	fs.DurationVar(&c.Grace, "grace", c.Grace, "an idle answer frees a lease no probe has seen working only if sent this long after the hand-out (a lease seen working is freed by the next idle answer)")
	fs.IntVar(&c.FailThreshold, "fail-threshold", c.FailThreshold, "consecutive failed probes that make a policy unhealthy")
	fs.IntVar(&c.PassThreshold, "pass-threshold", c.PassThreshold, "consecutive good probes that make an unhealthy policy healthy")
	fs.DurationVar(&c.MaxSelectWait, "max-select-wait", c.MaxSelectWait, "cap on /select timeout_ms")
	fs.BoolVar(&c.ProxyNetHTTP, "proxy-net-http", c.ProxyNetHTTP, "deprecated, changes nothing: Go's net/http server serves every request, proxied ones included")
	fs.BoolVar(&c.PrefixAffinity, "prefix-affinity", c.PrefixAffinity, "proxy mode: route each /generate, /v1/completions and /v1/chat/completions where its prompt's prefix is cached, within load bounds; a request opts out with X-Prefix-Affinity: 0")
	fs.IntVar(&c.PrefixIndexTokens, "prefix-index-tokens", c.PrefixIndexTokens, "tokens of prompt prefixes indexed per policy when its engine reports no KV cache size; 0: "+strconv.Itoa(prefix.DefaultPolicyTokens))
	fs.BoolVar(&c.ProxyResume, "proxy-resume", c.ProxyResume, "proxy mode: continue a /generate (streamed or not) whose answer was aborted (or cut off) on another policy, from input_ids + the tokens so far; a request opts out with X-Resume-On-Abort: 0")
	fs.IntVar(&c.ProxyRetries, "proxy-retries", c.ProxyRetries, "proxy mode: other policies a request is retried on after a connect error or a 502/503 answer, before any byte reached the client")
	fs.DurationVar(&c.ProxyTimeout, "proxy-timeout", c.ProxyTimeout, "proxy mode: bound of each upstream request, streaming included; 0: none")
	fs.Int64Var(&c.ProxyMaxBody, "proxy-max-body", c.ProxyMaxBody, "proxy mode: largest request body accepted, in bytes")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", c.LeaseTTL, "lifetime of a /select lease that names no lease_ttl_ms, so that a crashed holder's slot comes back; 0: leases do not expire")
	fs.DurationVar(&c.AssignTTL, "assign-ttl", c.AssignTTL, "how long tracked /assign tasks count in their policies' loads unless /complete reports them first, for requests that name no assign_ttl_ms; 0: until completed")
	fs.IntVar(&c.MaxWaiters, "max-waiters", c.MaxWaiters, "most /select calls waiting at once for an idle policy; one more is answered 503 overloaded")
	fs.DurationVar(&c.StickyWait, "sticky-wait", c.StickyWait, "how long a session (session_id, X-Session-ID) whose request names no sticky_wait_ms waits for its busy home before the router picks; 0 spills at once")
	fs.Float64Var(&c.StickyLoadFactor, "sticky-load-factor", c.StickyLoadFactor, "c of the sticky load bound ceil(c*(total+1)/available) for sessions whose request names no load_factor; 1 to 1000")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory of the durable (bolt) store; empty keeps registrations in memory")
	fs.StringVar(&c.Store, "store", c.Store, "where registrations live: memory, bolt (in --data-dir) or etcd (shared by router replicas, which elect a leader); default bolt with --data-dir, else memory")
	fs.Var((*listValue)(&c.EtcdEndpoints), "etcd-endpoints", "comma-separated client `URLs` of the etcd members (--store etcd)")
	fs.StringVar(&c.EtcdPrefix, "etcd-prefix", c.EtcdPrefix, "prefix of the router's etcd keys; replicas on one prefix share a registration and elect one leader")
	fs.StringVar(&c.EtcdCA, "etcd-ca", c.EtcdCA, "PEM file of CA certificates trusted, besides the system's, for https:// etcd endpoints")
	fs.StringVar(&c.EtcdCert, "etcd-cert", c.EtcdCert, "PEM file of the client certificate presented to etcd (mutual TLS)")
	fs.StringVar(&c.EtcdKey, "etcd-key", c.EtcdKey, "PEM file of the key of --etcd-cert")
	fs.StringVar(&c.PeerCA, "peer-ca", c.PeerCA, "PEM file of CA certificates trusted, besides the system's, for the other replicas' https:// --advertise-url (a follower reads the leader's /stats and leases proxied requests from it) (--store etcd)")
	fs.StringVar(&c.PeerCert, "peer-cert", c.PeerCert, "PEM file of the client certificate a follower presents to a leader that requires one (--tls-client-ca); read again when it changes (--store etcd)")
	fs.StringVar(&c.PeerKey, "peer-key", c.PeerKey, "PEM file of the key of --peer-cert")
	fs.StringVar(&c.ReplicaTokenFile, "replica-token-file", c.ReplicaTokenFile, "file holding the bearer token (scope route) a follower presents to the leader to lease proxied requests, minted by the operator with the private key of --jwt-public-key; read again when it changes; wins over minting one from --jwt-secret (--store etcd)")
	fs.DurationVar(&c.LeaderTTL, "leader-ttl", c.LeaderTTL, "etcd session TTL of the leader election, whole seconds: a dead leader is replaced after about this long (--store etcd)")
	fs.StringVar(&c.AdvertiseURL, "advertise-url", c.AdvertiseURL, "this router's URL as clients reach it, named by followers as the leader's (--store etcd); default from --addr and the TLS flags")
	fs.StringVar(&c.JWTSecret, "jwt-secret", c.JWTSecret, "HS256 secret for bearer tokens (at least 32 bytes)")
	fs.StringVar(&c.JWTPublicKey, "jwt-public-key", c.JWTPublicKey, "PEM file of an RSA or Ed25519 public key for bearer tokens")
	fs.StringVar(&c.JWTIssuer, "jwt-issuer", c.JWTIssuer, "required iss claim, if set")
	fs.StringVar(&c.JWTAudience, "jwt-audience", c.JWTAudience, "required aud claim, if set")
	fs.DurationVar(&c.JWTLeeway, "jwt-leeway", c.JWTLeeway, "clock skew allowed on a token's exp, nbf and iat: a token is accepted until this long after its exp; 0 allows none")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "allow running without a token key on a non-loopback address")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM file of the certificate (chain) to serve HTTPS with; read again when it changes")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM file of the key of --tls-cert")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", c.TLSClientCA, "PEM file of CA certificates: require client certificates signed by them (mutual TLS); read again when it changes")
	fs.StringVar(&c.PolicyCA, "policy-ca", c.PolicyCA, "PEM file of CA certificates trusted, besides the system's, for https:// policy URLs")
	fs.StringVar(&c.PolicyClientCert, "policy-client-cert", c.PolicyClientCert, "PEM file of the client certificate presented to https:// policies (mutual TLS)")
	fs.StringVar(&c.PolicyClientKey, "policy-client-key", c.PolicyClientKey, "PEM file of the key of --policy-client-cert")
	fs.BoolVar(&c.BehindTLSProxy, "behind-tls-proxy", c.BehindTLSProxy, "allow plain HTTP on a non-loopback address: a TLS-terminating proxy in front of the router does TLS")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "text, json, or auto (text on a terminal, else json)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.Var((*negatedBool)(&c.NoAccessLog), "access-log", "log one line per request (the access log); false logs only the requests that failed by a fault (5xx other than 503)")
	fs.StringVar(&c.DefaultEngine, "default-engine", c.DefaultEngine, "engine of policies registered without one, which decides how they are probed: "+routing.NameList(engine.Names()))
}

// negatedBool is a boolean flag that sets the negation of its field, so
// that the field's zero value is the flag's default, true.
type negatedBool bool

func (b *negatedBool) String() string {
	if b == nil || !*b {
		return "true"
	}
	return "false"
}

func (b *negatedBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("must be true or false, not %q", s)
	}
	*b = negatedBool(!v)
	return nil
}

func (b *negatedBool) IsBoolFlag() bool { return true }

// listValue is a flag of comma-separated items; empty items are dropped.
// Setting it replaces the list.
type listValue []string

func (l *listValue) String() string { return strings.Join(*l, ",") }

func (l *listValue) Set(s string) error {
	*l = nil
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l = append(*l, item)
		}
	}
	return nil
}

// Validate checks c as it stands and names the flag at fault. New runs
// it (on a Config literal, after giving its zero fields their defaults);
// call it alone to check a configuration without starting anything. It
// reads no files: New reads them, and reports their errors.
func (c Config) Validate() error {
	if names := routing.DefaultRouterNames(); !slices.Contains(names, c.Router) {
		return fmt.Errorf("--router must be %s, not %q", routing.NameList(names), c.Router)
	}
	if !engine.Is(c.DefaultEngine) {
		return fmt.Errorf("--default-engine must be %s, not %q", routing.NameList(engine.Names()), c.DefaultEngine)
	}
	switch {
	case c.PollInterval < 0:
		return fmt.Errorf("--poll-interval must be >= 0 (0 disables polling), not %s", c.PollInterval)
	case c.PollTimeout <= 0:
		return fmt.Errorf("--poll-timeout must be positive, not %s", c.PollTimeout)
	case c.AssignTTL < 0:
		return fmt.Errorf("--assign-ttl must be >= 0 (0: tasks count until completed), not %s", c.AssignTTL)
	case c.LeaseTTL < 0:
		return fmt.Errorf("--lease-ttl must be >= 0 (0: leases do not expire), not %s", c.LeaseTTL)
	case c.MaxWaiters < 1:
		return fmt.Errorf("--max-waiters must be >= 1, not %d", c.MaxWaiters)
	case c.Grace <= 0:
		return fmt.Errorf("--grace must be positive, not %s", c.Grace)
	case c.FailThreshold < 1:
		return fmt.Errorf("--fail-threshold must be >= 1, not %d", c.FailThreshold)
	case c.PassThreshold < 1:
		return fmt.Errorf("--pass-threshold must be >= 1, not %d", c.PassThreshold)
	case c.ProxyRetries < 0:
		return fmt.Errorf("--proxy-retries must be >= 0, not %d", c.ProxyRetries)
	case c.ProxyTimeout < 0:
		return fmt.Errorf("--proxy-timeout must be >= 0 (0: none), not %s", c.ProxyTimeout)
	case c.ProxyMaxBody <= 0:
		return fmt.Errorf("--proxy-max-body must be positive, not %d", c.ProxyMaxBody)
	case c.PrefixIndexTokens < 0:
		return fmt.Errorf("--prefix-index-tokens must be >= 0 (0: the default), not %d", c.PrefixIndexTokens)
	case c.MaxSelectWait <= 0:
		return fmt.Errorf("--max-select-wait must be positive, not %s", c.MaxSelectWait)
	case c.ReadHeaderTimeout <= 0:
		return fmt.Errorf("the read header timeout must be positive, not %s", c.ReadHeaderTimeout)
	case c.JWTLeeway < 0:
		return fmt.Errorf("--jwt-leeway must be >= 0 (0 allows no clock skew), not %s", c.JWTLeeway)
	}
	if err := c.validateStore(); err != nil {
		return err
	}
	if err := c.validateTransport(); err != nil {
		return err
	}
	if c.StickyWait < 0 || c.StickyWait > time.Hour {
		return fmt.Errorf("--sticky-wait must be between 0 and 1h, not %s", c.StickyWait)
	}
	if !(c.StickyLoadFactor >= routing.MinLoadFactor && c.StickyLoadFactor <= routing.MaxLoadFactor) {
		return fmt.Errorf("--sticky-load-factor must be between %g and %g, not %g", routing.MinLoadFactor, routing.MaxLoadFactor, c.StickyLoadFactor)
	}
	switch c.LogFormat {
	case "auto", "text", "json":
	default:
		return fmt.Errorf("--log-format must be text, json or auto, not %q", c.LogFormat)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("--log-level must be debug, info, warn or error, not %q", c.LogLevel)
	}
	return c.validateAuth()
}

// validateStore checks the store settings against each other.
func (c Config) validateStore() error {
	etcdSet := len(c.EtcdEndpoints) > 0 || c.EtcdCA != "" || c.EtcdCert != "" || c.EtcdKey != ""
	peerSet := c.PeerCA != "" || c.PeerCert != "" || c.PeerKey != ""
	switch c.Store {
	case "", StoreMemory, StoreBolt:
		if etcdSet {
			return errors.New("--etcd-endpoints, --etcd-ca, --etcd-cert and --etcd-key need --store etcd")
		}
		if peerSet {
			return errors.New("--peer-ca, --peer-cert and --peer-key are for replicas: they need --store etcd")
		}
		if c.ReplicaTokenFile != "" {
			return errors.New("--replica-token-file is for replicas: it needs --store etcd")
		}
		if c.Store == StoreBolt && c.DataDir == "" {
			return errors.New("--store bolt needs --data-dir")
		}
		if c.Store == StoreMemory && c.DataDir != "" {
			return errors.New("--data-dir is the bolt store's: drop it, or --store memory")
		}
	case StoreEtcd:
		if len(c.EtcdEndpoints) == 0 {
			return errors.New("--store etcd needs --etcd-endpoints, e.g. http://127.0.0.1:2379")
		}
		if c.DataDir != "" {
			return errors.New("--data-dir is the bolt store's; with --store etcd the registration lives in etcd")
		}
		for _, e := range c.EtcdEndpoints {
			if !isHTTPURL(e) {
				return fmt.Errorf("--etcd-endpoints: %q is not an http:// or https:// URL", e)
			}
		}
		if (c.EtcdCert == "") != (c.EtcdKey == "") {
			return errors.New("--etcd-cert and --etcd-key go together")
		}
		if (c.PeerCert == "") != (c.PeerKey == "") {
			return errors.New("--peer-cert and --peer-key go together")
		}
		if c.LeaderTTL < time.Second || c.LeaderTTL%time.Second != 0 {
			return fmt.Errorf("--leader-ttl must be whole seconds, at least 1s (etcd leases are), not %s", c.LeaderTTL)
		}
		if c.AdvertiseURL == "" && c.Addr == "" {
			return errors.New("--store etcd needs --advertise-url, which followers name as the leader's")
		}
		if c.AdvertiseURL != "" && !isHTTPURL(c.AdvertiseURL) {
			return fmt.Errorf("--advertise-url: %q is not an http:// or https:// URL", c.AdvertiseURL)
		}
	default:
		return fmt.Errorf("--store must be %s, %s or %s, not %q", StoreMemory, StoreBolt, StoreEtcd, c.Store)
	}
	return nil
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// storeKind is the store c names, "" resolved.
func (c Config) storeKind() string {
	switch {
	case c.Store != "":
		return c.Store
	case c.DataDir != "":
		return StoreBolt
	default:
		return StoreMemory
	}
}

// validateTransport checks the TLS settings, and refuses plain HTTP on a
// non-loopback address, where bearer tokens would cross the network in
// clear text, unless a TLS-terminating proxy is said to be in front.
// --insecure does not lift it: it is about tokens, not transport.
func (c Config) validateTransport() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key")
	}
	if (c.PolicyClientCert == "") != (c.PolicyClientKey == "") {
		return errors.New("--policy-client-cert and --policy-client-key go together")
	}
	if c.PollClient != nil && (c.PolicyCA != "" || c.PolicyClientCert != "") {
		return errors.New("a poll client and the --policy-* TLS settings are exclusive")
	}
	if c.Addr != "" && c.TLSCert == "" && !c.BehindTLSProxy && !auth.IsLoopbackAddr(c.Addr) {
		return fmt.Errorf("refusing to serve plain HTTP on %s, which is not a loopback address: "+
			"set --tls-cert and --tls-key to serve HTTPS, or pass --behind-tls-proxy when a TLS-terminating proxy in front of the router does TLS", c.Addr)
	}
	return nil
}

// validateAuth refuses an open server on a non-loopback address without
// --insecure, and a replica token file without a token key.
func (c Config) validateAuth() error {
	keyed := c.JWTSecret != "" || c.JWTPublicKey != ""
	if c.Auth != nil && (keyed || c.JWTIssuer != "" || c.JWTAudience != "") {
		return errors.New("a verifier (Auth) and the --jwt-* settings are exclusive")
	}
	if c.Auth == nil && !keyed && c.ReplicaTokenFile != "" {
		// Without a key the leader checks no token either: the file is a
		// mistake, most likely a missing --jwt-public-key.
		return errors.New("--replica-token-file is the token a follower presents to a leader that checks tokens: " +
			"it needs --jwt-public-key (or --jwt-secret)")
	}
	if c.Auth == nil && !keyed && c.Addr != "" && !c.Insecure && !auth.IsLoopbackAddr(c.Addr) {
		return fmt.Errorf("refusing to serve without authentication on %s, which is not a loopback address: "+
			"set --jwt-secret or --jwt-public-key, or pass --insecure to accept the risk", c.Addr)
	}
	return nil
}

// Verifier returns the token verifier: Auth when set, else one built from
// the JWT settings (reading JWTPublicKey), or nil for an open server.
func (c Config) Verifier() (*auth.Verifier, error) {
	if c.Auth != nil {
		return c.Auth, nil
	}
	ac := auth.Config{Issuer: c.JWTIssuer, Audience: c.JWTAudience, Leeway: c.JWTLeeway}
	if c.JWTLeeway == 0 {
		ac.Leeway = auth.NoLeeway // auth's zero is its default
	}
	if c.JWTSecret != "" {
		ac.Secret = []byte(c.JWTSecret)
	}
	if c.JWTPublicKey != "" {
		pem, err := os.ReadFile(c.JWTPublicKey)
		if err != nil {
			return nil, fmt.Errorf("--jwt-public-key: %w", err)
		}
		ac.PublicKeyPEM = pem
	}
	if ac.Secret == nil && ac.PublicKeyPEM == nil {
		return nil, nil
	}
	v, err := auth.NewVerifier(ac)
	if err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	return v, nil
}

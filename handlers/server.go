// Package handlers serves the policyrouter HTTP API: chi routes, middleware
// (request ids, logging, recovery, body limits, auth), request decoding and
// validation, and the one error envelope.
package handlers

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-playground/validator/v10"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/auth"
	"github.com/policyrouter/policyrouter/dashboard"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fleet"
	"github.com/policyrouter/policyrouter/metrics"
	"github.com/policyrouter/policyrouter/poller"
	"github.com/policyrouter/policyrouter/proxy"
	"github.com/policyrouter/policyrouter/registry"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/updates"
)

// DefaultMaxSelectWait is the default of Config.MaxSelectWait.
const DefaultMaxSelectWait = time.Minute

// Config holds the Server's dependencies and settings.
type Config struct {
	Registry *registry.Registry
	State    *routing.State
	Logger   *slog.Logger
	// DefaultRouter is used when a request names none: a router of the
	// routing table offered by both /assign and /select. Default
	// routing.DefaultRouter.
	DefaultRouter string
	// MaxSelectWait caps timeout_ms of /select. Default
	// DefaultMaxSelectWait.
	MaxSelectWait time.Duration
	// DefaultStickyWait is how long a request that names a session but no
	// sticky_wait_ms (X-Sticky-Wait-MS) waits for its busy home. Zero
	// spills at once; routing.DefaultStickyWait is the serve command's
	// default.
	DefaultStickyWait time.Duration
	// DefaultSelectWait is the wait of a /select without timeout_ms.
	// Default 30s, capped by MaxSelectWait.
	DefaultSelectWait time.Duration
	// MaxBodyBytes limits request bodies; PUT /policies gets 16 times more.
	// Default 1 MiB.
	MaxBodyBytes int64
	// Poller, when set, is the idle poller whose figures /stats shows.
	Poller PollerReporter
	// RequestLogLevel is the level of the one log line per request;
	// default Info. Refusals (4xx, 503) keep it; 502 and 504 (the
	// policy's fault, in proxy mode) are logged at Warn, other 5xx at
	// Error.
	RequestLogLevel slog.Level
	// NoAccessLog turns the per-request log line off, but for the
	// requests logged at Warn or Error.
	NoAccessLog bool
	// AccessLogger, when set, writes the per-request lines below Warn
	// (those at Warn and above go to Logger): the serve command's writes
	// them through a buffer, to the same output as Logger. Nil is Logger.
	AccessLogger *slog.Logger
	// Ready reports readiness for /readyz: nil when ready, else why not
	// (an *Error sets the answer's code, else it is not_ready). A nil
	// Ready means always ready. /readyz also requires an available policy
	// in State.
	Ready func() error
	// Metrics, when set, records request, decision and affinity metrics
	// and is served at /metrics.
	Metrics *metrics.Metrics
	// Auth verifies bearer tokens; nil serves without authentication (the
	// serve command allows that only on loopback).
	Auth *auth.Verifier
	// Updates runs rolling weight updates (/updates); nil serves none.
	Updates *updates.Manager
	// Leader, when set, says whether this replica leads (routes) and the
	// leader's advertised URL, if known. A follower answers the routing
	// endpoints (/select, /assign, /release, /complete, /updates and
	// /readyz), and the proxied ones unless Replica is set, 503
	// not_leader, naming the leader. While no leader is known, a routing
	// request waits for one within its wait for a policy (leader_wait.go).
	// Call LeaderChanged at every change of its answer. Nil: a single
	// router, always the leader.
	Leader func() (leading bool, leader string)
	// MaxLeaderWaiters bounds the requests waiting for a leader at once;
	// beyond it they are answered overloaded. Default
	// routing.DefaultMaxWaiters.
	MaxLeaderWaiters int
	// Election, with Leader, reports whether a leader can be elected now:
	// nil, or why not (an *Error store_unavailable when the store does not
	// answer). A request that finds no leader is answered its error at
	// once instead of waiting. Nil: always.
	Election func(ctx context.Context) error
	// OpenAPI is the contract served at /openapi.yaml.
	OpenAPI []byte
	// PeerTLS is the TLS configuration of a follower's requests to the
	// leader: its /stats, and the leases of proxied requests (--peer-ca,
	// --peer-cert); nil for the defaults.
	PeerTLS *tls.Config
	// EngineCapacity asks a policy's server how many requests it runs at
	// once (poller.Poller.EngineCapacity), for a worker registered through
	// SMG's worker API without a capacity (workers.go). It returns a usable
	// capacity even with an error, which says why it is the engine's
	// default. Nil: the engine's default (poller.DefaultCapacity).
	EngineCapacity func(ctx context.Context, p routing.Policy) (int, error)
	// Proxy configures proxy mode (package proxy; proxy_leaser.go).
	Proxy proxy.Options
	// Now is the clock; default time.Now.
	Now func() time.Time
	// FleetLocks is the refit lock of the fleet verbs; nil: the server's
	// own.
	FleetLocks *fleet.Locks
	// Replica, with Leader, makes a follower proxy generate traffic
	// itself, leasing each attempt from the leader (leaser_remote.go);
	// nil: a follower answers it not_leader. Run RunLeases beside it.
	Replica *ReplicaConfig
}

// PollerReporter reports the idle poller's figures; *poller.Poller is one.
type PollerReporter interface {
	Stats() poller.Stats
}

var _ PollerReporter = (*poller.Poller)(nil)

// Server holds the handlers' dependencies. Create it with New.
type Server struct {
	Config
	logger    *slog.Logger
	validator *validator.Validate
	started   time.Time
	observe   func(route, method string, status int, d time.Duration)
	stopping  context.Context
	stop      context.CancelFunc
	refs      atomic.Pointer[policyRefs] // of the last snapshot /assign answered on
	decisions decisionCounts
	// proxy forwards proxied requests (proxy_leaser.go).
	proxy *proxy.Proxy
	// leases is the proxy's Leaser on a replica that proxies whether it
	// leads or not; nil otherwise.
	leases *replicaLeaser
	// peers asks the leader for its stats, and its leases, on a follower.
	peers *http.Client
	// unmapped counts env ids that map to no node (envmap.go).
	unmapped unmappedEnvs
	// engines sends the fleet verbs' calls (fleet.go).
	engines    *engine.Client
	fleetLocks *fleet.Locks
	// pauses holds the refit lock of paused policies (fleet_pause.go).
	pauses pauseHolds
	// leaderWatch wakes the requests waiting for a leader (leader_wait.go).
	leaderWatch leaderWatch
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DefaultRouter == "" {
		cfg.DefaultRouter = routing.DefaultRouter
	}
	if cfg.MaxSelectWait <= 0 {
		cfg.MaxSelectWait = DefaultMaxSelectWait
	}
	if cfg.DefaultSelectWait <= 0 {
		cfg.DefaultSelectWait = 30 * time.Second
	}
	cfg.DefaultSelectWait = min(cfg.DefaultSelectWait, cfg.MaxSelectWait)
	if cfg.MaxLeaderWaiters <= 0 {
		cfg.MaxLeaderWaiters = routing.DefaultMaxWaiters
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{
		Config:    cfg,
		logger:    cfg.Logger,
		validator: newValidator(),
		started:   cfg.Now(),
		observe:   func(string, string, int, time.Duration) {},
	}
	if cfg.Metrics != nil {
		s.observe = cfg.Metrics.ObserveRequest
	}
	s.stopping, s.stop = context.WithCancel(context.Background())
	if cfg.Leader != nil && cfg.Replica != nil {
		s.leases = newReplicaLeaser(s, *cfg.Replica)
	}
	s.proxy = s.newProxy()
	s.fleetLocks = cfg.FleetLocks
	if s.fleetLocks == nil {
		s.fleetLocks = &fleet.Locks{}
	}
	s.engines = &engine.Client{HTTP: &http.Client{Transport: s.proxy.RoundTripper(), CheckRedirect: noRedirect}}
	peers := http.DefaultTransport.(*http.Transport).Clone()
	peers.TLSClientConfig = cfg.PeerTLS
	if s.leases != nil {
		// Two calls to the leader per proxied request: keep as many
		// connections as requests run at once, not DefaultTransport's 2.
		peers.MaxIdleConnsPerHost = 256
	}
	s.peers = &http.Client{Transport: peers}
	return s
}

// Handler returns the API's routes with their middleware.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(requestID, s.logRequests, s.recoverer)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeEnvelope(w, r, http.StatusNotFound, errorf(api.CodeNotFound, "no route for "+r.Method+" "+r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		allowed := allowedMethods(r, req.URL.Path)
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeEnvelope(w, req, http.StatusMethodNotAllowed, errorf(api.CodeMethodNotAllowed,
			"method "+req.Method+" not allowed here; allowed: "+strings.Join(allowed, ", ")))
	})

	r.Get("/healthz", s.healthz)
	r.With(s.leaderOnly).Get("/readyz", s.readyz)
	// The dashboard's files are public; the data they show comes from
	// /stats, which needs a read token when auth is on.
	page := dashboard.Handler()
	for _, p := range dashboard.Paths {
		r.Method(http.MethodGet, p, page)
		r.Method(http.MethodHead, p, page)
	}

	admin := r.With(s.require(auth.ScopeAdmin))
	// The internal lease API: a replica about to lead (the election says
	// it leads; its term has not begun) lets a follower's call wait.
	route := r.With(s.require(auth.ScopeRoute), s.awaitLeaderFor(selectWait))
	read := r.With(s.require(auth.ScopeRead))

	read.Get("/openapi.yaml", s.openapi)
	admin.Post("/policies", s.registerPolicy)
	admin.Put("/policies", s.replacePolicies)
	read.Get("/policies", s.listPolicies)
	read.Get("/policies/{id}", s.getPolicy)
	admin.Delete("/policies/{id}", s.deletePolicy)
	admin.Post("/policies/{id}/drain", s.drainPolicy)
	admin.Post("/policies/{id}/resume", s.resumePolicy)
	read.Get("/policies/"+byIndexSegment+"/{index}", s.getPolicy)
	admin.Delete("/policies/"+byIndexSegment+"/{index}", s.deletePolicy)
	admin.Post("/policies/"+byIndexSegment+"/{index}/drain", s.drainPolicy)
	admin.Post("/policies/"+byIndexSegment+"/{index}/resume", s.resumePolicy)
	admin.Put("/topology", s.putTopology)
	read.Get("/topology", s.getTopology)
	admin.Put("/registration", s.putRegistration)
	admin.Put("/weights", s.putWeights)
	read.Get("/weights", s.getWeights)
	if s.Updates != nil {
		// The leader runs the updates; its manager is the one up to date.
		admin, read := admin.With(s.leaderOnly), read.With(s.leaderOnly)
		admin.Post("/updates", s.startUpdate)
		read.Get("/updates", s.listUpdates)
		read.Get("/updates/{id}", s.getUpdate)
		admin.Post("/updates/{id}/done", s.updateDone)
		admin.Post("/updates/{id}/abort", s.abortUpdate)
	}
	// On a follower, which does not poll, the leader runs the fleet
	// verbs: they wait for its probes to show what they did, and hold the
	// refit lock its updates take (follower_forward.go).
	adminAtLeader := admin.With(s.viaLeader)
	adminAtLeader.Post("/fleet/sleep", s.fleetSleep)
	adminAtLeader.Post("/fleet/wake", s.fleetWake)
	adminAtLeader.Post("/fleet/engine/*", s.fleetEngine)
	read.Get("/registration", s.getRegistration)

	// Where no leader is known, these wait for one (leader_wait.go).
	routed := r.With(s.require(auth.ScopeRoute))
	routed.With(s.awaitLeaderFor(headerWait)).Post("/assign", s.assign)
	routed.With(s.awaitLeaderFor(selectWait)).Post("/select", s.selectPolicy)
	routed.With(s.awaitLeaderFor(askedWait)).Post("/release", s.release)
	routed.With(s.awaitLeaderFor(askedWait)).Post("/complete", s.complete)
	proxied, models := routed.With(s.awaitLeaderFor(headerWait)), routed.With(s.awaitLeaderFor(askedWait))
	if s.leases != nil {
		// Every replica proxies (leaser_remote.go); its Leaser waits for
		// a leader.
		proxied, models = routed, routed
	}
	proxied.Post("/v1/completions", s.proxy.Forward)
	proxied.Post("/v1/chat/completions", s.proxy.Forward)
	proxied.Post("/generate", s.proxy.Forward)
	models.Get("/v1/models", s.proxy.Models)
	s.mountInternal(route)

	s.mountWorkers(r)

	read.Get("/stats", s.stats)
	if s.Metrics != nil {
		read.Method("GET", "/metrics", s.Metrics.Handler())
	}
	return r
}

// leaderOnly answers 503 not_leader on a follower replica, naming the
// leader in the body and in the X-Policyrouter-Leader header. Followers
// do not forward routing calls: a client that knows every replica goes to
// the leader itself, and a dead leader's clients fail over without a
// second hop. (Generate traffic is the exception: with Config.Replica
// every replica proxies it, leasing from the leader.) It guards /readyz
// and /updates; the routing endpoints and the internal lease API, which
// wait for a leader when none is known, have awaitLeaderFor.
func (s *Server) leaderOnly(next http.Handler) http.Handler {
	if s.Leader == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if leading, _ := s.Leader(); leading {
			next.ServeHTTP(w, r)
			return
		}
		s.writeNotLeader(w, r)
	})
}

// writeNotLeader answers 503 not_leader, naming the leader if one is known.
func (s *Server) writeNotLeader(w http.ResponseWriter, r *http.Request) {
	var leader string
	if s.Leader != nil {
		_, leader = s.Leader()
	}
	e := errorf(api.CodeNotLeader, "this replica does not route: no leader is elected yet; retry, or try another replica")
	if leader != "" {
		w.Header().Set(api.LeaderHeader, leader)
		e.Message, e.Leader = "this replica does not route: send routing requests to the leader, "+leader, leader
	}
	s.writeError(w, r, e)
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
}

// readyz answers 200 when this router can route now: it leads (else
// leaderOnly answered not_leader), Ready passes (first probes done, store
// reachable), at least one policy is available, and one of those meets
// the weight-version floor. Otherwise 503 with the reason's code:
// not_ready, store_unavailable, no_policies, all_unavailable (with the
// counts by state and the most frequent last error) or floor_unmet (with
// the floor and the highest version present). /healthz is liveness only.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.Ready != nil {
		if err := s.Ready(); err != nil {
			var e *Error
			if !errors.As(err, &e) {
				e = errorf(api.CodeNotReady, "not ready: "+err.Error())
			}
			s.writeError(w, r, e)
			return
		}
	}
	if s.State != nil {
		av := s.State.Availability()
		if e := unroutable(av); e != nil {
			e.Message = "not ready: " + e.Message
			s.writeError(w, r, e)
			return
		}
		if e := floorUnmet(s.State.Floor(), av.Policies); e != nil {
			s.writeError(w, r, e)
			return
		}
	}
	writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(s.OpenAPI)
}

// Stop ends the waits of /select calls (they answer 503) so that a
// graceful shutdown does not wait for them. Call it when shutdown begins.
func (s *Server) Stop() { s.stop() }

// CloseIdleConnections closes the keep-alive connections the server holds
// open to policies (proxy mode) and to other replicas. Call it once the
// server has stopped serving.
func (s *Server) CloseIdleConnections() {
	s.proxy.CloseIdleConnections()
	s.peers.CloseIdleConnections()
}

// allowedMethods lists the methods routes has for path, for the Allow
// header of a 405.
func allowedMethods(routes chi.Routes, path string) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		if routes.Match(chi.NewRouteContext(), m, path) {
			out = append(out, m)
		}
	}
	return out
}

// require admits requests whose bearer token has scope; without a
// verifier it admits everything.
func (s *Server) require(scope string) func(http.Handler) http.Handler {
	return auth.Middleware(s.Auth, scope, WriteAuthError)
}

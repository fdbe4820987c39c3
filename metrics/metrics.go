// Package metrics exposes policyrouter's Prometheus metrics: request counts
// and latencies per route, decision latency per router, policy states per
// node, poller figures, /select waiters, node-affinity hits versus
// fallbacks and sticky-session hits, spills and misses.
package metrics

import (
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/policyrouter/policyrouter/routing"
)

// Metrics holds the collectors. All methods are safe for concurrent use.
type Metrics struct {
	reg         *prometheus.Registry
	routes      routeCache
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	decision    *prometheus.HistogramVec
	affinity    *prometheus.CounterVec
	probes      *prometheus.CounterVec
	probeTime   prometheus.Histogram
	transitions *prometheus.CounterVec
	updates     *updateMetrics
	proxy       *proxyMetrics
	leader      prometheus.Gauge
	following   atomic.Bool // SetLeader(false): a follower
	// The decision and affinity series of every router of the table,
	// resolved once in New: read-only afterwards.
	decisions   map[decisionKey]prometheus.Observer
	affinities  map[decisionKey]affinityCounters
	envUnmapped prometheus.Counter // env.go
}

// decisionKey names the series of one endpoint's decisions by one router.
type decisionKey struct{ endpoint, router string }

type affinityCounters struct{ hit, fallback prometheus.Counter }

// New registers policyrouter's metrics, Go runtime and process metrics, and
// the live policy gauges read from state at each scrape.
func New(state *routing.State) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyrouter_http_requests_total",
			Help: "HTTP requests by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "policyrouter_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern and method (a /select includes its wait).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "method"}),
		decision: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "policyrouter_decision_duration_seconds",
			Help:    "Time the routing core took to decide, by endpoint and router (a /select decision includes waiting for an idle policy).",
			Buckets: []float64{.000001, .0000025, .000005, .00001, .000025, .00005, .0001, .00025, .0005, .001, .005, .01, .1, 1, 10},
		}, []string{"endpoint", "router"}),
		affinity: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyrouter_affinity_decisions_total",
			Help: "Decisions for env ids whose node is known: hit when the policy is on the env's node, fallback otherwise.",
		}, []string{"endpoint", "router", "outcome"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyrouter_poll_probes_total",
			Help: "Idle probes sent to policies, by result (ok or failed).",
		}, []string{"result"}),
		probeTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "policyrouter_poll_probe_duration_seconds",
			Help:    "Latency of idle probes.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyrouter_health_transitions_total",
			Help: "Policy health transitions caused by probes, by new state.",
		}, []string{"to"}),
	}
	// Every series whose labels are known up front starts at zero, so that
	// rate() and dashboards see it before its first event.
	m.decisions = make(map[decisionKey]prometheus.Observer)
	m.affinities = make(map[decisionKey]affinityCounters)
	for _, r := range routing.Routers() {
		for endpoint, offered := range map[string]bool{"assign": r.Assign != nil, "select": r.Select != nil} {
			if !offered {
				continue
			}
			k := decisionKey{endpoint, r.Name}
			m.decisions[k] = m.decision.WithLabelValues(endpoint, r.Name)
			if r.EnvAffine {
				m.affinities[k] = affinityCounters{
					hit:      m.affinity.WithLabelValues(endpoint, r.Name, "hit"),
					fallback: m.affinity.WithLabelValues(endpoint, r.Name, "fallback"),
				}
			}
		}
	}
	for _, result := range []string{"ok", "failed"} {
		m.probes.WithLabelValues(result)
	}
	for _, to := range []string{"unhealthy", "healthy"} {
		m.transitions.WithLabelValues(to)
	}
	m.leader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "policyrouter_leader",
		Help: "1 while this router routes: always for a router on a store of its own; for replicas on etcd, the elected leader.",
	})
	m.updates = newUpdateMetrics()
	m.reg.MustRegister(m.updates.collectors()...)
	m.proxy = newProxyMetrics()
	m.reg.MustRegister(m.proxy.collectors()...)
	m.envUnmapped = newEnvUnmapped()
	m.reg.MustRegister(m.envUnmapped)
	m.reg.MustRegister(m.leader, m.requests, m.latency, m.decision, m.affinity, m.probes, m.probeTime, m.transitions,
		&stateCollector{state: state, following: &m.following, updates: m.updates, now: time.Now},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// SetLeader records whether this router routes.
//
// A follower does not poll: its view of the policies is every one unknown.
// It exports no policy-state series then (policyrouter_policies and the
// other live gauges of the routing state), so that a scrape of every
// replica sums to the leader's figures and no dashboard or alert reads the
// follower's blind view.
func (m *Metrics) SetLeader(leading bool) {
	m.following.Store(!leading)
	if leading {
		m.leader.Set(1)
	} else {
		m.leader.Set(0)
	}
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry returns the registry, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveRequest records one HTTP request.
func (m *Metrics) ObserveRequest(route, method string, status int, d time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	o := m.routes.get(routeKey{route, method, status}, func() routeObservers {
		return routeObservers{
			count:   m.requests.WithLabelValues(route, method, strconv.Itoa(status)),
			latency: m.latency.WithLabelValues(route, method),
		}
	})
	o.count.Inc()
	o.latency.Observe(d.Seconds())
}

// routeKey names the series of one kind of request. Route is the chi
// pattern, so the set of keys is small and bounded.
type routeKey struct {
	route, method string
	status        int
}

type routeObservers struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

// routeCache keeps each request kind's series, so that a request costs one
// map lookup instead of hashing its label values in two vectors. The map is
// copied on the rare write (a kind of request not seen before), so that
// reads take no lock.
type routeCache struct {
	mu sync.Mutex // serialises writers
	m  atomic.Pointer[map[routeKey]routeObservers]
}

func (c *routeCache) get(k routeKey, newObservers func() routeObservers) routeObservers {
	if m := c.m.Load(); m != nil {
		if o, ok := (*m)[k]; ok {
			return o
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if o, ok := (*old)[k]; ok {
			return o
		}
	}
	next := make(map[routeKey]routeObservers, 1)
	if old != nil {
		maps.Copy(next, *old)
	}
	o := newObservers()
	next[k] = o
	c.m.Store(&next)
	return o
}

// ObserveDecision records the time one routing decision took.
func (m *Metrics) ObserveDecision(endpoint, router string, d time.Duration) {
	if o, ok := m.decisions[decisionKey{endpoint, router}]; ok {
		o.Observe(d.Seconds())
		return
	}
	m.decision.WithLabelValues(endpoint, router).Observe(d.Seconds())
}

// ObserveAffinity counts node-affinity hits and fallbacks.
func (m *Metrics) ObserveAffinity(endpoint, router string, hits, fallbacks int) {
	c, ok := m.affinities[decisionKey{endpoint, router}]
	if hits > 0 {
		if !ok {
			c.hit = m.affinity.WithLabelValues(endpoint, router, "hit")
		}
		c.hit.Add(float64(hits))
	}
	if fallbacks > 0 {
		if !ok {
			c.fallback = m.affinity.WithLabelValues(endpoint, router, "fallback")
		}
		c.fallback.Add(float64(fallbacks))
	}
}

// ObserveProbe records one idle probe and the health transition it caused.
func (m *Metrics) ObserveProbe(p routing.Probe, tr routing.Transition) {
	if p.OK {
		m.probes.WithLabelValues("ok").Inc()
	} else {
		m.probes.WithLabelValues("failed").Inc()
	}
	m.probeTime.Observe(p.Latency.Seconds())
	switch tr {
	case routing.BecameHealthy:
		m.transitions.WithLabelValues("healthy").Inc()
	case routing.BecameUnhealthy:
		m.transitions.WithLabelValues("unhealthy").Inc()
	}
}

// stateCollector reads the routing state at scrape time, so the gauges are
// never stale and cost nothing between scrapes.
//
// One scrape reads the routing state once, for every series below and the
// per-policy in-flight and hang gauges (proxy.go, hang.go).
type stateCollector struct {
	state     *routing.State
	following *atomic.Bool // set on a follower: no policy-state series
	updates   *updateMetrics
	now       func() time.Time
}

var (
	policiesDesc = prometheus.NewDesc("policyrouter_policies",
		"Registered policies by node and state (idle, busy, unhealthy, draining, unknown).", []string{"node", "state"}, nil)
	waitersDesc = prometheus.NewDesc("policyrouter_select_waiters",
		"/select calls waiting for an idle policy.", nil, nil)
	leasesDesc = prometheus.NewDesc("policyrouter_leases",
		"Leases out (selected policies not yet released or seen idle).", nil, nil)
	loadDesc = prometheus.NewDesc("policyrouter_node_load",
		"Tracked load (tasks assigned and not completed) per node.", []string{"node"}, nil)
	inflightDesc = prometheus.NewDesc("policyrouter_node_inflight",
		"/select hand-outs in flight (leases out) per node; over policyrouter_node_capacity, the node's utilisation.", []string{"node"}, nil)
	versionDesc = prometheus.NewDesc("policyrouter_policies_by_version",
		"Registered policies by weight version (as registered, or reported by their /idle answers).", []string{"version"}, nil)
	capacityDesc = prometheus.NewDesc("policyrouter_node_capacity",
		"Concurrent /select hand-outs the node's policies take in all.", []string{"node"}, nil)
	leasesEndedDesc = prometheus.NewDesc("policyrouter_leases_ended_total",
		"Leases ended, by how: release (its holder), ttl (its lease TTL), probe (an idle answer ended an on_idle lease), removed (its policy left, or the router reset), aborted (a weight update aborted its work).", []string{"how"}, nil)
	occupancyDesc = prometheus.NewDesc("policyrouter_node_occupancy",
		"Capacity taken per node: the sum over its policies of max(engine load, outside load + leases); over policyrouter_node_capacity, what the engines and the router together hold.", []string{"node"}, nil)
	stickyDesc = prometheus.NewDesc("policyrouter_sticky_total",
		"/select calls and /assign tasks that named a session, by outcome: hit (its first ring successor), spill (home busy past sticky_wait_ms, the router's pick) or miss (first successor unavailable or at the load bound).", []string{"outcome"}, nil)
)

var _ prometheus.Collector = (*stateCollector)(nil)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- policiesDesc
	ch <- waitersDesc
	ch <- leasesDesc
	ch <- loadDesc
	ch <- inflightDesc
	ch <- capacityDesc
	ch <- versionDesc
	ch <- stickyDesc
	ch <- leasesEndedDesc
	ch <- occupancyDesc
	ch <- policyInflightDesc
	ch <- oldestLeaseDesc
	ch <- oldestTaskDesc
	ch <- leaseTTLDesc
	ch <- phaseAgeDesc
	describePrefix(ch)
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.state.Stats()
	collectPolicyInflight(ch, st)
	c.collectHang(ch, st)
	if c.following.Load() {
		return
	}
	type key struct{ node, state string }
	counts := make(map[key]int)
	loads := make(map[string]int64)
	inflight := make(map[string]int)
	capacity := make(map[string]int)
	occupancy := make(map[string]int64)
	versions := make(map[int64]int)
	for _, p := range st.Policies {
		versions[p.Version]++
		inflight[p.Node] += p.Inflight
		occupancy[p.Node] += p.Occupancy
		capacity[p.Node] += p.Capacity
		for _, s := range routing.States {
			counts[key{p.Node, s}] += 0 // every state of a node is reported, zeros included
		}
		counts[key{p.Node, p.State}]++
		loads[p.Node] += p.Load
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(policiesDesc, prometheus.GaugeValue, float64(n), k.node, k.state)
	}
	for node, l := range loads {
		ch <- prometheus.MustNewConstMetric(loadDesc, prometheus.GaugeValue, float64(l), node)
		ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(inflight[node]), node)
		ch <- prometheus.MustNewConstMetric(capacityDesc, prometheus.GaugeValue, float64(capacity[node]), node)
		ch <- prometheus.MustNewConstMetric(occupancyDesc, prometheus.GaugeValue, float64(occupancy[node]), node)
	}
	for v, n := range versions {
		ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, float64(n), strconv.FormatInt(v, 10))
	}
	ch <- prometheus.MustNewConstMetric(waitersDesc, prometheus.GaugeValue, float64(st.Waiters))
	ch <- prometheus.MustNewConstMetric(leasesDesc, prometheus.GaugeValue, float64(st.Leases))
	ch <- prometheus.MustNewConstMetric(stickyDesc, prometheus.CounterValue, float64(st.Sticky.Hits), "hit")
	ch <- prometheus.MustNewConstMetric(stickyDesc, prometheus.CounterValue, float64(st.Sticky.Spills), "spill")
	ch <- prometheus.MustNewConstMetric(stickyDesc, prometheus.CounterValue, float64(st.Sticky.Misses), "miss")
	for how, n := range st.LeasesEnded {
		ch <- prometheus.MustNewConstMetric(leasesEndedDesc, prometheus.CounterValue, float64(n), how)
	}
	collectPrefix(ch, c.state)
}

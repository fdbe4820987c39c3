package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/policyrouter/policyrouter/routing"
)

// proxyMetrics are the figures of proxy mode: proxied requests by policy
// and status, time to the first byte of the answer, whole duration, and
// the requests in flight per policy (its leases, read at each scrape).
type proxyMetrics struct {
	requests *prometheus.CounterVec
	ttfb     prometheus.Histogram
	duration prometheus.Histogram
	state    *routing.State
}

var policyInflightDesc = prometheus.NewDesc("policyrouter_policy_inflight",
	"Requests in flight per policy: its leases out, which in proxy mode are exactly its proxied requests.",
	[]string{"policy"}, nil)

func newProxyMetrics(state *routing.State) *proxyMetrics {
	return &proxyMetrics{
		state: state,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyrouter_proxy_requests_total",
			Help: "Proxied requests by policy index and the policy's status code (502: it could not be reached).",
		}, []string{"policy", "code"}),
		ttfb: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "policyrouter_proxy_first_byte_seconds",
			Help:    "Time from forwarding a proxied request to the policy's response headers.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "policyrouter_proxy_duration_seconds",
			Help:    "Duration of proxied requests per attempt, streaming included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 20),
		}),
	}
}

func (p *proxyMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{p.requests, p.ttfb, p.duration, p}
}

// Describe and Collect export the per-policy in-flight gauge.
func (p *proxyMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- policyInflightDesc }

func (p *proxyMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, ps := range p.state.Stats().Policies {
		ch <- prometheus.MustNewConstMetric(policyInflightDesc, prometheus.GaugeValue, float64(ps.Inflight), strconv.Itoa(ps.Policy.Index))
	}
}

// ObserveProxy records one attempt of a proxied request on the policy
// with the given index: its status (0 when no answer came), the time to
// its first byte (0 when none) and its duration.
func (m *Metrics) ObserveProxy(index, status int, ttfb, d time.Duration) {
	m.proxy.requests.WithLabelValues(strconv.Itoa(index), strconv.Itoa(status)).Inc()
	if ttfb > 0 {
		m.proxy.ttfb.Observe(ttfb.Seconds())
	}
	m.proxy.duration.Observe(d.Seconds())
}

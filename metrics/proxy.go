package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/policyrouter/policyrouter/routing"
)

// proxyMetrics are the figures of proxy mode: proxied requests by policy
// and status, time to the first byte of the answer and whole duration.
// The requests in flight per policy (its leases) are read at each scrape
// with the rest of the routing state (collectPolicyInflight).
type proxyMetrics struct {
	requests *prometheus.CounterVec
	ttfb     prometheus.Histogram
	duration prometheus.Histogram
}

var policyInflightDesc = prometheus.NewDesc("policyrouter_policy_inflight",
	"Requests in flight per policy: its leases out, which in proxy mode are exactly its proxied requests.",
	[]string{"policy"}, nil)

func newProxyMetrics() *proxyMetrics {
	return &proxyMetrics{
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
	return []prometheus.Collector{p.requests, p.ttfb, p.duration}
}

// collectPolicyInflight exports the per-policy in-flight gauge from st.
func collectPolicyInflight(ch chan<- prometheus.Metric, st routing.Stats) {
	for _, ps := range st.Policies {
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

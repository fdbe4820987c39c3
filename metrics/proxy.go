package metrics

import (
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
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

	// The tokens of the answers, as the engines counted them, and the
	// generations resumed: each series resolved once.
	tokens                   *prometheus.CounterVec
	promptTokens, completion prometheus.Counter
	lagTokens                *prometheus.CounterVec
	byLag                    [len(lagLabels)]prometheus.Counter
	resumes                  *prometheus.CounterVec
	resumed, incomplete      prometheus.Counter

	// counters holds the requests series already used, by policy index
	// and status, so that an attempt costs one map lookup instead of
	// formatting and hashing two labels. The map is copied on the rare
	// write (a series not seen before), so that reads take no lock.
	countersMu sync.Mutex // serialises writers
	counters   atomic.Pointer[map[proxyKey]prometheus.Counter]
}

type proxyKey struct{ index, status int }

var policyInflightDesc = prometheus.NewDesc("policyrouter_policy_inflight",
	"Requests in flight per policy: its leases out, which in proxy mode are exactly its proxied requests.",
	[]string{"policy"}, nil)

// lagLabels are the values of the lag label: how many versions behind the
// newest the policy that generated the tokens was, 3 and more together.
var lagLabels = [...]string{"0", "1", "2", "3+"}

// Outcomes of a resumable generation that was aborted at least once
// (ObserveResume).
const (
	ResumeResumed    = "resumed"    // continued to its end, its segments joined
	ResumeIncomplete = "incomplete" // ended with the tokens so far
)

func newProxyMetrics() *proxyMetrics {
	p := &proxyMetrics{
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
	p.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "policyrouter_proxy_tokens_total",
		Help: "Prompt and completion tokens of proxied answers, as the engines counted them (SGLang meta_info, OpenAI usage).",
	}, []string{"kind"})
	p.promptTokens, p.completion = p.tokens.WithLabelValues("prompt"), p.tokens.WithLabelValues("completion")
	p.lagTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "policyrouter_proxy_completion_tokens_by_lag_total",
		Help: "Completion tokens of proxied answers by how many weight versions the generating policy was behind the newest version the proxy had dispatched to (0, 1, 2, 3+).",
	}, []string{"lag"})
	for i, l := range lagLabels {
		p.byLag[i] = p.lagTokens.WithLabelValues(l)
	}
	p.resumes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "policyrouter_resumes_total",
		Help: "Resumable generations that an abort or a death interrupted, by outcome: resumed (continued to the end) or incomplete (answered with the tokens so far).",
	}, []string{"outcome"})
	p.resumed, p.incomplete = p.resumes.WithLabelValues(ResumeResumed), p.resumes.WithLabelValues(ResumeIncomplete)
	return p
}

// ObserveTokens records one attempt's prompt and completion tokens, the
// completion generated lag versions behind the newest.
func (m *Metrics) ObserveTokens(prompt, completion int, lag int64) {
	p := m.proxy
	if prompt > 0 {
		p.promptTokens.Add(float64(prompt))
	}
	if completion > 0 {
		p.completion.Add(float64(completion))
		p.byLag[min(max(lag, 0), int64(len(lagLabels)-1))].Add(float64(completion))
	}
}

// ObserveResume records how an interrupted resumable generation ended:
// ResumeResumed or ResumeIncomplete.
func (m *Metrics) ObserveResume(outcome string) {
	if outcome == ResumeResumed {
		m.proxy.resumed.Inc()
	} else {
		m.proxy.incomplete.Inc()
	}
}

func (p *proxyMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{p.requests, p.ttfb, p.duration, p.tokens, p.lagTokens, p.resumes}
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
	m.proxy.counter(proxyKey{index, status}).Inc()
	if ttfb > 0 {
		m.proxy.ttfb.Observe(ttfb.Seconds())
	}
	m.proxy.duration.Observe(d.Seconds())
}

// counter returns the requests series of k.
func (p *proxyMetrics) counter(k proxyKey) prometheus.Counter {
	if m := p.counters.Load(); m != nil {
		if c, ok := (*m)[k]; ok {
			return c
		}
	}
	p.countersMu.Lock()
	defer p.countersMu.Unlock()
	old := p.counters.Load()
	if old != nil {
		if c, ok := (*old)[k]; ok {
			return c
		}
	}
	next := make(map[proxyKey]prometheus.Counter, 1)
	if old != nil {
		maps.Copy(next, *old)
	}
	c := p.requests.WithLabelValues(strconv.Itoa(k.index), strconv.Itoa(k.status))
	next[k] = c
	p.counters.Store(&next)
	return c
}

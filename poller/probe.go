package poller

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/routing"
)

// probeAndReport probes m once and reports the result to the target, unless
// the poller is stopping (ctx done: the failure is ours, not the policy's)
// or m was unregistered meanwhile.
func (p *Poller) probeAndReport(ctx context.Context, m *member) {
	sent := p.now()
	pr, err := p.probe(ctx, m)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		pr = routing.Probe{} // what a failed probe says is its error alone
	}
	pr.SentAt, pr.Latency, pr.OK = sent, p.now().Sub(sent), err == nil
	p.probes.Add(1)
	p.recent.add(sent, err != nil)
	m.recent.add(sent, err != nil)
	if err != nil {
		pr.Err, pr.ErrKind = err.Error(), errKind(err)
		p.failures.Add(1)
		if p.log.Enabled(ctx, slog.LevelDebug) {
			p.log.Debug("probe failed", "policy_id", m.id, "index", m.index, "url", m.shown, "error", err)
		}
	}
	if m.gone.Load() {
		return
	}
	tr := p.target.ObserveProbe(m.id, pr)
	// Each transition at Debug; the round's summary (healthLog) at Warn
	// or Info.
	switch tr {
	case routing.BecameUnhealthy:
		p.log.Debug("policy unhealthy", "policy_id", m.id, "index", m.index, "url", m.shown, "error", err, "error_kind", pr.ErrKind)
	case routing.BecameHealthy:
		p.log.Debug("policy healthy again", "policy_id", m.id, "index", m.index, "url", m.shown, "latency", pr.Latency)
	}
	if tr != routing.NoTransition {
		p.health.add(m, tr, pr.ErrKind, err)
	}
	if p.onProbe != nil {
		p.onProbe(m.id, pr, tr)
	}
}

// probe asks m's server once, in its engine's wire format, bounded by
// the poller's timeout. Any error is a failed probe.
func (p *Poller) probe(ctx context.Context, m *member) (engine.Answer, error) {
	if m.err != nil {
		return engine.Answer{}, m.err
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	a, err := engine.Probe(ctx, p.client, m.srv)
	if err != nil {
		return engine.Answer{}, fmt.Errorf("policy %s: %w", m.id, err)
	}
	return a, nil
}

// noRedirect makes a client return a 3xx answer as is.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// newTransport returns the transport of the default client: keep-alive
// connections for many policies (each policy holds at most one, since it is
// never probed twice at once; policies behind one host:port share up to
// concurrency), no proxy from the environment (policies are reached
// directly), no compression, HTTP/1.1. The probe's context bounds each
// request; the dial and TLS timeouts only repeat it.
func newTransport(concurrency int, timeout time.Duration, tlsConf *tls.Config) *http.Transport {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext:            d.DialContext,
		MaxIdleConns:           0, // no overall limit: one idle connection per policy
		MaxIdleConnsPerHost:    concurrency,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    timeout,
		MaxResponseHeaderBytes: 64 << 10,
		DisableCompression:     true,
		TLSClientConfig:        tlsConf, // nil: the system's roots
	}
}

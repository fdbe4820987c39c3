package poller

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/policyrouter/policyrouter/routing"
)

// maxDrain is how much of an unread body is drained so that the connection
// can be reused; a longer body costs the connection instead.
const maxDrain = 64 << 10

// answer is a parsed /idle answer.
type answer struct {
	idle       bool
	load       int64
	hasLoad    bool
	version    int64
	hasVersion bool
	// weightVersion is the version as the server wrote it, when
	// hasVersion.
	weightVersion string
}

// probeAndReport probes m once and reports the result to the target, unless
// the poller is stopping (ctx done: the failure is ours, not the policy's)
// or m was unregistered meanwhile.
func (p *Poller) probeAndReport(ctx context.Context, m *member) {
	sent := p.now()
	ans, err := p.probe(ctx, m)
	pr := routing.Probe{SentAt: sent, Latency: p.now().Sub(sent), OK: err == nil}
	if ctx.Err() != nil {
		return
	}
	if err == nil {
		pr.Idle, pr.Load, pr.HasLoad = ans.idle, ans.load, ans.hasLoad
		pr.Version, pr.HasVersion, pr.WeightVersion = ans.version, ans.hasVersion, ans.weightVersion
	}
	p.probes.Add(1)
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
func (p *Poller) probe(ctx context.Context, m *member) (answer, error) {
	if m.err != nil {
		return answer{}, m.err
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	a, err := m.eng.probe(ctx, p, m)
	if err != nil {
		return answer{}, fmt.Errorf("policy %s: %w", m.id, err)
	}
	return a, nil
}

// nativeEngine is the "policyrouter" engine: the server answers
// policyrouter's own GET /idle contract (parseAnswer). It is the hot
// path of the poller, so it reads into pooled buffers.
//
// Its update has no engine steps: a rolling update sends the trainer's own
// action (POST /updates "action") or waits for the trainer's done, and
// drains the policy first (pause mode "wait" only).
type nativeEngine struct{}

var _ engine = nativeEngine{}

func (nativeEngine) PauseModes() []string                     { return []string{PauseWait} }
func (nativeEngine) Pause(string) (Call, bool)                { return Call{}, false }
func (nativeEngine) LoadFromDisk(string, string) (Call, bool) { return Call{}, false }
func (nativeEngine) SetVersion(string) (Call, bool)           { return Call{}, false }
func (nativeEngine) Resume() (Call, bool)                     { return Call{}, false }

func (nativeEngine) probe(ctx context.Context, p *Poller, m *member) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.idleURL, nil)
	if err != nil {
		return answer{}, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "policyrouter-poller")
	if key := m.pol.BearerFor(false); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer func() {
		// Drain and close so that the connection goes back to the pool.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
		_ = resp.Body.Close()
	}()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return answer{}, &statusError{endpoint: "GET " + m.errURL, status: resp.StatusCode}
	}
	buf := bodyPool.Get().(*[]byte)
	defer bodyPool.Put(buf)
	n, err := readBody(resp.Body, *buf)
	if errors.Is(err, errTooLarge) {
		return answer{}, &decodeError{fmt.Errorf("GET %s: read body: %w", m.errURL, err)}
	}
	if err != nil {
		return answer{}, fmt.Errorf("GET %s: read body: %w", m.errURL, err)
	}
	ans, err := parseAnswer((*buf)[:n])
	if err != nil {
		return answer{}, &decodeError{fmt.Errorf("GET %s: %w", m.errURL, err)}
	}
	if ans.hasVersion {
		ans.weightVersion = strconv.FormatInt(ans.version, 10)
	}
	return ans, nil
}

// bodyPool holds buffers one byte longer than MaxBodyBytes, to tell a body
// of exactly MaxBodyBytes from a longer one.
var bodyPool = sync.Pool{New: func() any {
	b := make([]byte, MaxBodyBytes+1)
	return &b
}}

var errTooLarge = fmt.Errorf("body exceeds %d bytes", MaxBodyBytes)

// readBody reads r into buf until EOF. It fails when r holds more than
// len(buf)-1 bytes.
func readBody(r io.Reader, buf []byte) (int, error) {
	n, err := io.ReadFull(r, buf)
	switch {
	case err == nil:
		return n, errTooLarge
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return n, nil
	default:
		return n, err
	}
}

// idleJSON is the object form of an /idle answer. Other fields are allowed.
type idleJSON struct {
	Idle *bool  `json:"idle"`
	Load *int64 `json:"load"`
	// Version is the policy's weight version; weight_version is accepted
	// too, for servers that already report it under that name.
	Version       *int64 `json:"version"`
	WeightVersion *int64 `json:"weight_version"`
}

// parseAnswer reads an /idle answer: a bare true or false, or an object
// with a boolean "idle" and an optional integer "load" (null counts as
// absent). Anything else is an error.
func parseAnswer(body []byte) (answer, error) {
	b := bytes.TrimSpace(body)
	switch string(b) {
	case "true":
		return answer{idle: true}, nil
	case "false":
		return answer{idle: false}, nil
	}
	if len(b) == 0 || b[0] != '{' {
		return answer{}, fmt.Errorf("not an idle answer: %q", truncate(b, 64))
	}
	var v idleJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return answer{}, fmt.Errorf("decode idle answer: %w", err)
	}
	if v.Idle == nil {
		return answer{}, errors.New(`idle answer has no boolean "idle"`)
	}
	a := answer{idle: *v.Idle}
	if v.Load != nil {
		a.load, a.hasLoad = *v.Load, true
	}
	if v.Version == nil {
		v.Version = v.WeightVersion
	}
	if v.Version != nil {
		if *v.Version < 0 {
			return answer{}, fmt.Errorf(`idle answer has a negative "version" %d`, *v.Version)
		}
		a.version, a.hasVersion = *v.Version, true
	}
	return a, nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
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

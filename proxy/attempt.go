package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/prefix"
	"github.com/policyrouter/policyrouter/routing"
)

// errRetryable is ModifyResponse's answer to a 502 or 503: the attempt
// ends before any byte reached the client, and another policy is tried.
var errRetryable = errors.New("upstream answered 502 or 503")

// attempt is one forwarding of a proxied request to one policy.
type attempt struct {
	d      routing.Decision
	apiKey string
	start  time.Time
	retry  bool // ended before the response began, retryably
	failed bool // the policy failed: count it against its health
	// over is set once the policy's work on the attempt is over as far
	// as the proxy can tell: its answer was read to the end (or to its
	// last chunk), it refused the request (502, 503), or the request
	// never reached it. Otherwise the lease ends Unfinished.
	over   bool
	reason string
	status int
	ttfb   time.Duration
	resume *resumeState  // a resumable request's (resume.go), or nil
	prompt *prompt       // its blocks, under prefix-cache affinity (prefix.go), or nil
	chain  []prefix.Hash // the prompt's blocks and the output's after them, once known
	// cached is the prompt tokens the engine said it had cached, when
	// cachedKnown; prompt and completion tokens as it counted them
	// (noteUsage).
	cached            int
	cachedKnown       bool
	promptN, complete int
	body              upstreamBody // the answer's body, watched (one allocation with the attempt)
}

type attemptKey struct{}

func attemptFrom(ctx context.Context) *attempt { a, _ := ctx.Value(attemptKey{}).(*attempt); return a }

// newReverseProxy returns the one ReverseProxy of the proxy; each
// request's attempt rides in its context.
func (p *Proxy) newReverseProxy() *httputil.ReverseProxy {
	tr := p.Options.Transport
	if tr == nil {
		tr = NewTransport(nil)
	}
	return &httputil.ReverseProxy{
		Transport: tr,
		// FlushInterval stays 0: ReverseProxy flushes text/event-stream
		// answers, and answers of unknown length, after every write by
		// itself (httputil's flushInterval), and a JSON answer of known
		// length then goes out in one write instead of one per buffer.
		BufferPool: copyBuffers,
		Rewrite: func(pr *httputil.ProxyRequest) {
			a := attemptFrom(pr.In.Context())
			pr.SetURL(p.target(a.d.Policy.URL))
			pr.SetXForwarded()
			// A request with an idempotency key is one http.Transport may
			// send again after it was written (Request.isReplayable): the
			// key is the client's promise to the router, not the engine's.
			delete(pr.Out.Header, "Idempotency-Key")
			delete(pr.Out.Header, "X-Idempotency-Key")
			if pr.Out.Body != nil {
				// The attempt's in-memory copy of the body, which ReverseProxy
				// wrapped: unwrapped, the transport sends the head and the body
				// in one write instead of flushing the head first.
				pr.Out.Body = pr.In.Body
			}
			// The router's own token never reaches an engine; the policy's
			// key does.
			delete(pr.Out.Header, "Authorization")
			if a.apiKey != "" {
				pr.Out.Header["Authorization"] = []string{"Bearer " + a.apiKey}
			}
		},
		ModifyResponse: func(res *http.Response) error {
			return p.answer(res, attemptFrom(res.Request.Context()))
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.attemptError(w, r, attemptFrom(r.Context()), err)
		},
	}
}

// defaultMaxIdlePerHost is how many idle connections the proxy keeps per
// policy: a batching engine takes tens of requests at once, and with
// http.DefaultTransport's 2 every other request would pay a new one.
const defaultMaxIdlePerHost = 256

// NewTransport is the transport of proxy mode: http.DefaultTransport's
// settings (its dial, TLS handshake and idle timeouts, HTTP/2 towards
// https:// policies, the environment's proxy), keep-alive connections up
// to 256 idle per policy without a bound over all, and tc's TLS towards
// https:// policies (nil: the system's roots). It adds no Accept-Encoding
// of its own: a request goes out with the client's, and an answer comes
// back as the policy sent it, never decompressed on the way.
//
// It never sends a written POST twice: http.Transport sends a request
// again on a new connection only when nothing of it was written, or when
// it is replayable (GET, HEAD, or a request with an Idempotency-Key,
// which the proxy strips in Rewrite).
func NewTransport(tc *tls.Config) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = defaultMaxIdlePerHost
	t.DisableCompression = true
	t.TLSClientConfig = tc
	return t
}

// answer takes a policy's answer to an attempt before it is copied to
// the client: its figures, the router's headers, the body watched (or
// resumed); a 502 or 503 is errRetryable.
func (p *Proxy) answer(res *http.Response, a *attempt) error {
	a.status, a.ttfb = res.StatusCode, time.Since(a.start)
	if res.StatusCode == http.StatusBadGateway || res.StatusCode == http.StatusServiceUnavailable {
		a.over = true // refused: the policy runs nothing of it
		return errRetryable
	}
	// The canonical keys, and one array for the four values.
	h := res.Header
	version := strconv.FormatInt(a.d.Version, 10)
	label := a.d.WeightLabel
	if label == "" {
		label = version // weightLabel's, without formatting it again
	}
	v := []string{strconv.Itoa(a.d.Policy.Index), a.d.Policy.ID, version, label}
	h[canonicalPolicyIndex], h[canonicalPolicyID], h[canonicalWeightVersion] = v[0:1:1], v[1:2:2], v[2:3:3]
	if a.resume == nil || a.resume.stream == nil {
		// One segment, every output token; a resumed answer names its
		// segments instead, and a resumable stream in its trailers.
		h[canonicalWeightVersions] = v[3:4:4]
	}
	if a.d.EnvUnmapped {
		h.Set(HeaderEnvUnmapped, "true")
	}
	if a.prompt != nil {
		h.Set(HeaderPrefixMatch, strconv.Itoa(a.prompt.units(a.d.PrefixMatch)))
		h.Set(HeaderPrefixOutcome, a.d.PrefixOutcome)
	}
	if a.resume != nil && a.resume.stream != nil {
		return a.resume.resumeStream(res, a)
	}
	if a.resume != nil && !isEventStream(h) {
		return a.resume.resumeAnswer(res, a)
	}
	a.body = upstreamBody{ReadCloser: res.Body, a: a, stream: isEventStream(res.Header)}
	res.Body = &a.body
	return nil
}

// attemptError ends an attempt that failed before its answer began: to
// be retried (a.retry), or answered here; r's context tells a client
// that left.
func (p *Proxy) attemptError(w http.ResponseWriter, r *http.Request, a *attempt, err error) {
	switch {
	case r.Context().Err() != nil && !errors.Is(r.Context().Err(), context.DeadlineExceeded):
		// The client left: nobody to answer.
	case errors.Is(err, errRetryable):
		a.retry = true
		if a.reason == "" { // resumeAnswer may have said why
			a.reason = "answered " + strconv.Itoa(a.status)
		}
	case isDialError(err):
		// Never sent: nothing of it runs there.
		a.retry, a.failed, a.over, a.reason = true, true, true, "connect: "+err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		a.failed, a.reason = true, "did not answer within --proxy-timeout ("+p.Timeout.String()+")"
		p.WriteError(w, r, errorf(api.CodeUpstreamTimeout, "the policy "+a.reason))
	default:
		// Written, perhaps run: never sent again.
		a.failed = true
		if a.reason == "" { // resumeAnswer may have said why
			a.reason = "failed before answering: " + err.Error()
		}
		p.WriteError(w, r, errorf(api.CodeUpstreamFailed, "the policy "+a.reason))
	}
}

// maxTargets bounds the cache of parsed policy URLs: past it (policies
// re-registered at new URLs for a long time) it starts again empty.
const maxTargets = 4096

// target returns a policy URL parsed, from the cache of those already
// parsed; ReverseProxy's SetURL only reads it.
func (p *Proxy) target(raw string) *url.URL {
	if u, ok := p.targets.Load(raw); ok {
		return u.(*url.URL)
	}
	u, err := url.Parse(raw)
	if err != nil { // registration checks URLs: cannot happen
		u = &url.URL{Scheme: "http", Host: "invalid"}
	}
	if p.targetCount.Add(1) > maxTargets {
		p.targets.Clear()
		p.targetCount.Store(1)
	}
	p.targets.Store(raw, u)
	return u
}

// copyBuffers are the buffers ReverseProxy copies answers through. A
// stream holds one while it lasts: 8 KiB rather than ReverseProxy's 32,
// since events are small and flushed one by one.
var copyBuffers = &bufferPool{pool: sync.Pool{New: func() any { b := make([]byte, 8<<10); return &b }}}

type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte { return *p.pool.Get().(*[]byte) }

func (p *bufferPool) Put(b []byte) { p.pool.Put(&b) }

// forward sends the request to the decision's policy and copies its
// answer to the client, unless the attempt is to be retried. However it
// ends (a client that left makes ReverseProxy abort the handler with a
// panic), the lease is released and a failure counted.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, body []byte, d routing.Decision, rs *resumeState, pr *prompt) *attempt {
	a := &attempt{d: d, start: time.Now(), status: http.StatusBadGateway, resume: rs, prompt: pr}
	for v := p.newest.Load(); d.Version > v && !p.newest.CompareAndSwap(v, d.Version); v = p.newest.Load() {
	}
	defer p.finish(r.Context(), a)
	a.apiKey = p.APIKey(d.Policy)
	ctx := r.Context()
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Timeout)
		defer cancel()
	}
	out := r.WithContext(context.WithValue(ctx, attemptKey{}, a))
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	// Sent again on a new connection only when nothing of it was written
	// (the idle connection it went out on had been closed): never a POST
	// that may have reached the policy (NewTransport).
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	p.reverseProxy.ServeHTTP(w, out)
	return a
}

// finish ends an attempt: its lease, its failure, its figures. The lease
// goes back even when the client left (ctx is done).
func (p *Proxy) finish(ctx context.Context, a *attempt) {
	d := a.d
	var failure *Failure
	if a.failed {
		failure = &Failure{At: a.start, Reason: "proxy: " + a.reason}
	}
	out := Outcome{Failure: failure, Unfinished: !a.over}
	if a.prompt != nil {
		out.Prefix = a.prompt.hashes
		if a.chain != nil {
			out.Prefix = a.chain
		}
		out.CachedTokens, out.CachedKnown = a.cached, a.cachedKnown && a.prompt.kind == prefix.Tokens && !a.prompt.capped
	}
	if err := p.Leaser.Release(context.WithoutCancel(ctx), d, out); err != nil {
		p.Logger.Warn("proxy: release", "policy_id", d.Policy.ID, "err", err)
	}
	if p.Metrics != nil {
		p.Metrics.ObserveProxy(d.Policy.Index, a.status, a.ttfb, time.Since(a.start))
		p.Metrics.ObserveTokens(a.promptN, a.complete, p.newest.Load()-d.Version)
	}
}

func isEventStream(h http.Header) bool {
	return strings.HasPrefix(h.Get("Content-Type"), "text/event-stream")
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// upstreamBody watches a policy's response body. A read error (the policy
// died mid-answer) fails the attempt; on an event stream it ends the
// client's stream with an error event in the API's own format instead of
// a cut connection, so an OpenAI client raises an error rather than
// seeing a truncated answer.
type upstreamBody struct {
	io.ReadCloser
	a       *attempt
	stream  bool
	pending []byte
	done    bool
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	if b.done {
		if len(b.pending) == 0 {
			return 0, io.EOF
		}
		n := copy(p, b.pending)
		b.pending = b.pending[n:]
		return n, nil
	}
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.a.noteUsage(p[:n])
	}
	switch {
	case err == nil:
		return n, nil
	case err == io.EOF:
		b.a.over = true
		return n, err
	case errors.Is(err, context.Canceled):
		return n, err // the client left: the copy stops there
	case errors.Is(err, context.DeadlineExceeded):
		b.a.reason = "did not finish within --proxy-timeout"
	default:
		b.a.failed, b.a.reason = true, "failed mid-answer: "+err.Error()
	}
	if !b.stream {
		return n, err
	}
	b.done = true
	b.pending = errorEvent("the policy " + b.a.reason)
	return n, nil
}

// errorEvent is a server-sent event carrying an error in the OpenAI
// format ({"error": {"message", "type", "code"}}), which SGLang's native
// /generate streams use too.
func errorEvent(msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": msg, "type": "upstream_error", "code": api.CodeUpstreamFailed,
	}})
	return append(append([]byte("data: "), b...), "\n\n"...)
}

// Package proxy forwards generate traffic (SGLang-native /generate, the
// OpenAI-compatible /v1/...) to the policy a Leaser selects for each
// request, under a lease that lasts as long as the request.
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/metrics"
	"github.com/policyrouter/policyrouter/routing"
)

// Proxy mode: the router carries the generate traffic itself, as SGLang
// Model Gateway and llm-d do. Each proxied request is one Decision of the
// /select kind (the same routers, sticky sessions, version floor, waiting
// and bounds) whose lease lives exactly as long as the request: it is
// released when the response body ends or fails, or when the client
// leaves, which also cancels the upstream request at once. So a policy's
// concurrent proxied requests never exceed its capacity.
//
// Every request takes one path (forward): httputil.ReverseProxy over one
// http.Transport (transport.go), the request forwarded unchanged, event
// streams without buffering, and one retry loop (run). A request is sent
// to another policy only when the first cannot have run it: the
// connection to it was never made, or it answered 502 or 503. One that
// may have reached a policy (written, then the connection lost before an
// answer) is never sent again, to that policy or another. Once the
// response began, only a resumable generation goes on (resume.go,
// resume_stream.go, resume_completions.go, a layer over the same path: an
// abort, or a death after tokens came back, continues on another policy
// as one answer); any other stream whose upstream dies ends with an error
// event in the API's own format.

// Proxy defaults.
const (
	DefaultRetries = 2
	DefaultTimeout = 10 * time.Minute
	DefaultMaxBody = 32 << 20
)

// Options are the operator's settings of proxy mode.
type Options struct {
	// Retries is how many other policies a request is retried on after a
	// connect error or a 502/503 answer, and how many continuations a
	// resumed generation may take (--proxy-retries).
	Retries int
	// Timeout bounds each upstream attempt, streaming included
	// (--proxy-timeout); 0 means no bound.
	Timeout time.Duration
	// MaxBody is the largest request body accepted (--proxy-max-body).
	MaxBody int64
	// Transport carries the requests to the policies; nil is
	// NewTransport(nil).
	Transport http.RoundTripper
	// Resume continues an aborted native /generate on another policy
	// (--proxy-resume; resume.go).
	Resume bool
	// APIKey returns the key sent to a policy as its bearer token; nil is
	// the policy's registered api_key (routing.Policy.BearerFor), "" sends
	// none.
	APIKey func(routing.Policy) string
}

// Config is a Proxy's settings and dependencies.
type Config struct {
	Options
	// Leaser selects and leases the policy of each attempt.
	Leaser Leaser
	// StreamForms, when set, says how each policy streams a native
	// /generate, for resuming streams; nil, or a form it does not know:
	// the stream's chunks say it, when they can.
	StreamForms StreamForms
	// WriteError answers a request the proxy cannot forward: the
	// Leaser's errors, the proxy's own (*Error) and invalid input
	// (*routing.InputError, naming the header or field).
	WriteError func(w http.ResponseWriter, r *http.Request, err error)
	// DefaultRouter is the router of a request without X-Router; one
	// that does not lease stands for idle_affinity.
	DefaultRouter string
	// DefaultSelectWait is the wait of a request without
	// X-Select-Timeout-MS (default 30 s); MaxSelectWait caps the header
	// (default a minute).
	DefaultSelectWait time.Duration
	MaxSelectWait     time.Duration
	// DefaultStickyWait is the sticky wait of a request with a session
	// and without X-Sticky-Wait-MS.
	DefaultStickyWait time.Duration
	// Metrics, when set, records each attempt (ObserveProxy).
	Metrics *metrics.Metrics
	// Logger logs what the proxy cannot answer for; nil is slog.Default.
	Logger *slog.Logger
}

// Error is an answer of the proxy's own: a code of the error envelope
// (api.Code*) and a message for the caller.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func errorf(code, msg string) *Error { return &Error{Code: code, Message: msg} }

// fieldError is invalid input: field names the header or body field.
func fieldError(field, msg string) *routing.InputError {
	return &routing.InputError{Field: field, Msg: msg}
}

// Proxy serves the proxied endpoints. Create it with New.
type Proxy struct {
	Config
	reverseProxy *httputil.ReverseProxy
	models       modelsCache
	targets      sync.Map     // policy URL → its *url.URL, parsed once
	targetCount  atomic.Int64 // entries of targets
}

// New returns a Proxy for cfg.
func New(cfg Config) *Proxy {
	if cfg.Retries < 0 {
		cfg.Retries = 0
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.APIKey == nil {
		cfg.APIKey = func(p routing.Policy) string { return p.BearerFor(false) }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxSelectWait <= 0 {
		cfg.MaxSelectWait = time.Minute
	}
	if cfg.DefaultSelectWait <= 0 {
		cfg.DefaultSelectWait = 30 * time.Second
	}
	cfg.DefaultSelectWait = min(cfg.DefaultSelectWait, cfg.MaxSelectWait)
	p := &Proxy{Config: cfg}
	p.reverseProxy = p.newReverseProxy()
	return p
}

// RoundTripper is the transport the proxy reaches the policies with:
// Options.Transport, or the one New made.
func (p *Proxy) RoundTripper() http.RoundTripper { return p.reverseProxy.Transport }

// CloseIdleConnections closes the keep-alive connections the proxy holds
// open to policies. Call it once the server has stopped serving.
func (p *Proxy) CloseIdleConnections() {
	if t, ok := p.reverseProxy.Transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// Routing inputs and answer headers of proxied requests.
const (
	HeaderSessionID        = "X-Session-ID"
	HeaderSMGRoutingKey    = "X-SMG-Routing-Key"
	HeaderEnvID            = "X-Env-ID"
	HeaderMinWeightVersion = "X-Min-Weight-Version"
	HeaderRouter           = "X-Router"
	HeaderStickyWaitMS     = "X-Sticky-Wait-MS"
	HeaderEnvUnmapped      = "X-Env-Unmapped"
	HeaderPolicyIndex      = "X-Policy-Index"
	HeaderPolicyID         = "X-Policy-ID"
	HeaderWeightVersion    = "X-Weight-Version"
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
	resume *resumeState // a resumable request's (resume.go), or nil
	body   upstreamBody // the answer's body, watched (one allocation with the attempt)
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

// answer takes a policy's answer to an attempt before it is copied to
// the client: its figures, the router's headers, the body watched (or
// resumed); a 502 or 503 is errRetryable.
func (p *Proxy) answer(res *http.Response, a *attempt) error {
	a.status, a.ttfb = res.StatusCode, time.Since(a.start)
	if res.StatusCode == http.StatusBadGateway || res.StatusCode == http.StatusServiceUnavailable {
		a.over = true // refused: the policy runs nothing of it
		return errRetryable
	}
	// The canonical keys, and one array for the three values.
	h := res.Header
	v := []string{strconv.Itoa(a.d.Policy.Index), a.d.Policy.ID, strconv.FormatInt(a.d.Version, 10)}
	h[canonicalPolicyIndex], h[canonicalPolicyID], h[canonicalWeightVersion] = v[0:1:1], v[1:2:2], v[2:3:3]
	if a.d.EnvUnmapped {
		h.Set(HeaderEnvUnmapped, "true")
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

// The headers' keys in canonical form (X-Policy-Id), set and read without
// canonicalising them again for each request: http.Header.Get of
// "X-Session-ID" makes the string "X-Session-Id" every time it is called.
var (
	canonicalPolicyIndex   = http.CanonicalHeaderKey(HeaderPolicyIndex)
	canonicalPolicyID      = http.CanonicalHeaderKey(HeaderPolicyID)
	canonicalWeightVersion = http.CanonicalHeaderKey(HeaderWeightVersion)

	canonicalRouter           = http.CanonicalHeaderKey(HeaderRouter)
	canonicalEnvID            = http.CanonicalHeaderKey(HeaderEnvID)
	canonicalSessionID        = http.CanonicalHeaderKey(HeaderSessionID)
	canonicalSMGRoutingKey    = http.CanonicalHeaderKey(HeaderSMGRoutingKey)
	canonicalStickyWaitMS     = http.CanonicalHeaderKey(HeaderStickyWaitMS)
	canonicalMinWeightVersion = http.CanonicalHeaderKey(HeaderMinWeightVersion)
	canonicalSelectTimeoutMS  = http.CanonicalHeaderKey(HeaderSelectTimeoutMS)
	canonicalResumeOnAbort    = http.CanonicalHeaderKey(HeaderResumeOnAbort)
)

// headerValue is h.Get(key) for a key already in canonical form.
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
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

func (p *bufferPool) Get() []byte  { return *p.pool.Get().(*[]byte) }
func (p *bufferPool) Put(b []byte) { p.pool.Put(&b) }

// Forward serves POST /v1/completions, /v1/chat/completions and /generate.
func (p *Proxy) Forward(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, p.MaxBody)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			p.WriteError(w, r, errorf(api.CodeTooLarge, "request body larger than --proxy-max-body ("+strconv.FormatInt(p.MaxBody, 10)+" bytes)"))
			return
		}
		// Nothing is forwarded, and the answer (which the access log
		// records) says why, should the client still be there to read it.
		p.Logger.Info("proxy: request body incomplete", "path", r.URL.Path, "content_length", r.ContentLength, "err", err)
		p.WriteError(w, r, errorf(api.CodeBadRequest, "the request body did not arrive whole: "+err.Error()))
		return
	}
	valid := json.Valid(body) // once: the model and resuming read a valid body by its bytes
	sreq, err := p.selectRequest(r)
	if err == nil {
		sreq.Route = r.URL.Path
		sreq.Model, err = requestModel(body, valid)
	}
	if err != nil {
		p.WriteError(w, r, err)
		return
	}
	rs, err := p.resumeFor(w, r, body, valid)
	if err != nil {
		p.WriteError(w, r, err)
		return
	}
	p.run(w, r, sreq, body, rs)
}

// run is the one retry loop of every proxied request: a decision, an
// attempt, and another policy after an attempt that ended retryably (it
// cannot have run there, or, resuming, its policy aborted it or died
// after tokens came back), up to --proxy-retries. rs is a resumable
// request's state, nil for any other: it says what each attempt sends
// and how the client's answer ends when no policy goes on with it.
func (p *Proxy) run(w http.ResponseWriter, r *http.Request, sreq Request, body []byte, rs *resumeState) {
	defer rs.trailers(w)
	failed := sreq.Exclude
	for try := 0; ; try++ {
		d, ok := p.decide(w, r, sreq, rs)
		if !ok {
			return
		}
		p.armDeadlines(w, sreq.Wait)
		a := p.forward(rs.writer(w), r, rs.next(body), d, rs)
		switch {
		case rs.done(r):
			return
		case !a.retry:
			rs.endFailed(w, a.reason)
			return
		case try >= p.Retries && !rs.began():
			p.WriteError(w, r, errorf(api.CodeUpstreamFailed, "no policy answered: the last one ("+d.Policy.ID+") "+a.reason+
				"; tried "+strconv.Itoa(try+1)+" (--proxy-retries "+strconv.Itoa(p.Retries)+")"))
			return
		case try >= p.Retries:
			rs.end(w, a.reason+"; --proxy-retries "+strconv.Itoa(p.Retries)+" exhausted")
			return
		}
		failed, sreq.Exclude = rs.exclude(failed, d.Policy.ID)
		if rs.began() && !p.availableBeyond(r.Context(), sreq.Exclude) {
			// Waiting for a policy this request has not been aborted on
			// would only delay the tokens it has (all of them aborted it,
			// as slime's abort_all on every engine does).
			rs.end(w, a.reason+"; no other policy available")
			return
		}
	}
}

// armDeadlines sets the client connection's deadlines for one attempt:
// past the server's ReadTimeout and WriteTimeout, which are sized for
// /select, so that a generation runs to its end. The read deadline
// governs net/http's background read, which watches for the client's
// close once the body is read: past it, the request's context would be
// cancelled (golang/go#18447). No --proxy-timeout: no deadline.
func (p *Proxy) armDeadlines(w http.ResponseWriter, wait time.Duration) {
	var deadline time.Time
	if p.Timeout > 0 {
		deadline = time.Now().Add(wait + p.Timeout + 30*time.Second)
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(deadline)
	_ = rc.SetWriteDeadline(deadline)
}

// readBody reads a request's body, at most limit bytes of it (past that
// the error is an *http.MaxBytesError). A body of a declared length is
// read into a buffer of that length: io.ReadAll's buffer, grown from 512
// bytes as it fills, was 6% of the bytes allocated per proxied request
// in the proxy benchmark's allocation profile. A body read to its end is
// closed: net/http's server then has nothing to discard before the answer
// (its discarding read allocated, and read the connection once more).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) (_ []byte, err error) {
	body := http.MaxBytesReader(w, r.Body, limit)
	defer func() {
		if err == nil {
			_ = body.Close()
		}
	}()
	n := r.ContentLength
	if n < 0 || n > limit {
		return io.ReadAll(body)
	}
	buf := make([]byte, n, n+1) // room for one byte more, to see the end
	if _, err := io.ReadFull(body, buf); err != nil {
		return nil, err
	}
	// net/http's server frames the body by its Content-Length, so this
	// read sees its end; a Request made otherwise may hold more, read on.
	m, err := body.Read(buf[n : n+1])
	switch {
	case m == 0 && err == io.EOF:
		return buf, nil
	case err != nil && err != io.EOF:
		return nil, err
	}
	rest, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	return append(buf[:n+int64(m)], rest...), nil
}

// decide makes the routing decision of one attempt, and answers the
// caller itself when there is none (ok false): the Leaser's coded reason
// (through WriteError; a resumed answer instead ends with the tokens so
// far), or nothing when the caller left. A caller that left just as a
// policy was granted gets nothing either: the lease goes back at once
// instead of waiting for the poller or its TTL.
func (p *Proxy) decide(w http.ResponseWriter, r *http.Request, req Request, rs *resumeState) (d routing.Decision, ok bool) {
	d, err := p.Leaser.Select(r.Context(), req)
	switch {
	case err == nil && r.Context().Err() != nil:
		_ = p.Leaser.Release(context.WithoutCancel(r.Context()), d, Outcome{}) // nothing was sent
		return d, false
	case err == nil:
		return d, true
	case r.Context().Err() != nil:
		// Select consumed nothing and there is nobody to answer.
	case rs.began():
		rs.end(w, "no policy to resume on: "+err.Error())
	default:
		p.WriteError(w, r, err)
	}
	return d, false
}

// forward sends the request to the decision's policy and copies its
// answer to the client, unless the attempt is to be retried. However it
// ends (a client that left makes ReverseProxy abort the handler with a
// panic), the lease is released and a failure counted.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, body []byte, d routing.Decision, rs *resumeState) *attempt {
	a := &attempt{d: d, start: time.Now(), status: http.StatusBadGateway, resume: rs}
	defer p.finish(r.Context(), a)
	if p.APIKey != nil {
		a.apiKey = p.APIKey(d.Policy)
	}
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
	if err := p.Leaser.Release(context.WithoutCancel(ctx), d, Outcome{Failure: failure, Unfinished: !a.over}); err != nil {
		p.Logger.Warn("proxy: release", "policy_id", d.Policy.ID, "err", err)
	}
	if p.Metrics != nil {
		p.Metrics.ObserveProxy(d.Policy.Index, a.status, a.ttfb, time.Since(a.start))
	}
}

// selectRequest reads a proxied request's routing headers. The router
// must lease (the proxy counts each policy's requests against its
// capacity): the server's default router when it does, else
// idle_affinity.
func (p *Proxy) selectRequest(r *http.Request) (Request, error) {
	h := r.Header
	name := headerValue(h, canonicalRouter)
	if name == "" {
		name = p.DefaultRouter
		if row, ok := routing.LookupRouter(name); !ok || !row.Leases() {
			name = "idle_affinity"
		}
	}
	row, ok := routing.LookupRouter(name)
	if !ok || !row.Leases() {
		return Request{}, fieldError(HeaderRouter, "must be a router that leases: "+routing.NameList(routing.LeasingRouterNames())+", not "+strconv.Quote(name))
	}
	wait, err := p.selectWait(h)
	if err != nil {
		return Request{}, err
	}
	req := Request{Router: row.Name, EnvID: headerValue(h, canonicalEnvID), Wait: wait}
	if len(req.EnvID) > 256 {
		return req, fieldError(HeaderEnvID, "must be at most 256 bytes")
	}
	req.Session = headerValue(h, canonicalSessionID)
	if req.Session == "" {
		req.Session = headerValue(h, canonicalSMGRoutingKey)
	}
	if err := routing.CheckSession(HeaderSessionID, req.Session); err != nil {
		return req, err
	}
	// X-Sticky-Wait-MS: how long a session waits for its busy home (its
	// cache), as /select's sticky_wait_ms; none means the server's default.
	req.StickyWait = min(p.DefaultStickyWait, req.Wait)
	if v := headerValue(h, canonicalStickyWaitMS); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 || ms > 3600000 {
			return req, fieldError(HeaderStickyWaitMS, "must be an integer between 0 and 3600000, not "+strconv.Quote(v))
		}
		req.StickyWait = min(time.Duration(ms)*time.Millisecond, req.Wait)
	}
	if v := headerValue(h, canonicalMinWeightVersion); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return req, fieldError(HeaderMinWeightVersion, "must be an integer >= 0, not "+strconv.Quote(v))
		}
		req.MinVersion = &n
	}
	// The lease ends with the request; a TTL only guards against a bug.
	if p.Timeout > 0 {
		req.LeaseTTL = req.Wait + p.Timeout + time.Minute
	}
	return req, nil
}

func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	return len(ct) >= 17 && ct[:17] == "text/event-stream"
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

package handlers

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
	"sync"
	"time"

	"github.com/policyrouter/policyrouter/api"
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
// The request is forwarded unchanged by httputil.ReverseProxy, event
// streams without buffering. Connect errors and 502/503 answers, which
// reach the client before any byte, are retried on another policy; nothing
// is retried once the response began. An upstream that dies mid-stream
// ends the client's event stream with an error event.

// Proxy defaults.
const (
	DefaultProxyRetries = 2
	DefaultProxyTimeout = 10 * time.Minute
	DefaultProxyMaxBody = 32 << 20
)

// ProxyConfig configures proxy mode.
type ProxyConfig struct {
	// Retries is how many other policies a request is retried on after a
	// connect error or a 502/503 answer (--proxy-retries).
	Retries int
	// Timeout bounds each upstream attempt, streaming included
	// (--proxy-timeout); 0 means no bound.
	Timeout time.Duration
	// MaxBody is the largest request body accepted (--proxy-max-body).
	MaxBody int64
	// Transport carries the requests to the policies; nil is
	// NewProxyTransport(nil).
	Transport http.RoundTripper
	// Resume continues an aborted native /generate on another policy
	// (--proxy-resume; proxy_resume.go).
	Resume bool
	// APIKey returns the key sent to a policy as its bearer token; nil is
	// the policy's registered api_key (routing.Policy.BearerFor), "" sends
	// none.
	APIKey func(routing.Policy) string
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
	reason string
	status int
	ttfb   time.Duration
	resume *resumeState // a resumable request's (proxy_resume.go), or nil
}

type attemptKey struct{}

func attemptFrom(ctx context.Context) *attempt { a, _ := ctx.Value(attemptKey{}).(*attempt); return a }

// newReverseProxy returns the one ReverseProxy of the server; each
// request's attempt rides in its context.
func (s *Server) newReverseProxy() *httputil.ReverseProxy {
	tr := s.Proxy.Transport
	if tr == nil {
		tr = NewProxyTransport(nil)
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
			target, err := url.Parse(a.d.Policy.URL)
			if err != nil { // registration checks URLs: cannot happen
				target = &url.URL{Scheme: "http", Host: "invalid"}
			}
			pr.SetURL(target)
			pr.SetXForwarded()
			// The router's own token never reaches an engine; the policy's
			// key does.
			pr.Out.Header.Del("Authorization")
			if a.apiKey != "" {
				pr.Out.Header.Set("Authorization", "Bearer "+a.apiKey)
			}
		},
		ModifyResponse: func(res *http.Response) error {
			a := attemptFrom(res.Request.Context())
			a.status, a.ttfb = res.StatusCode, time.Since(a.start)
			if res.StatusCode == http.StatusBadGateway || res.StatusCode == http.StatusServiceUnavailable {
				return errRetryable
			}
			h := res.Header
			h.Set(HeaderPolicyIndex, strconv.Itoa(a.d.Policy.Index))
			h.Set(HeaderPolicyID, a.d.Policy.ID)
			h.Set(HeaderWeightVersion, strconv.FormatInt(a.d.Version, 10))
			if a.d.EnvUnmapped {
				h.Set(HeaderEnvUnmapped, "true")
			}
			if a.resume != nil && !isEventStream(h) {
				return a.resume.resumeAnswer(res, a)
			}
			res.Body = &upstreamBody{ReadCloser: res.Body, a: a, stream: isEventStream(res.Header)}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			a := attemptFrom(r.Context())
			switch {
			case r.Context().Err() != nil && !errors.Is(r.Context().Err(), context.DeadlineExceeded):
				// The client left: nobody to answer.
			case errors.Is(err, errRetryable):
				a.retry = true
				if a.reason == "" { // resumeAnswer may have said why
					a.reason = "answered " + strconv.Itoa(a.status)
				}
			case isDialError(err):
				a.retry, a.failed, a.reason = true, true, "connect: "+err.Error()
			case errors.Is(err, context.DeadlineExceeded):
				a.failed = true
				s.writeError(w, r, errorf(api.CodeUpstreamTimeout, "the policy did not answer within --proxy-timeout ("+s.Proxy.Timeout.String()+")"))
			default:
				a.failed = true
				s.writeError(w, r, errorf(api.CodeUpstreamFailed, "the policy failed before answering: "+err.Error()))
			}
		},
	}
}

// copyBuffers are the buffers ReverseProxy copies answers through. A
// stream holds one while it lasts: 8 KiB rather than ReverseProxy's 32,
// since events are small and flushed one by one.
var copyBuffers = &bufferPool{pool: sync.Pool{New: func() any { b := make([]byte, 8<<10); return &b }}}

type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte  { return *p.pool.Get().(*[]byte) }
func (p *bufferPool) Put(b []byte) { p.pool.Put(&b) }

// NewProxyTransport is the transport of proxy mode: keep-alive connections
// to the policies, up to 256 idle per policy (a batching engine takes tens
// of requests at once; http.DefaultTransport keeps 2, and every other
// request would pay a new connection), with tc's TLS towards https://
// policies (nil: the system's roots).
func NewProxyTransport(tc *tls.Config) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = 256
	t.TLSClientConfig = tc
	return t
}

// proxy serves POST /v1/completions, /v1/chat/completions and /generate.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.Proxy.MaxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			s.writeError(w, r, errorf(api.CodeTooLarge, "request body larger than --proxy-max-body ("+strconv.FormatInt(s.Proxy.MaxBody, 10)+" bytes)"))
			return
		}
		return // the client left while sending
	}
	sreq, router, err := s.proxySelectRequest(r)
	if err == nil {
		sreq.Route = r.URL.Path
		sreq.Model, err = requestModel(body)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if s.Proxy.Timeout > 0 {
		// Past the server's write timeout, which is sized for /select.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(sreq.Wait + s.Proxy.Timeout + 30*time.Second))
	} else {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	}
	rs, err := s.resumeFor(w, r, body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if rs != nil {
		s.proxyResumed(w, r, sreq, router, rs)
		return
	}
	for try := 0; ; try++ {
		d, ok := s.decide(w, r, "proxy", router, sreq)
		if !ok {
			return
		}
		a := s.forward(w, r, body, d, nil)
		if !a.retry {
			return
		}
		if try >= s.Proxy.Retries {
			s.writeError(w, r, errorf(api.CodeUpstreamFailed, "no policy answered: the last one ("+d.Policy.ID+") "+a.reason+
				"; tried "+strconv.Itoa(try+1)+" (--proxy-retries "+strconv.Itoa(s.Proxy.Retries)+")"))
			return
		}
		sreq.Exclude = append(sreq.Exclude, d.Policy.ID)
	}
}

// forward sends the request to the decision's policy and copies its
// answer to the client, unless the attempt is to be retried. However it
// ends (a client that left makes ReverseProxy abort the handler with a
// panic), the lease is released and a failure counted.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, body []byte, d routing.Decision, rs *resumeState) *attempt {
	a := &attempt{d: d, start: time.Now(), status: http.StatusBadGateway, resume: rs}
	defer s.finish(a)
	if s.Proxy.APIKey != nil {
		a.apiKey = s.Proxy.APIKey(d.Policy)
	}
	ctx := context.WithValue(r.Context(), attemptKey{}, a)
	if s.Proxy.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.Proxy.Timeout)
		defer cancel()
	}
	out := r.WithContext(ctx)
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	s.reverseProxy.ServeHTTP(w, out)
	return a
}

// finish ends an attempt: its lease, its failure, its figures.
func (s *Server) finish(a *attempt) {
	d := a.d
	if _, err := s.State.Release(d.Lease); err != nil && !errors.Is(err, routing.ErrLeaseEnded) {
		s.logger.Warn("proxy: release", "policy_id", d.Policy.ID, "err", err)
	}
	if a.failed {
		s.State.ObserveFailure(d.Policy.ID, a.start, "proxy: "+a.reason)
	}
	if s.Metrics != nil {
		s.Metrics.ObserveProxy(d.Policy.Index, a.status, a.ttfb, time.Since(a.start))
	}
}

// proxySelectRequest reads a proxied request's routing headers. The
// router must lease (the proxy counts each policy's requests against its
// capacity): the server's default router when it does, else
// idle_affinity.
func (s *Server) proxySelectRequest(r *http.Request) (routing.SelectRequest, string, error) {
	h := r.Header
	name := h.Get(HeaderRouter)
	if name == "" {
		name = s.DefaultRouter
		if row, ok := routing.LookupRouter(name); !ok || !row.Leases() {
			name = "idle_affinity"
		}
	}
	row, ok := routing.LookupRouter(name)
	if !ok || !row.Leases() {
		return routing.SelectRequest{}, "", fieldError(HeaderRouter, "must be a router that leases: "+routing.NameList(routing.LeasingRouterNames())+", not "+strconv.Quote(name))
	}
	wait, err := s.proxySelectWait(h)
	if err != nil {
		return routing.SelectRequest{}, "", err
	}
	req := routing.SelectRequest{Router: row.Select, EnvID: h.Get(HeaderEnvID), Wait: wait, Stop: s.stopping.Done()}
	if len(req.EnvID) > 256 {
		return req, "", fieldError(HeaderEnvID, "must be at most 256 bytes")
	}
	req.Session = h.Get(HeaderSessionID)
	if req.Session == "" {
		req.Session = h.Get(HeaderSMGRoutingKey)
	}
	if err := routing.CheckSession(HeaderSessionID, req.Session); err != nil {
		return req, "", err
	}
	// X-Sticky-Wait-MS: how long a session waits for its busy home (its
	// cache), as /select's sticky_wait_ms; none means the server's default.
	req.StickyWait = min(s.DefaultStickyWait, req.Wait)
	if v := h.Get(HeaderStickyWaitMS); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 || ms > 3600000 {
			return req, "", fieldError(HeaderStickyWaitMS, "must be an integer between 0 and 3600000, not "+strconv.Quote(v))
		}
		req.StickyWait = min(time.Duration(ms)*time.Millisecond, req.Wait)
	}
	if v := h.Get(HeaderMinWeightVersion); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return req, "", fieldError(HeaderMinWeightVersion, "must be an integer >= 0, not "+strconv.Quote(v))
		}
		req.MinVersion = &n
	}
	// The lease ends with the request; a TTL only guards against a bug.
	if s.Proxy.Timeout > 0 {
		req.LeaseTTL = req.Wait + s.Proxy.Timeout + time.Minute
	}
	return req, name, nil
}

// requestModel is the "model" of a JSON request body: what the OpenAI
// endpoints require, and SGLang's /generate leaves out (its server has
// one model). A body that is not a JSON object names none: the engine
// answers it. A "model" that is not a string is the client's error.
func requestModel(body []byte) (string, error) {
	var v struct {
		Model json.RawMessage `json:"model"`
	}
	if json.Unmarshal(body, &v) != nil || len(v.Model) == 0 || string(v.Model) == "null" {
		return "", nil
	}
	var model string
	if err := json.Unmarshal(v.Model, &model); err != nil {
		return "", fieldError("model", "must be a string")
	}
	return model, nil
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
	case err == nil || err == io.EOF:
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

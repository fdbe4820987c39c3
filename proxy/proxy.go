// Package proxy forwards generate traffic (SGLang-native /generate, the
// OpenAI-compatible /v1/...) to the policy a Leaser selects for each
// request, under a lease that lasts as long as the request.
package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/metrics"
	"github.com/policyrouter/policyrouter/prefix"
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
// http.Transport (NewTransport), the request forwarded unchanged, event
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
	// PrefixAffinity routes each request where its prompt's prefix is
	// cached, unless it opts out (--prefix-affinity; prefix.go).
	PrefixAffinity bool
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
	// newest is the newest weight version the proxy dispatched to: the
	// version lag of an answer's tokens is counted from it.
	newest      atomic.Int64
	models      sync.Map     // policy URL → its modelsEntry (models.go)
	targets     sync.Map     // policy URL → its *url.URL, parsed once
	targetCount atomic.Int64 // entries of targets
	// memo spares hashing again the token prompts sent again or extended
	// (a GRPO group's samples, a conversation's turns).
	memo *prefix.Memo
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
	p := &Proxy{Config: cfg, memo: prefix.NewMemo(0)}
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
	f := readFields(body) // once, for the model, resuming and the prompt
	sreq, err := p.selectRequest(r)
	if err == nil {
		sreq.Route = r.URL.Path
		sreq.Model, err = requestModel(f)
	}
	if err != nil {
		p.WriteError(w, r, err)
		return
	}
	var pr *prompt
	rs, err := p.resumeFor(w, r, f)
	if err == nil {
		pr, err = p.promptFor(r, f, rs)
	}
	if err != nil {
		p.WriteError(w, r, err)
		return
	}
	if pr != nil {
		sreq.Prefix = pr.hashes
	}
	p.run(w, r, sreq, body, rs, pr)
}

// run is the one retry loop of every proxied request: a decision, an
// attempt, and another policy after an attempt that ended retryably (it
// cannot have run there, or, resuming, its policy aborted it or died
// after tokens came back), up to --proxy-retries. rs is a resumable
// request's state, nil for any other: it says what each attempt sends
// and how the client's answer ends when no policy goes on with it.
//
// An aborted generation goes on elsewhere when another policy can route.
// When none can, it waits for one only if the router itself took the
// aborting policy out (Leaser.Returning: its own rolling update, any
// max_unavailable, or POST /fleet/sleep) and so knows it comes back, and
// at most until that operation's own bound; else it ends at once with
// the tokens so far. An abort the router did not cause (a framework
// ending its step, as slime's abort_all before its own sleep) never
// waits, and neither does the request after it: its framework would find
// it held until a wake that comes only after it trains.
func (p *Proxy) run(w http.ResponseWriter, r *http.Request, sreq Request, body []byte, rs *resumeState, pr *prompt) {
	if rs != nil && p.Metrics != nil {
		defer p.observeResume(w) // after the trailers
	}
	defer rs.trailers(w)
	failed := sreq.Exclude
	var (
		hold    time.Duration // the next decision's wait for a returning policy
		outside bool          // an abort the router did not cause ended an attempt
	)
	for try := 0; ; try++ {
		req := sreq
		if hold > 0 {
			req.Wait, req.StickyWait, req.AwaitReturn, hold = hold, min(req.StickyWait, hold), true, 0
		}
		d, ok := p.decide(w, r, req, rs)
		if !ok {
			return
		}
		p.armDeadlines(w, sreq.Wait)
		a := p.forward(rs.writer(w), r, rs.next(body), d, rs, pr)
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
		aborted := rs != nil && rs.abortedOn == d.Policy.ID
		failed, sreq.Exclude = rs.exclude(failed, d.Policy.ID)
		var until time.Time
		if aborted && !outside {
			back := false
			if until, back = p.Leaser.Returning(r.Context(), d.Policy.ID); !back {
				outside = true
			}
		}
		if rs.began() && !p.availableBeyond(r.Context(), sreq.Exclude) {
			if hold = time.Until(until); until.IsZero() || hold <= 0 {
				// Waiting for a policy this request has not been aborted on
				// would only delay the tokens it has (all of them aborted it,
				// as slime's abort_all on every engine does).
				rs.end(w, a.reason+"; no other policy available")
				return
			}
			// The router paused or put to sleep the policy that aborted,
			// and every other: wait for one to return, that one included.
			sreq.Exclude = failed
			p.armDeadlines(w, hold)
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

package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The transport of proxy mode. http.Transport gives every connection a
// read goroutine and a write goroutine and hands each request to them
// over channels; on the proxy's path (a small request in memory, a small
// answer) those hand-offs and their wake-ups were a quarter of the
// router's CPU. transport carries plain http:// requests on the request's
// own goroutine instead: it takes a pooled keep-alive connection, writes
// the request (head and body in one write when they fit the buffer),
// reads the answer's head with net/http's own parser (http.ReadResponse),
// and the answer's body gives the connection back at its end. Everything
// else (https, a proxy from the environment, Upgrade, Expect:
// 100-continue) goes to an http.Transport as before.

// Transport defaults: those of http.DefaultTransport, with more idle
// connections per policy (a batching engine takes tens of requests at
// once; http.DefaultTransport keeps 2, and every other request would pay
// a new connection).
const (
	defaultMaxIdlePerHost = 256
	defaultIdleTimeout    = 90 * time.Second
	dialTimeout           = 30 * time.Second
	max1xxResponses       = 5 // as net/http: more informational answers than this is an error
	// checkAfterIdle is how long a connection sits idle before get looks
	// at it (a system call) for the server's close. Servers close idle
	// connections after seconds (uvicorn's keep-alive timeout is 5 s,
	// nginx's 75 s); under load a connection goes out again within
	// milliseconds, and the rare one the server closed meanwhile fails
	// before any byte of its answer and is sent again (RoundTrip).
	checkAfterIdle = time.Second
)

// NewTransport is the transport of proxy mode: keep-alive connections to
// the policies, up to 256 idle per policy, with tc's TLS towards https://
// policies (nil: the system's roots). It adds no Accept-Encoding of its
// own: a request goes out with the client's, and an answer comes back as
// the policy sent it, never decompressed on the way.
func NewTransport(tc *tls.Config) http.RoundTripper {
	std := http.DefaultTransport.(*http.Transport).Clone()
	std.MaxIdleConns = 0
	std.MaxIdleConnsPerHost = defaultMaxIdlePerHost
	std.DisableCompression = true
	std.TLSClientConfig = tc
	return &transport{fallback: std}
}

// transport is an http.RoundTripper for HTTP/1.1 over plain TCP; see
// above. The zero value with a fallback is ready to use.
type transport struct {
	// fallback carries what transport does not: https, proxies, upgrades,
	// 100-continue.
	fallback *http.Transport
	// maxIdlePerHost bounds the idle connections kept per host
	// (0: defaultMaxIdlePerHost); idleTimeout closes those idle longer
	// (0: defaultIdleTimeout).
	maxIdlePerHost int
	idleTimeout    time.Duration
	// dial opens a connection (nil: a net.Dialer's DialContext).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu    sync.Mutex
	idle  map[string][]*conn // by host:port, most recently used last
	sweep *time.Timer        // closes expired idle connections; nil when unarmed
}

var _ http.RoundTripper = (*transport)(nil)

// conn is one keep-alive connection to a host.
type conn struct {
	nc        net.Conn
	br        *bufio.Reader
	key       string    // host:port, its pool
	idleSince time.Time // when it went back to the pool
	reused    bool      // it carried a request before this one
	deadline  bool      // an exchange set a deadline on it
	abort     func()    // sets a deadline in the past: made once, for every exchange's cancellation
}

// writers are the buffers requests are written through: only during the
// write, so an idle connection holds no write buffer.
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 8<<10) }}

// aLongTimeAgo is a deadline in the past: it unblocks a read or write at
// once.
var aLongTimeAgo = time.Unix(1, 0)

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.handles(req) {
		return t.fallback.RoundTrip(req)
	}
	return t.roundTrip(req.Context(), canonicalAddr(req), req, nil, time.Time{})
}

// roundTrip carries req to key (host:port) over a pooled connection and
// reads its answer's head. When msg is not nil it goes on the wire in
// req's stead: a whole HTTP/1.1 request (head and body), which can always
// be sent again; req then only says the method the answer is read for and
// becomes its Request. A deadline, when not zero, bounds the exchange, the
// answer's body included, as a context's deadline would: past it the
// errors are context.DeadlineExceeded.
func (t *transport) roundTrip(ctx context.Context, key string, req *http.Request, msg []byte, deadline time.Time) (*http.Response, error) {
	for retried := false; ; retried = true {
		c, err := t.get(ctx, key, retried)
		if err != nil {
			if msg == nil {
				closeBody(req)
			}
			return nil, err
		}
		res, answered, err := t.exchange(ctx, c, req, msg, deadline)
		if err == nil {
			return res, nil
		}
		hasBody := msg == nil && req.Body != nil && req.Body != http.NoBody
		if retried || !c.reused || answered || !isClosedConn(err) || ctx.Err() != nil || (hasBody && req.GetBody == nil) {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, err
		}
		// A connection that had carried requests failed before any byte of
		// this one's answer: the server closed it while it sat idle, and get
		// did not look (it was idle briefly) or raced with that close (its
		// FIN had not arrived yet).
		// A keep-alive server closes only connections it is not reading a
		// request from, so it never acted on this one: it is sent again, once,
		// on a new connection. (A server that read the request and then died
		// without a byte of answer is the one case this repeats; the new
		// connection then fails to connect, or the server answers.) The new
		// connection is dialled, not taken from the pool, where others may
		// have been closed with it.
		if hasBody {
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			r2 := *req
			r2.Body = body
			req = &r2
		}
	}
}

// handles reports whether the request is transport's to carry: plain
// HTTP/1.1 without a proxy, an upgrade or 100-continue.
func (t *transport) handles(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		return false
	}
	h := req.Header
	if len(h["Upgrade"]) > 0 || len(h["Expect"]) > 0 || len(req.Trailer) > 0 {
		return false
	}
	if p := t.fallback.Proxy; p != nil {
		if u, err := p(req); err != nil || u != nil {
			return false
		}
	}
	return true
}

// exchange writes req on c (msg instead, when it is not nil) and reads
// its answer's head; answered says whether any byte of the answer
// arrived. Any error closes c; the answer's body returns c to the pool at
// its end.
func (t *transport) exchange(ctx context.Context, c *conn, req *http.Request, msg []byte, deadline time.Time) (res *http.Response, answered bool, err error) {
	if !deadline.IsZero() {
		_ = c.nc.SetDeadline(deadline)
		c.deadline = true
	}
	// A cancelled request unblocks its write or read by a deadline in the
	// past; no goroutine waits on ctx meanwhile.
	stop := context.AfterFunc(ctx, c.abort)
	fail := func(err error) (*http.Response, bool, error) {
		stop()
		_ = c.nc.Close()
		return nil, answered, timedOut(ctx, err)
	}
	if msg != nil {
		_, err = c.nc.Write(msg)
	} else {
		bw := writers.Get().(*bufio.Writer)
		bw.Reset(c.nc)
		err = req.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
		bw.Reset(nil)
		writers.Put(bw)
	}
	if err != nil {
		return fail(err)
	}
	// The first byte of the answer is awaited apart from its parsing, so
	// that a connection closed before any byte of it is told from one
	// closed mid-head (only the former may be retried).
	if _, err := c.br.Peek(1); err != nil {
		return fail(err)
	}
	answered = true
	for n := 0; ; n++ {
		res, err = http.ReadResponse(c.br, req)
		if err != nil {
			return fail(err)
		}
		if res.StatusCode >= 200 || res.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if n == max1xxResponses {
			return fail(errors.New("proxy: too many 1xx informational answers"))
		}
	}
	if res.StatusCode == http.StatusSwitchingProtocols { // never asked for: upgrades go to the fallback
		return fail(errors.New("proxy: 101 Switching Protocols to a request without Upgrade"))
	}
	keep := !res.Close && (msg != nil || !req.Close) // msg asks for no close: req is not what went out
	if res.Body == http.NoBody {
		if stop() && keep {
			t.put(c)
		} else {
			_ = c.nc.Close()
		}
		return res, true, nil
	}
	res.Body = &body{rc: res.Body, c: c, t: t, ctx: ctx, stop: stop, keep: keep}
	return res, true, nil
}

// body is an answer's body. At its end the connection goes back to the
// pool; closed early, or failed, the connection is closed.
type body struct {
	rc    io.ReadCloser // http.ReadResponse's, framing the answer on c.br
	c     *conn
	t     *transport
	ctx   context.Context
	stop  func() bool // stops the request's cancellation
	keep  bool        // the connection may carry another request
	state atomic.Int32
}

// States of a body: open, then done (read to its end) or closed.
const (
	bodyOpen = iota
	bodyDone
	bodyClosed
)

func (b *body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == nil {
		return n, nil
	}
	if err == io.EOF {
		if b.state.CompareAndSwap(bodyOpen, bodyDone) {
			// Bytes past the answer were never asked for: the connection is
			// out of step, and is not reused.
			if b.stop() && b.keep && b.c.br.Buffered() == 0 {
				b.t.put(b.c)
			} else {
				_ = b.c.nc.Close()
			}
		}
		return n, io.EOF
	}
	if b.state.CompareAndSwap(bodyOpen, bodyClosed) {
		b.stop()
		_ = b.c.nc.Close()
	}
	if cerr := b.ctx.Err(); cerr != nil {
		err = cerr
	}
	return n, timedOut(b.ctx, err)
}

// timedOut is err, or context.DeadlineExceeded when err is the
// connection's deadline set for the exchange (not ctx's cancellation,
// which sets one in the past).
func timedOut(ctx context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

// Close closes the connection unless the body was read to its end:
// http.ReadResponse's body would instead read the rest, which on a stream
// never ends.
func (b *body) Close() error {
	if b.state.CompareAndSwap(bodyOpen, bodyClosed) {
		b.stop()
		_ = b.c.nc.Close()
	}
	return nil
}

// get returns an idle connection to key that is still open as far as it
// can tell, or, when there is none or fresh is set, a new one.
func (t *transport) get(ctx context.Context, key string, fresh bool) (*conn, error) {
	for !fresh {
		c := t.popIdle(key)
		if c == nil {
			break
		}
		if time.Since(c.idleSince) < checkAfterIdle || isAlive(c.nc) {
			c.reused = true
			return c, nil
		}
		_ = c.nc.Close()
	}
	dial := t.dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	}
	nc, err := dial(ctx, "tcp", key)
	if err != nil {
		return nil, err
	}
	c := &conn{nc: nc, br: bufio.NewReaderSize(nc, 4<<10), key: key}
	c.abort = func() { _ = c.nc.SetDeadline(aLongTimeAgo) }
	return c, nil
}

// popIdle takes the most recently used idle connection to key that has
// not been idle past the timeout; it closes those that have.
func (t *transport) popIdle(key string) *conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.idle[key]
	if len(l) == 0 {
		return nil
	}
	c := l[len(l)-1]
	l[len(l)-1] = nil
	l = l[:len(l)-1]
	if time.Since(c.idleSince) > t.timeout() {
		// The others went idle before it: all expired.
		for i, o := range l {
			_ = o.nc.Close()
			l[i] = nil
		}
		l = l[:0]
		_ = c.nc.Close()
		c = nil
	}
	t.idle[key] = l
	return c
}

// put returns c to its pool, or closes it if the pool is full.
func (t *transport) put(c *conn) {
	if c.deadline {
		_ = c.nc.SetDeadline(time.Time{})
		c.deadline = false
	}
	c.idleSince = time.Now()
	max := t.maxIdlePerHost
	if max <= 0 {
		max = defaultMaxIdlePerHost
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.idle == nil {
		t.idle = make(map[string][]*conn)
	}
	l := t.idle[c.key]
	if len(l) >= max {
		_ = c.nc.Close()
		return
	}
	t.idle[c.key] = append(l, c)
	if t.sweep == nil {
		t.sweep = time.AfterFunc(t.timeout(), t.sweepIdle)
	}
}

// sweepIdle closes the connections idle past the timeout, and runs again
// while any remain idle.
func (t *transport) sweepIdle() {
	timeout := t.timeout()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep = nil
	now := time.Now()
	for key, l := range t.idle {
		n := 0
		for n < len(l) && now.Sub(l[n].idleSince) > timeout { // oldest first
			_ = l[n].nc.Close()
			l[n] = nil
			n++
		}
		if n == len(l) {
			delete(t.idle, key)
			continue
		}
		t.idle[key] = append(l[:0], l[n:]...)
	}
	if len(t.idle) > 0 {
		t.sweep = time.AfterFunc(timeout, t.sweepIdle)
	}
}

func (t *transport) timeout() time.Duration {
	if t.idleTimeout > 0 {
		return t.idleTimeout
	}
	return defaultIdleTimeout
}

// CloseIdleConnections closes the idle connections, the fallback's too.
func (t *transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			_ = c.nc.Close()
		}
	}
	t.fallback.CloseIdleConnections()
}

// isAlive reports whether an idle connection is still open: a read that
// does not wait finds nothing to read. EOF (the server closed it) or
// bytes nobody asked for both mean it cannot carry a request.
func isAlive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	alive := true
	err = rc.Read(func(fd uintptr) bool {
		alive = peekAlive(fd)
		return true // never wait
	})
	return err == nil && alive
}

// isClosedConn reports whether err is a connection the other side closed
// (EOF, reset, broken pipe), not a timeout or a malformed answer.
func isClosedConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// canonicalAddr is the request's host:port, port 80 when it has none.
func canonicalAddr(req *http.Request) string {
	if req.URL.Port() != "" {
		return req.URL.Host
	}
	return net.JoinHostPort(req.URL.Hostname(), "80")
}

// closeBody closes a request's body the transport will not send, as a
// RoundTripper must.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// Package h1 serves the proxied routes' HTTP/1.1 requests on plain TCP
// connections itself, and hands every other connection to net/http.
//
// net/http's server spends, per request on a keep-alive connection, a
// goroutine and a read to watch for the client's close, a cancellable
// context, a copy of the response header, four or five deadline changes
// and its own framing; on the proxy's path (a small POST, a small answer
// from a policy) that was an eighth of the router's CPU. Server reads the
// requests it is given (Fast) on the connection's goroutine, calls the
// same http.Handler with an http.ResponseWriter of its own, and watches
// for the client's close only once a request has run for a while.
//
// What it serves is narrow on purpose: HTTP/1.1 in origin form, one Host,
// a body framed by at most one Content-Length, no Transfer-Encoding,
// Expect, Upgrade or Pragma, a head that fits in its buffer. Anything else
// - and every request after it on that connection - goes to the
// http.Server as it arrived, byte for byte, so that net/http's answers to
// odd or bad requests (400, 431, 100-continue, chunked bodies, h2c) stay
// exactly its own. TLS connections are not for Server: serve them with
// net/http.
package h1

import (
	"bufio"
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves HTTP/1.1 on a listener; see the package comment.
type Server struct {
	// HTTP serves the connections Server hands over, and gives Server its
	// Handler, timeouts (ReadHeaderTimeout, ReadTimeout, WriteTimeout,
	// IdleTimeout; zero ones as net/http reads them), ErrorLog,
	// BaseContext and ConnContext. ConnState is told only of the
	// connections handed over.
	HTTP *http.Server
	// Fast reports whether a request of this method to this path is
	// Server's to serve.
	Fast func(method, path string) bool

	mu       sync.Mutex
	ln       net.Listener
	handoff  *handoff
	conns    map[*conn]struct{}
	closing  atomic.Bool
	serveErr chan error // net/http's Serve of the handed-over connections
}

// Serve accepts connections on ln and serves them until Shutdown; it
// then returns http.ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.ln = ln
	s.handoff = &handoff{addr: ln.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}
	s.conns = make(map[*conn]struct{})
	s.serveErr = make(chan error, 1)
	ho := s.handoff
	s.mu.Unlock()
	go func() { s.serveErr <- s.HTTP.Serve(ho) }()

	base := context.Background()
	if s.HTTP.BaseContext != nil {
		base = s.HTTP.BaseContext(ln)
	}
	base = context.WithValue(base, http.ServerContextKey, s.HTTP)
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() { // as net/http: back off, then go on
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := newConn(s, nc, base)
		if !s.track(c) {
			_ = nc.Close()
			continue
		}
		go c.serve()
	}
}

// Shutdown stops Serve, closes idle connections, and waits for those
// serving a request to finish it (each closes after its answer), as
// http.Server.Shutdown does, which it calls for the connections handed
// over. It returns ctx's error if ctx ends first.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	var lnErr error
	if ln != nil {
		lnErr = ln.Close()
	}
	httpDone := make(chan error, 1)
	go func() { httpDone <- s.HTTP.Shutdown(ctx) }()

	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !s.closeIdle() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	if err := <-httpDone; err != nil {
		return err
	}
	if s.serveErr != nil {
		<-s.serveErr
	}
	if lnErr != nil && !errors.Is(lnErr, net.ErrClosed) {
		return lnErr
	}
	return nil
}

// closeIdle closes the connections waiting for a request and reports
// whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.idle.Load() {
			_ = c.nc.Close()
			delete(s.conns, c)
		}
	}
	return len(s.conns) == 0
}

func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// handOver gives c's connection, with the bytes read and not yet served,
// to the http.Server.
func (s *Server) handOver(c *conn) {
	s.forget(c)
	hc := &handedConn{Conn: c.nc, r: c.br}
	select {
	case s.handoff.conns <- hc:
	case <-s.handoff.done:
		_ = c.nc.Close()
	}
}

// logf writes to the http.Server's ErrorLog, or the log package's.
func (s *Server) logf(format string, args ...any) {
	if l := s.HTTP.ErrorLog; l != nil {
		l.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// Timeouts, read as net/http reads them.
func (s *Server) idleTimeout() time.Duration {
	if s.HTTP.IdleTimeout != 0 {
		return s.HTTP.IdleTimeout
	}
	return s.HTTP.ReadTimeout
}

func (s *Server) headerTimeout() time.Duration {
	if s.HTTP.ReadHeaderTimeout > 0 {
		return s.HTTP.ReadHeaderTimeout
	}
	return s.HTTP.ReadTimeout
}

// handoff is the listener the http.Server accepts handed-over
// connections from.
type handoff struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

func (h *handoff) Addr() net.Addr { return h.addr }

// handedConn is a connection handed over: its reads start with what
// Server had read and not served.
type handedConn struct {
	net.Conn
	r *bufio.Reader
}

func (h *handedConn) Read(p []byte) (int, error) { return h.r.Read(p) }

// CloseWrite half-closes the connection, which net/http does before it
// closes one after an error answer.
func (h *handedConn) CloseWrite() error {
	if cw, ok := h.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// panicked logs a handler's panic as net/http does; http.ErrAbortHandler
// is the handler's way to end the answer abruptly and is not logged.
func (s *Server) panicked(c *conn, v any) {
	if v == http.ErrAbortHandler {
		return
	}
	const size = 64 << 10
	buf := make([]byte, size)
	buf = buf[:runtime.Stack(buf, false)]
	s.logf("http: panic serving %v: %v\n%s", c.remote, v, strings.TrimSpace(string(buf)))
}

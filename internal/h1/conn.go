package h1

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// readSize is a connection's read buffer: a request's head must fit
	// in it to be served here (net/http takes the longer ones).
	readSize  = 8 << 10
	writeSize = 4 << 10
	// holdSize is how much of an answer's body is held before its head is
	// written, so that a short answer gets a Content-Length (net/http's
	// bufferBeforeChunkingSize).
	holdSize = 2 << 10
	// watchAfter is how long a request runs before the connection is
	// watched for the client's close (which cancels the request's
	// context). Shorter requests end before it matters; a write to a
	// closed connection fails anyway.
	watchAfter = 50 * time.Millisecond
	// maxDiscard is how much of a body the handler left unread is read
	// and dropped so that the connection can carry the next request
	// (net/http's maxPostHandlerReadBytes); past it the connection closes.
	maxDiscard = 256 << 10
)

// aLongTimeAgo is a deadline in the past: it ends a pending read at once.
var aLongTimeAgo = time.Unix(1, 0)

// conn is one client connection served here.
type conn struct {
	s      *Server
	nc     net.Conn
	cr     connReader
	br     *bufio.Reader
	bw     *bufio.Writer
	ctx    context.Context // the connection's: the http.Server and local address
	remote string
	idle   atomic.Bool // waiting for a request: Shutdown may close it

	// The response's buffers, reused from request to request.
	head []byte
	hold []byte

	// watch starts watching the connection for the client's close once a
	// request has run watchAfter; the fields below it are under mu.
	watch     *time.Timer
	mu        sync.Mutex
	inHandler bool
	bodyDone  bool // the request's body was read to its end (or had none)
	wantWatch bool // watchAfter passed while the body was still being read
	watching  bool // a watching read is pending
	watched   bool // one was started for this request
	aborting  bool
	watchEnd  chan struct{} // a watching read ended: one send for each started
	cancel    context.CancelFunc
	broken    bool // the client closed, or a read failed: no next request
}

func newConn(s *Server, nc net.Conn, base context.Context) *conn {
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String(), watchEnd: make(chan struct{}, 1)}
	c.cr.nc = nc
	c.br = bufio.NewReaderSize(&c.cr, readSize)
	c.bw = bufio.NewWriterSize(checkedWriter{c}, writeSize)
	c.ctx = context.WithValue(base, http.LocalAddrContextKey, nc.LocalAddr())
	if cc := s.HTTP.ConnContext; cc != nil {
		c.ctx = cc(c.ctx, nc)
	}
	c.watch = time.AfterFunc(time.Hour, c.watchFired)
	c.watch.Stop()
	return c
}

// connReader is what the connection's bufio.Reader reads: the socket,
// after the byte a watching read took, if any.
type connReader struct {
	nc      net.Conn
	hasByte bool
	b       [1]byte
	// deadline, when not zero, is set on the socket before the next read
	// (ReadTimeout for the rest of a request's body); then cleared.
	deadline time.Time
}

func (cr *connReader) Read(p []byte) (int, error) {
	if cr.hasByte {
		if len(p) == 0 {
			return 0, nil
		}
		p[0] = cr.b[0]
		cr.hasByte = false
		return 1, nil
	}
	if !cr.deadline.IsZero() {
		_ = cr.nc.SetReadDeadline(cr.deadline)
		cr.deadline = time.Time{}
	}
	return cr.nc.Read(p)
}

// checkedWriter is the bufio.Writer's socket: a failed write cancels the
// request in flight, as net/http's does.
type checkedWriter struct{ c *conn }

func (w checkedWriter) Write(p []byte) (int, error) {
	n, err := w.c.nc.Write(p)
	if err != nil {
		w.c.mu.Lock()
		w.c.broken = true
		if w.c.cancel != nil {
			w.c.cancel()
		}
		w.c.mu.Unlock()
	}
	return n, err
}

func (c *conn) serve() {
	handed := false
	defer func() {
		if !handed {
			_ = c.nc.Close()
			c.s.forget(c)
		}
	}()
	for {
		c.idle.Store(true)
		if c.s.closing.Load() {
			return
		}
		if d := c.s.idleTimeout(); d > 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(d))
		} else {
			_ = c.nc.SetReadDeadline(time.Time{})
		}
		if _, err := c.br.Peek(1); err != nil {
			return
		}
		c.idle.Store(false)
		t0 := time.Now()
		h, next := c.readHead(t0)
		switch next {
		case handOver:
			handed = true
			c.s.handOver(c)
			return
		case drop:
			return
		}
		if !c.serveOne(h, t0) {
			return
		}
	}
}

// What becomes of a connection after readHead.
const (
	serveHere = iota
	handOver  // to net/http, with what was read
	drop      // the head did not arrive: close
)

// readHead waits until the buffer holds a whole request head and parses
// it. The connection goes to net/http when the head is not Server's to
// serve or does not fit in the buffer.
func (c *conn) readHead(t0 time.Time) (h head, next int) {
	deadline := false
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		switch n := headEnd(buf); {
		case n < 0:
			return head{}, handOver
		case n > 0:
			h, ok := parseHead(buf[:n])
			if !ok || (c.s.Fast != nil && !c.s.Fast(h.method, h.url.Path)) {
				return head{}, handOver
			}
			return h, serveHere
		}
		if len(buf) == readSize {
			return head{}, handOver
		}
		if !deadline {
			deadline = true
			if d := c.s.headerTimeout(); d > 0 {
				_ = c.nc.SetReadDeadline(t0.Add(d))
			}
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			// Past ReadHeaderTimeout, or closed mid-head: net/http, too,
			// closes such a connection without an answer.
			return head{}, drop
		}
	}
}

// serveOne serves the request whose head h is at the start of the
// buffer; it reports whether the connection may carry another.
func (c *conn) serveOne(h head, t0 time.Time) (keep bool) {
	_, _ = c.br.Discard(h.size)
	if d := c.s.HTTP.WriteTimeout; d > 0 {
		_ = c.nc.SetWriteDeadline(t0.Add(d))
	}
	ctx, cancel := context.WithCancel(c.ctx)
	r := http.Request{ // on the stack: WithContext copies it
		Method:        h.method,
		URL:           h.url,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h.header,
		ContentLength: h.contentLength,
		Close:         h.close,
		Host:          h.host,
		RemoteAddr:    c.remote,
		RequestURI:    h.target,
	}
	w := &response{c: c, declared: -1}
	var b *body
	if h.contentLength > 0 {
		b = &w.reqBody
		*b = body{c: c, remain: h.contentLength}
		if d := c.s.HTTP.ReadTimeout; d > 0 && int64(c.br.Buffered()) < h.contentLength {
			c.cr.deadline = t0.Add(d)
		}
		r.Body = b
	} else {
		r.Body = http.NoBody
	}
	req := r.WithContext(ctx)
	w.req, w.body = req, b

	c.mu.Lock()
	c.inHandler, c.bodyDone, c.wantWatch, c.cancel = true, b == nil, false, cancel
	c.mu.Unlock()
	c.watch.Reset(watchAfter)

	panicked := true
	defer func() {
		if !panicked {
			return
		}
		// As net/http: what the connection's buffer holds goes out, and the
		// connection closes, so that the client sees the answer cut short.
		v := recover()
		c.watch.Stop()
		c.endWatch()
		cancel()
		_ = c.bw.Flush()
		if b != nil {
			b.end(false)
		}
		c.s.panicked(c, v)
		keep = false
	}()
	c.s.HTTP.Handler.ServeHTTP(w, req)
	panicked = false

	c.watch.Stop()
	c.endWatch()
	keep = w.finish()
	cancel()
	c.mu.Lock()
	c.cancel = nil
	broken := c.broken
	c.mu.Unlock()
	if !keep && !broken && b != nil && b.unsent() {
		c.closeWriteAndWait()
	}
	return keep && !broken && !h.close
}

// lingerTime is how long a connection whose request body was not all
// read stays half-closed before it closes (net/http's rstAvoidanceDelay):
// closed at once, with the client's bytes still arriving, the kernel
// would answer them with a reset, which can destroy the answer before
// the client has read it.
var lingerTime = 500 * time.Millisecond

// closeWriteAndWait half-closes the connection and reads and drops what
// the client still sends, until it closes or lingerTime has passed.
func (c *conn) closeWriteAndWait() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.Copy(io.Discard, c.nc)
}

// watchFired runs watchAfter into a request: the connection is watched
// for the client's close from now, or from the end of the body.
func (c *conn) watchFired() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.inHandler || c.watching {
		return
	}
	if !c.bodyDone {
		c.wantWatch = true
		return
	}
	c.startWatchLocked()
}

// bodyEnded is told by the body at its end.
func (c *conn) bodyEnded() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bodyDone = true
	if c.wantWatch && c.inHandler && !c.watching {
		c.startWatchLocked()
	}
}

func (c *conn) startWatchLocked() {
	if c.br.Buffered() > 0 || c.cr.hasByte {
		return // the next request is here already: nothing to watch for
	}
	c.watching, c.watched = true, true
	_ = c.nc.SetReadDeadline(time.Time{})
	go c.watchRead()
}

// watchRead is a read of the connection while a handler runs: a byte is
// the next (pipelined) request and is kept for it; an error is the
// client gone, and cancels the request.
func (c *conn) watchRead() {
	n, err := c.nc.Read(c.cr.b[:])
	c.mu.Lock()
	if n == 1 {
		c.cr.hasByte = true
	}
	if err != nil && !(c.aborting && errors.Is(err, os.ErrDeadlineExceeded)) {
		c.broken = true
		if c.cancel != nil {
			c.cancel()
		}
	}
	c.watching = false
	c.mu.Unlock()
	c.watchEnd <- struct{}{}
}

// endWatch ends the handler's part of the request, and the watching
// read if one is pending.
func (c *conn) endWatch() {
	c.mu.Lock()
	c.inHandler = false
	if !c.watched {
		c.mu.Unlock()
		return
	}
	if c.watching {
		c.aborting = true
		_ = c.nc.SetReadDeadline(aLongTimeAgo)
	}
	c.mu.Unlock()
	<-c.watchEnd // whether it ended now or before: the connection is the handler's alone again
	c.mu.Lock()
	c.aborting, c.watched = false, false
	c.mu.Unlock()
}

// body is a request's body: the next remain bytes of the connection.
// Its methods lock mu, because a handler may leave a goroutine reading it
// (a transport still sending it upstream) while the connection goroutine
// ends the request; once it has, reads fail, as net/http's do.
type body struct {
	mu     sync.Mutex
	c      *conn
	remain int64
	closed bool
	done   bool  // the request has ended: the connection is the next one's
	err    error // a read's failure, returned from then on
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.done {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.read(p)
}

func (b *body) read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.remain == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.remain {
		p = p[:b.remain]
	}
	n, err := b.c.br.Read(p)
	b.remain -= int64(n)
	if b.remain == 0 {
		b.c.bodyEnded()
		return n, io.EOF
	}
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		b.err = err
		b.c.mu.Lock()
		b.c.broken = true
		b.c.mu.Unlock()
	}
	return n, err
}

func (b *body) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

// unread is how much of the body the handler left, and whether it
// closed it.
func (b *body) unread() (remain int64, closed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.remain, b.closed
}

// unsent reports whether the client is still to send some of the body:
// it was not all read, and no read of it failed.
func (b *body) unsent() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.remain > 0 && b.err == nil
}

// end ends the request's hold on the connection. With discard, it reads
// what the handler left of the body, less than maxDiscard, and reports
// whether the connection is at the next request.
func (b *body) end(discard bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
	if !discard {
		return false
	}
	if b.remain == 0 {
		return b.err == nil
	}
	if b.err != nil || b.remain >= maxDiscard {
		return false
	}
	n, err := b.c.br.Discard(int(b.remain))
	b.remain -= int64(n)
	return err == nil && b.remain == 0
}

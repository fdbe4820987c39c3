package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// newTestTransport returns a transport that counts the connections it
// dials; its idle connections close when the test ends.
func newTestTransport(tb testing.TB) (*transport, *atomic.Int32) {
	tb.Helper()
	dials := new(atomic.Int32)
	t := &transport{
		fallback: &http.Transport{},
		dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	tb.Cleanup(t.CloseIdleConnections)
	return t, dials
}

// rawServer accepts connections and hands each, numbered from 0, to
// handle: a server whose every byte the test decides.
type rawServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newRawServer(tb testing.TB, handle func(n int, c net.Conn, br *bufio.Reader)) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &rawServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				handle(n, c, bufio.NewReader(c))
			}()
		}
	}()
	tb.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// readRequest reads one request and its body from br.
func readRequest(br *bufio.Reader) (*http.Request, string, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(req.Body)
	return req, string(b), err
}

func newRequest(tb testing.TB, ctx context.Context, url, body string) *http.Request {
	tb.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, r)
	if err != nil {
		tb.Fatal(err)
	}
	return req
}

func readAll(tb testing.TB, res *http.Response) string {
	tb.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatalf("reading the answer: %v", err)
	}
	_ = res.Body.Close()
	return string(b)
}

func (t *transport) idleCount(key string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.idle[key])
}

// Sequential requests share one keep-alive connection, content-length
// and chunked answers alike, and each answer is read whole.
func TestTransportReusesConnections(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/chunked" {
			for i := range 3 {
				fmt.Fprintf(w, "part%d:%s;", i, b)
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(b)+3))
		fmt.Fprintf(w, "ok:%s", b)
	}))
	defer srv.Close()
	tr, dials := newTestTransport(t)
	for i, tc := range []struct{ path, body, want string }{
		{"/", "a", "ok:a"},
		{"/chunked", "b", "part0:b;part1:b;part2:b;"},
		{"/", strings.Repeat("x", 100_000), "ok:" + strings.Repeat("x", 100_000)},
		{"/chunked", "", "part0:;part1:;part2:;"},
	} {
		res, err := tr.RoundTrip(newRequest(t, context.Background(), srv.URL+tc.path, tc.body))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := readAll(t, res); res.StatusCode != 200 || got != tc.want {
			t.Fatalf("request %d: %d %.40q, want 200 %.40q", i, res.StatusCode, got, tc.want)
		}
		if tc.path == "/chunked" && res.ContentLength != -1 {
			t.Fatalf("request %d: content length %d, want a chunked answer", i, res.ContentLength)
		}
	}
	if got := dials.Load(); got != 1 {
		t.Fatalf("%d connections dialled, want 1", got)
	}
}

// isAlive tells an open idle connection from one the server closed or
// wrote to unasked.
func TestIsAlive(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server func(net.Conn)
		want   bool
	}{
		{"open", func(net.Conn) {}, true},
		{"closed", func(c net.Conn) { _ = c.Close() }, false},
		{"unsolicited", func(c net.Conn) { _, _ = c.Write([]byte("HTTP/1.1 408 Request Timeout\r\n\r\n")) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			tc.server(s)
			if !tc.want {
				waitReadable(t, c)
			}
			if got := isAlive(c); got != tc.want {
				t.Fatalf("isAlive = %v, want %v", got, tc.want)
			}
		})
	}
}

// newOneAnswerServer starts a server that answers one request on each
// connection with "ok" and then closes it; seen counts the requests.
func newOneAnswerServer(tb testing.TB) (url string, seen *atomic.Int32) {
	seen = new(atomic.Int32)
	url = newRawServer(tb, func(_ int, c net.Conn, br *bufio.Reader) {
		if _, _, err := readRequest(br); err != nil {
			return
		}
		seen.Add(1)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	}) // the connection closes as the handler returns
	return url, seen
}

// waitReadable blocks until c has something to read (bytes or EOF)
// without reading it.
func waitReadable(tb testing.TB, c net.Conn) {
	tb.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return err != syscall.EAGAIN
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// An idle connection the server closed is not used once it has been idle
// for checkAfterIdle: the next request, which could not be retried, goes
// out on a new connection, and the server sees it once.
func TestTransportSkipsConnectionClosedWhileIdle(t *testing.T) {
	url, seen := newOneAnswerServer(t)
	tr, dials := newTestTransport(t)
	for i := range 2 {
		req := newRequest(t, context.Background(), url, "x")
		req.GetBody = nil
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := readAll(t, res); got != "ok" {
			t.Fatalf("request %d: %q", i, got)
		}
		if i == 0 {
			tr.mu.Lock()
			ic := tr.idle[canonicalAddr(res.Request)][0]
			ic.idleSince = ic.idleSince.Add(-checkAfterIdle) // idle long enough to be looked at
			c := ic.nc
			tr.mu.Unlock()
			waitReadable(t, c) // the server's close has arrived
		}
	}
	if d, s := dials.Load(), seen.Load(); d != 2 || s != 2 {
		t.Fatalf("%d connections, %d requests seen, want 2 and 2", d, s)
	}
}

// Connections idle only briefly are not looked at: when the server has
// closed them all meanwhile, a replayable request fails on one and is
// sent again on a newly dialled connection, not on another closed one
// from the pool.
func TestTransportRetriesClosedIdleOnNewConnection(t *testing.T) {
	url, seen := newOneAnswerServer(t)
	tr, dials := newTestTransport(t)
	// Three requests at once: three connections go idle.
	var wg sync.WaitGroup
	res := make([]*http.Response, 3)
	for i := range res {
		r, err := tr.RoundTrip(newRequest(t, context.Background(), url, "x"))
		if err != nil {
			t.Fatal(err)
		}
		res[i] = r
	}
	for _, r := range res {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = io.Copy(io.Discard, r.Body); _ = r.Body.Close() }()
	}
	wg.Wait()
	key := canonicalAddr(res[0].Request)
	if n := tr.idleCount(key); n != 3 {
		t.Fatalf("%d idle connections, want 3", n)
	}
	tr.mu.Lock()
	idle := append([]*conn(nil), tr.idle[key]...)
	tr.mu.Unlock()
	for _, c := range idle {
		waitReadable(t, c.nc) // the server's close has arrived
	}
	r, err := tr.RoundTrip(newRequest(t, context.Background(), url, "y"))
	if err != nil {
		t.Fatalf("request after the server closed its idle connections: %v", err)
	}
	if got := readAll(t, r); got != "ok" {
		t.Fatalf("answer %q", got)
	}
	if d, s := dials.Load(), seen.Load(); d != 4 || s != 4 {
		t.Fatalf("%d connections, %d requests seen, want 4 and 4", d, s)
	}
}

// A reused connection that fails before any byte of the answer (the
// server closed it as the request went out) is retried once on a new
// connection when the body can be sent again, and never otherwise.
func TestTransportRetriesOnClosedReusedConnection(t *testing.T) {
	for _, replayable := range []bool{true, false} {
		t.Run(fmt.Sprint("replayable=", replayable), func(t *testing.T) {
			var mu sync.Mutex
			var bodies []string // by connection, the bodies it answered
			url := newRawServer(t, func(n int, c net.Conn, br *bufio.Reader) {
				for i := 0; ; i++ {
					_, b, err := readRequest(br)
					if err != nil {
						return
					}
					if n == 0 && i == 1 {
						return // read, then closed unanswered
					}
					mu.Lock()
					bodies = append(bodies, fmt.Sprintf("%d:%s", n, b))
					mu.Unlock()
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
			tr, dials := newTestTransport(t)
			res, err := tr.RoundTrip(newRequest(t, context.Background(), url, "first"))
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, res)
			req := newRequest(t, context.Background(), url, "second")
			if !replayable {
				req.GetBody = nil
			}
			res, err = tr.RoundTrip(req)
			mu.Lock()
			defer mu.Unlock()
			if replayable {
				if err != nil {
					t.Fatalf("retried request: %v", err)
				}
				readAll(t, res)
				if got, want := strings.Join(bodies, ","), "0:first,1:second"; got != want || dials.Load() != 2 {
					t.Fatalf("answered %q on %d connections, want %q on 2", got, dials.Load(), want)
				}
				return
			}
			if err == nil {
				_ = res.Body.Close()
				t.Fatal("a request whose body cannot be sent again was retried")
			}
			if got, want := strings.Join(bodies, ","), "0:first"; got != want || dials.Load() != 1 {
				t.Fatalf("answered %q on %d connections, want %q on 1", got, dials.Load(), want)
			}
		})
	}
}

// A fresh connection closed before the answer is not retried: nothing
// says the server did not act on the request.
func TestTransportDoesNotRetryFreshConnection(t *testing.T) {
	var requests atomic.Int32
	url := newRawServer(t, func(n int, c net.Conn, br *bufio.Reader) {
		if _, _, err := readRequest(br); err == nil {
			requests.Add(1)
		}
	})
	tr, _ := newTestTransport(t)
	if _, err := tr.RoundTrip(newRequest(t, context.Background(), url, "x")); err == nil {
		t.Fatal("no error from a server that closed without answering")
	}
	if got := requests.Load(); got != 1 {
		t.Fatalf("the server saw %d requests, want 1", got)
	}
}

// A body closed before its end closes its connection (the server sees
// the client leave), and the next request dials a new one.
func TestTransportEarlyBodyClose(t *testing.T) {
	left := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/short" {
			_, _ = io.WriteString(w, "short")
			return
		}
		for {
			select {
			case <-r.Context().Done():
				close(left)
				return
			default:
			}
			if _, err := io.WriteString(w, "data: tick\n\n"); err != nil {
				close(left)
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	tr, dials := newTestTransport(t)
	res, err := tr.RoundTrip(newRequest(t, context.Background(), srv.URL+"/stream", ""))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 12)
	if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != "data: tick\n\n" {
		t.Fatalf("first event %q, %v", buf, err)
	}
	_ = res.Body.Close()
	<-left
	if n := tr.idleCount(canonicalAddr(res.Request)); n != 0 {
		t.Fatalf("%d idle connections after an early close, want 0", n)
	}
	res, err = tr.RoundTrip(newRequest(t, context.Background(), srv.URL+"/short", ""))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, res); got != "short" || dials.Load() != 2 {
		t.Fatalf("%q on %d connections, want \"short\" on 2", got, dials.Load())
	}
}

// Cancelling the request unblocks a transport waiting for the answer's
// head, and one reading its body; the error is the context's, and the
// connection is not kept.
func TestTransportCancellation(t *testing.T) {
	for _, stage := range []string{"head", "body"} {
		t.Run(stage, func(t *testing.T) {
			got := make(chan struct{})
			url := newRawServer(t, func(n int, c net.Conn, br *bufio.Reader) {
				if _, _, err := readRequest(br); err != nil {
					return
				}
				if stage == "body" {
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhalf")
				}
				close(got)
				_, _ = br.ReadByte() // until the client closes
			})
			tr, _ := newTestTransport(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req := newRequest(t, ctx, url, "x")
			if stage == "head" {
				go func() { <-got; cancel() }()
				_, err := tr.RoundTrip(req)
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("error %v, want context.Canceled", err)
				}
			} else {
				res, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 4)
				if _, err := io.ReadFull(res.Body, buf); err != nil {
					t.Fatal(err)
				}
				cancel()
				if _, err := io.ReadAll(res.Body); !errors.Is(err, context.Canceled) {
					t.Fatalf("body error %v, want context.Canceled", err)
				}
				_ = res.Body.Close()
			}
			if n := tr.idleCount(canonicalAddr(req)); n != 0 {
				t.Fatalf("%d idle connections after a cancellation, want 0", n)
			}
		})
	}
}

// A request whose context is already done fails with the context's
// error, not a network one.
func TestTransportCancelledBeforeStart(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	tr, _ := newTestTransport(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	cancel()
	if _, err := tr.RoundTrip(newRequest(t, ctx, srv.URL, "x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

// A server that closes after the head: an answer of known length cut
// short fails with ErrUnexpectedEOF; one delimited by the close is read
// whole. Neither connection is kept.
func TestTransportServerClosesAfterHead(t *testing.T) {
	for _, tc := range []struct {
		name, answer, want string
		err                error
	}{
		{"cut short", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhalf", "half", io.ErrUnexpectedEOF},
		{"chunked cut", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nhalf\r\n", "half", io.ErrUnexpectedEOF},
		{"until close", "HTTP/1.1 200 OK\r\n\r\nall of it", "all of it", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := newRawServer(t, func(n int, c net.Conn, br *bufio.Reader) {
				if _, _, err := readRequest(br); err == nil {
					_, _ = io.WriteString(c, tc.answer)
				}
			})
			tr, _ := newTestTransport(t)
			req := newRequest(t, context.Background(), url, "x")
			res, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if string(b) != tc.want || !errors.Is(err, tc.err) {
				t.Fatalf("body %q, %v; want %q, %v", b, err, tc.want, tc.err)
			}
			if n := tr.idleCount(canonicalAddr(req)); n != 0 {
				t.Fatalf("%d idle connections, want 0", n)
			}
		})
	}
}

// Informational answers before the final one are skipped; an answer
// without a body (204, a zero length) gives its connection back at once.
func TestTransportInformationalAndEmptyAnswers(t *testing.T) {
	url := newRawServer(t, func(n int, c net.Conn, br *bufio.Reader) {
		for i := 0; ; i++ {
			if _, _, err := readRequest(br); err != nil {
				return
			}
			switch i {
			case 0:
				_, _ = io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			case 1:
				_, _ = io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
			default:
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
			}
		}
	})
	tr, dials := newTestTransport(t)
	for i, want := range []struct {
		status int
		body   string
	}{{200, "ok"}, {204, ""}, {200, ""}} {
		req := newRequest(t, context.Background(), url, "x")
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if i > 0 && tr.idleCount(canonicalAddr(req)) != 1 {
			t.Fatalf("request %d: the connection of an empty answer is not idle before its body is read", i)
		}
		if got := readAll(t, res); res.StatusCode != want.status || got != want.body {
			t.Fatalf("request %d: %d %q, want %d %q", i, res.StatusCode, got, want.status, want.body)
		}
	}
	if got := dials.Load(); got != 1 {
		t.Fatalf("%d connections, want 1", got)
	}
}

// Idle connections past the idle timeout are closed, not reused; no more
// than maxIdlePerHost are kept.
func TestTransportIdleLimits(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer srv.Close()
	tr, dials := newTestTransport(t)
	tr.maxIdlePerHost = 1
	var res [2]*http.Response
	for i := range res {
		var err error
		if res[i], err = tr.RoundTrip(newRequest(t, context.Background(), srv.URL, "")); err != nil {
			t.Fatal(err)
		}
	}
	key := canonicalAddr(res[0].Request)
	for _, r := range res {
		readAll(t, r)
	}
	if n := tr.idleCount(key); n != 1 || dials.Load() != 2 {
		t.Fatalf("%d idle of %d dialled, want 1 of 2", n, dials.Load())
	}
	tr.mu.Lock()
	tr.idle[key][0].idleSince = time.Now().Add(-2 * defaultIdleTimeout)
	tr.mu.Unlock()
	r, err := tr.RoundTrip(newRequest(t, context.Background(), srv.URL, ""))
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, r)
	if got := dials.Load(); got != 3 {
		t.Fatalf("%d connections dialled, want 3: the expired one was reused", got)
	}
	tr.mu.Lock()
	tr.idle[key][0].idleSince = time.Now().Add(-2 * defaultIdleTimeout)
	tr.mu.Unlock()
	tr.sweepIdle()
	if n := tr.idleCount(key); n != 0 {
		t.Fatalf("%d idle connections after the sweep, want 0", n)
	}
}

// https, upgrades and 100-continue go to the fallback transport.
func TestTransportFallback(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "tls") }))
	defer srv.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Header.Get("Expect"))
	}))
	defer plain.Close()
	tr, dials := newTestTransport(t)
	tr.fallback = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}}
	res, err := tr.RoundTrip(newRequest(t, context.Background(), srv.URL, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, res); got != "tls" {
		t.Fatalf("https answer %q", got)
	}
	req := newRequest(t, context.Background(), plain.URL, "x")
	req.Header.Set("Expect", "100-continue")
	if res, err = tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	readAll(t, res)
	if got := dials.Load(); got != 0 {
		t.Fatalf("%d connections of its own for https and 100-continue, want 0", got)
	}
}

// A reused connection reset once part of the answer arrived is not
// retried: the server was answering, so it had read the request.
func TestTransportDoesNotRetryPartAnswered(t *testing.T) {
	const answer, part = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "HTTP/1.1 200 OK\r\n"
	var requests atomic.Int32
	url := newRawServer(t, func(n int, c net.Conn, br *bufio.Reader) {
		for i := 0; ; i++ {
			if _, _, err := readRequest(br); err != nil {
				return
			}
			requests.Add(1)
			if n == 0 && i == 1 {
				_, _ = io.WriteString(c, part)
				_, _ = br.ReadByte() // until the client closes
				return
			}
			_, _ = io.WriteString(c, answer)
		}
	})
	tr, dials := newTestTransport(t)
	dial := tr.dial
	tr.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &resetConn{Conn: c, left: len(answer) + len(part)}, nil
	}
	res, err := tr.RoundTrip(newRequest(t, context.Background(), url, "first"))
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, res)
	if res, err = tr.RoundTrip(newRequest(t, context.Background(), url, "second")); !errors.Is(err, syscall.ECONNRESET) {
		if err == nil {
			_ = res.Body.Close()
		}
		t.Fatalf("error %v, want the reset", err)
	}
	if r, d := requests.Load(), dials.Load(); r != 2 || d != 1 {
		t.Fatalf("%d requests seen on %d connections, want 2 on 1", r, d)
	}
}

// resetConn reads as if reset by the peer once left bytes were read.
type resetConn struct {
	net.Conn
	left int
}

func (c *resetConn) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	}
	n, err := c.Conn.Read(p[:min(len(p), c.left)])
	c.left -= n
	return n, err
}

// A connection that carried an exchange under a deadline goes back to the
// pool without it: a request after that deadline, with none of its own,
// goes out on the same connection and is answered.
func TestTransportClearsExchangeDeadline(t *testing.T) {
	url := newRawServer(t, func(n int, c net.Conn, br *bufio.Reader) {
		for {
			if _, _, err := readRequest(br); err != nil {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr, dials := newTestTransport(t)
	req := newRequest(t, context.Background(), url, "")
	msg := "POST / HTTP/1.1\r\nHost: " + req.URL.Host + "\r\nContent-Length: 0\r\n\r\n"
	deadline := time.Now().Add(50 * time.Millisecond)
	res, err := tr.roundTrip(context.Background(), canonicalAddr(req), req, []byte(msg), deadline)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, res); got != "ok" {
		t.Fatalf("answer %q", got)
	}
	for time.Now().Before(deadline.Add(10 * time.Millisecond)) {
		time.Sleep(10 * time.Millisecond) // until the first exchange's deadline has passed
	}
	res, err = tr.RoundTrip(newRequest(t, context.Background(), url, "x"))
	if err != nil {
		t.Fatalf("a request after the deadline of the connection's last exchange: %v", err)
	}
	if got := readAll(t, res); got != "ok" || dials.Load() != 1 {
		t.Fatalf("answer %q on %d connections, want \"ok\" on 1", got, dials.Load())
	}
}

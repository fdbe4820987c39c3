package h1

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// serve runs Server with h on a loopback port; the cleanup shuts it
// down.
func serve(t *testing.T, hs *http.Server) (addr string, s *Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if hs.ErrorLog == nil {
		hs.ErrorLog = log.New(io.Discard, "", 0)
	}
	s = &Server{HTTP: hs}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		<-served
	})
	return ln.Addr().String(), s
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A client that goes away while its request is being served cancels the
// request's context, with or without a body, as net/http's server does.
func TestClientCloseCancels(t *testing.T) {
	for _, body := range []string{"", `{"x":1}`} {
		started, cancelled := make(chan struct{}), make(chan error, 1)
		addr, _ := serve(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			close(started)
			select {
			case <-r.Context().Done():
				cancelled <- r.Context().Err()
			case <-time.After(time.Minute):
				cancelled <- errors.New("not cancelled in a minute")
			}
		})})
		c := dial(t, addr)
		if _, err := io.WriteString(c, req("POST", "/generate", "", body)); err != nil {
			t.Fatal(err)
		}
		<-started
		_ = c.Close()
		if err := <-cancelled; !errors.Is(err, context.Canceled) {
			t.Errorf("body %q: the request's context ended with %v, want context.Canceled", body, err)
		}
	}
}

// A request that runs past the time the connection starts to be watched
// and ends normally leaves the connection for the next one: a pipelined
// request that arrived meanwhile (which ends the watching read) is
// served, not taken for a close, and so is the one after it, watched in
// turn and ended while its watching read is pending.
func TestWatchedConnectionCarriesOn(t *testing.T) {
	release := map[string]chan struct{}{"/slow": make(chan struct{}), "/slow2": make(chan struct{})}
	running := make(chan string, 3)
	addr, _ := serve(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // the watching starts at the body's end
		running <- r.URL.Path
		if ch := release[r.URL.Path]; ch != nil {
			<-ch
		}
		if err := r.Context().Err(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, r.URL.Path)
	})})
	c := dial(t, addr)
	br := bufio.NewReader(c)
	send := func(path string) {
		if _, err := io.WriteString(c, req("POST", path, "", "x")); err != nil {
			t.Fatal(err)
		}
	}
	read := func(want string) {
		t.Helper()
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK || string(b) != want {
			t.Errorf("got %d %q, want 200 %q", res.StatusCode, b, want)
		}
	}
	send("/slow")
	<-running
	time.Sleep(2 * watchAfter) // the watching read is pending
	send("/slow2")             // and ends with its first byte
	close(release["/slow"])
	read("/slow")
	<-running
	time.Sleep(2 * watchAfter) // /slow2's watching read is pending
	close(release["/slow2"])
	read("/slow2")
	for _, path := range []string{"/next", "/last"} {
		send(path)
		read(path)
	}
}

// Shutdown closes idle connections, lets a request in flight finish with
// Connection: close, and makes Serve return http.ErrServerClosed.
func TestShutdown(t *testing.T) {
	inFlight, finish := make(chan struct{}), make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{HTTP: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			close(inFlight)
			<-finish
		}
		_, _ = io.WriteString(w, "done")
	}), ErrorLog: log.New(io.Discard, "", 0)}}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()

	idle := dial(t, ln.Addr().String())
	if _, err := io.WriteString(idle, req("POST", "/x", "", "")); err != nil {
		t.Fatal(err)
	}
	ibr := bufio.NewReader(idle)
	if res, err := http.ReadResponse(ibr, nil); err != nil {
		t.Fatal(err)
	} else {
		_, _ = io.Copy(io.Discard, res.Body)
	}
	busy := dial(t, ln.Addr().String())
	if _, err := io.WriteString(busy, req("POST", "/wait", "", "")); err != nil {
		t.Fatal(err)
	}
	<-inFlight

	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if _, err := ibr.ReadByte(); err == nil {
		t.Error("the idle connection got a byte, want it closed")
	}
	close(finish)
	res, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	if string(b) != "done" || !res.Close {
		t.Errorf("the request in flight got %q, Close %v; want \"done\" and Connection: close", b, res.Close)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v, want http.ErrServerClosed", err)
	}
}

// A head that does not arrive within ReadHeaderTimeout closes the
// connection without an answer, as net/http's server does.
func TestHeaderTimeout(t *testing.T) {
	addr, _ := serve(t, &http.Server{ReadHeaderTimeout: 100 * time.Millisecond, Handler: http.NotFoundHandler()})
	c := dial(t, addr)
	if _, err := io.WriteString(c, "POST /generate HTTP/1.1\r\nHost: h\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	b, err := io.ReadAll(c)
	if err != nil || len(b) != 0 {
		t.Errorf("read %q, %v; want the connection closed without an answer", b, err)
	}
}

// A handler's panic is logged and closes the connection; the server
// goes on serving others.
func TestPanicClosesConnection(t *testing.T) {
	logged := &lockedLog{}
	addr, _ := serve(t, &http.Server{ErrorLog: log.New(logged, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("boom")
		}
		_, _ = io.WriteString(w, "ok")
	})})
	c := dial(t, addr)
	if _, err := io.WriteString(c, req("POST", "/panic", "", "")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Errorf("a panicking handler's client read %q, want nothing", b)
	}
	res, err := http.Post("http://"+addr+"/other", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if string(b) != "ok" {
		t.Errorf("the next client got %q, want ok", b)
	}
	if !strings.Contains(logged.String(), "panic serving") || !strings.Contains(logged.String(), "boom") {
		t.Errorf("log %q does not tell of the panic", logged.String())
	}
}

// lockedLog is a log's output that tests read while the server writes.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A goroutine the handler leaves reading the body (a transport still
// sending it upstream) does not race the connection's next request: it
// reads what is left of its own body or is told the body is closed, and
// the next request on the connection is served whole.
func TestBodyReadAfterHandler(t *testing.T) {
	left := make(chan error, 1)
	addr, _ := serve(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/first" {
			go func() {
				_, err := io.Copy(io.Discard, r.Body)
				left <- err
			}()
			_, _ = io.WriteString(w, "first")
			return
		}
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})})
	c := dial(t, addr)
	big := strings.Repeat("a", 64<<10) // more than one read, less than maxDiscard
	next := strings.Repeat("b", 1000)
	go func() { _, _ = io.WriteString(c, req("POST", "/first", "", big)+req("POST", "/next", "", next)) }()
	br := bufio.NewReader(c)
	for _, want := range []string{"first", next} {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		if string(b) != want {
			t.Errorf("got %d bytes %.20q…, want %d bytes %.20q…", len(b), b, len(want), want)
		}
	}
	if err := <-left; err != nil && !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Errorf("the goroutine's read of the first body ended with %v, want nil or http.ErrBodyReadAfterClose", err)
	}
}

// A client still sending a body the handler did not read gets the answer,
// read late, and no reset: the connection is half-closed and what the
// client sends is drained for a while before it closes. (Closed at once,
// it is reset, and the client's send fails with a broken pipe.)
func TestUnreadBodyAnswerArrives(t *testing.T) {
	was := lingerTime
	lingerTime = time.Minute // ends when the client closes
	t.Cleanup(func() { lingerTime = was })
	answered := make(chan struct{}, 1)
	addr, _ := serve(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { answered <- struct{}{} }()
		http.Error(w, strings.Repeat("too large ", 1000), http.StatusRequestEntityTooLarge)
	})})
	c := dial(t, addr)
	const size = 64 << 20 // more than the sockets' buffers hold
	sent := make(chan error, 1)
	go func() {
		_, err := io.WriteString(c, "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: "+strconv.Itoa(size)+"\r\n\r\n")
		if err == nil {
			_, err = c.Write(make([]byte, size))
		}
		sent <- err
	}()
	<-answered
	// Closed at once, the connection would have been reset by now. (On a
	// machine too slow for that to happen in time, the test passes either
	// way; it cannot fail for slowness.)
	time.Sleep(200 * time.Millisecond)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusRequestEntityTooLarge || len(b) != 10001 {
		t.Fatalf("got %d and %d bytes of the answer, then %v; want 413 and 10001 bytes", res.StatusCode, len(b), err)
	}
	if err := <-sent; err != nil {
		t.Errorf("sending the body: %v, want it drained", err)
	}
}

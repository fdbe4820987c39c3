package app

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/h1"
)

// fastServer serves a handler as Serve serves the router on a plain
// listener: proxy traffic on internal/h1, the rest handed to net/http.
// It stands where the tests had httptest.Server, so that the proxy's
// end-to-end tests run through the server the product runs.
type fastServer struct {
	URL  string
	s    *h1.Server
	ln   *trackingListener
	done chan error
}

func newFastServer(t testing.TB, h http.Handler) *fastServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fastServer{
		URL:  "http://" + ln.Addr().String(),
		s:    &h1.Server{HTTP: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}, Fast: proxyTraffic},
		ln:   &trackingListener{Listener: ln},
		done: make(chan error, 1),
	}
	go func() { f.done <- f.s.Serve(f.ln) }()
	return f
}

// CloseClientConnections closes every connection the server accepted,
// as httptest.Server's does: the clients see their server die.
func (f *fastServer) CloseClientConnections() { f.ln.closeAll() }

// Close closes the clients' connections and shuts the server down.
func (f *fastServer) Close() {
	f.ln.closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = f.s.Shutdown(ctx)
	<-f.done
}

// trackingListener remembers the connections it accepted.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *trackingListener) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

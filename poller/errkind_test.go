package poller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/routing"
)

// refusedURLs returns n policy URLs on distinct loopback ports that
// refuse connections: each was listening a moment ago (all together, so
// no two share a port) and is closed now.
func refusedURLs(tb testing.TB, n int) []string {
	tb.Helper()
	lns := make([]net.Listener, n)
	urls := make([]string, n)
	for i := range lns {
		// 127.0.0.2, not 127.0.0.1: a port given back here is soon taken
		// again by another package's test listening on 127.0.0.1, which
		// would then answer; on 127.0.0.2 it refuses whatever others bind.
		ln, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			tb.Fatal(err)
		}
		lns[i], urls[i] = ln, "http://"+ln.Addr().String()
	}
	for _, ln := range lns {
		if err := ln.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	return urls
}

// Probes that fail on the wire are classified from the Go error, not its
// text: a refused connection, a timeout, a certificate not trusted, a bad
// URL.
func TestProbeErrKind(t *testing.T) {
	hung := newFake(t, hang)
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "true") }))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	// A timeout long enough for a handshake under -race on a busy machine,
	// but for the hung policy.
	const long, short = 5 * time.Second, 50 * time.Millisecond
	tests := []struct {
		name, url string
		timeout   time.Duration
		want      string
	}{
		{"refused", refusedURLs(t, 1)[0], long, routing.ErrKindConnectRefused},
		{"timeout", hung.URL, short, routing.ErrKindTimeout},
		{"untrusted certificate", tlsSrv.URL, long, routing.ErrKindTLS},
		{"bad scheme", "ftp://example.com", long, routing.ErrKindOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New(nil, Config{Interval: time.Second, Timeout: tt.timeout, Logger: discard()})
			defer p.closeIdle()
			_, err := p.probe(context.Background(), newMember(routing.Policy{ID: "p", URL: tt.url}))
			if err == nil {
				t.Fatalf("probe of %s succeeded", tt.url)
			}
			if got := errKind(err); got != tt.want {
				t.Errorf("errKind(%v) = %q, want %q", err, got, tt.want)
			}
		})
	}
}

// The classes that need a resolver or a wrapped chain, on made errors.
func TestErrKindOfChains(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"dns", fmt.Errorf("policy p: GET http://nowhere/idle: %w", &net.DNSError{Err: "no such host", Name: "nowhere", IsNotFound: true}), routing.ErrKindDNS},
		{"dns timeout is dns", &net.DNSError{Err: "i/o timeout", Name: "slow", IsTimeout: true}, routing.ErrKindDNS},
		{"deadline", fmt.Errorf("policy p: %w", context.DeadlineExceeded), routing.ErrKindTimeout},
		{"status through %w", fmt.Errorf("policy p: %w", &engine.StatusError{Endpoint: "GET /x", Status: 503}), "status_503"},
		{"engine answer unusable", fmt.Errorf("policy p: %w", &engine.DecodeError{Err: errors.New(`GET http://h/get_load: [0] lacks "num_reqs"`)}), routing.ErrKindDecode},
		{"plain", errors.New("something else"), routing.ErrKindOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errKind(tt.err); got != tt.want {
				t.Errorf("errKind(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

package app

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/internal/syncbuf"
)

// serveWith serves a built app with the server HTTPServer makes, as
// Serve does, after edit changed it; it returns the server's URL.
func serveWith(t *testing.T, cfg Config, edit func(*http.Server)) (*App, string) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	run := make(chan error, 1)
	go func() { run <- a.Run(ctx) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := a.HTTPServer()
	edit(srv)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-served
		cancel()
		if err := <-run; err != nil {
			t.Errorf("Run: %v", err)
		}
		a.Server.CloseIdleConnections()
		_ = a.Close()
	})
	return a, "http://" + ln.Addr().String()
}

// A connection that sends nothing is closed after ReadHeaderTimeout: the
// server the router runs (net/http's, for proxy traffic too) holds no
// silent connection for its idle timeout.
func TestSilentConnectionClosedAfterReadHeaderTimeout(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Addr = ""
	cfg.ReadHeaderTimeout = 100 * time.Millisecond
	_, base := serveWith(t, cfg, func(s *http.Server) {
		if s.ReadHeaderTimeout != cfg.ReadHeaderTimeout || s.IdleTimeout <= s.ReadHeaderTimeout {
			t.Fatalf("ReadHeaderTimeout %v, IdleTimeout %v; want --read-header-timeout, below the idle timeout", s.ReadHeaderTimeout, s.IdleTimeout)
		}
	})
	c, err := net.Dial("tcp", base[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Far past ReadHeaderTimeout, and far below the idle timeout (2 min):
	// only the first closes the connection within it.
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	if n != 0 || errors.As(err, &ne) && ne.Timeout() || err == nil {
		t.Fatalf("read %d bytes, %v; want the server to close the silent connection", n, err)
	}
}

// A generation runs to its end however long it takes: past the server's
// ReadTimeout, whose deadline also governs net/http's read that watches
// for the client's close (golang/go#18447), and past its WriteTimeout,
// streamed or not, resumable or not.
func TestGenerationOutlastsServerTimeouts(t *testing.T) {
	const tokens = 20 // at 25 tokens a second: 0.8 s at least, 8 times the timeouts
	fleet, err := fakepolicy.New(1, rand.NewPCG(1, 2), fakepolicy.Options{Engine: fakepolicy.EngineSGLang, TokensPerSecond: 25})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	cfg := DefaultConfig()
	cfg.Addr = ""
	cfg.PollTimeout = 5 * time.Second
	a, base := serveWith(t, cfg, func(s *http.Server) {
		s.ReadTimeout, s.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
	})
	code, body := call(t, base, "PUT", "/policies", `{"policies":[{"url":"`+fleet.URL(0)+`","index":0,"engine":"sglang","capacity":8}]}`)
	if code != http.StatusOK {
		t.Fatalf("PUT /policies: %d %s", code, body)
	}
	poll.Until(t, "the engine probed", func() bool { return a.Ready() == nil })
	for _, tt := range []struct {
		name   string
		stream bool
		resume string
	}{{"plain", false, "0"}, {"resumable", false, "1"}, {"stream", true, "0"}, {"resumable stream", true, "1"}} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := json.Marshal(map[string]any{"input_ids": []int{1, 2, 3}, "stream": tt.stream,
				"sampling_params": map[string]any{"max_new_tokens": tokens, "temperature": 0}})
			if tt.stream {
				var chunks atomic.Int64
				s := readStream(http.DefaultClient, base, req, map[string]string{"X-Resume-On-Abort": tt.resume}, &chunks)
				if s.err != nil || s.status != http.StatusOK || s.done != 1 || len(s.chunks) == 0 ||
					s.chunks[len(s.chunks)-1].Meta.CompletionTokens != tokens {
					t.Fatalf("stream: %d, %d chunks, %d [DONE], %v; want %d tokens and [DONE]", s.status, len(s.chunks), s.done, s.err, tokens)
				}
				return
			}
			code, body := call(t, base, "POST", "/generate", string(req), "X-Resume-On-Abort", tt.resume)
			var ans struct {
				OutputIDs []int64 `json:"output_ids"`
			}
			if err := json.Unmarshal(body, &ans); code != http.StatusOK || err != nil || len(ans.OutputIDs) != tokens {
				t.Fatalf("answer %d %s (%v); want %s output_ids", code, body, err, strconv.Itoa(tokens))
			}
		})
	}
}

// A proxied request whose body does not arrive whole (the client stops
// sending before its Content-Length) is answered 400, forwarded nowhere,
// and logged as what it was, not as a 200 with an empty body.
func TestIncompleteBodyIsRefused(t *testing.T) {
	var logs syncbuf.Buffer
	cfg := DefaultConfig()
	cfg.Addr = ""
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	_, base := serveWith(t, cfg, func(*http.Server) {})
	c, err := net.Dial("tcp", base[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"+`{"model":"m","prompt":"`)
	_ = c.(*net.TCPConn).CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "did not arrive whole") {
		t.Errorf("answer %d %s; want 400 saying the body did not arrive whole", res.StatusCode, b)
	}
	poll.Until(t, "the log to say so", func() bool {
		return strings.Contains(logs.String(), "request body incomplete") && strings.Contains(logs.String(), `"status":400`)
	})
}

// registerSGLangPair registers the fleet's first two engines as SGLang
// policies of capacity c with the router a serves at base, and waits until
// both are probed at version 1 (the fleet's engines say "1").
func registerSGLangPair(t *testing.T, a *App, base string, fleet *fakepolicy.Fleet, c int) {
	t.Helper()
	code, body := call(t, base, "PUT", "/policies", `{"policies":[`+
		`{"url":"`+fleet.URL(0)+`","index":0,"engine":"sglang","capacity":`+strconv.Itoa(c)+`},`+
		`{"url":"`+fleet.URL(1)+`","index":1,"engine":"sglang","capacity":`+strconv.Itoa(c)+`}]}`)
	if code != http.StatusOK {
		t.Fatalf("PUT /policies: %d %s", code, body)
	}
	poll.Until(t, "both engines probed at version 1", func() bool {
		if a.Ready() != nil {
			return false
		}
		for _, ps := range a.State.Stats().Policies {
			if ps.Version != 1 || !ps.Available {
				return false
			}
		}
		return true
	})
}

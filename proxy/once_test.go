package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

// closingEngine is an engine that reads a whole request and then closes
// the connection without answering, on the closeOn-th request of each
// connection (1: a fresh connection; 2: one reused after an answer). The
// requests before it are answered 200. It counts the requests it read by
// their body.
type closingEngine struct {
	ln      net.Listener
	closeOn int
	answer  string
	mu      sync.Mutex
	got     map[string]int
	wg      sync.WaitGroup
}

func newClosingEngine(t *testing.T, closeOn int, answer string) *closingEngine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &closingEngine{ln: ln, closeOn: closeOn, answer: answer, got: make(map[string]int)}
	e.wg.Go(e.serve)
	t.Cleanup(func() { _ = ln.Close(); e.wg.Wait() })
	return e
}

func (e *closingEngine) URL() string { return "http://" + e.ln.Addr().String() }

func (e *closingEngine) serve() {
	for {
		c, err := e.ln.Accept()
		if err != nil {
			return
		}
		e.wg.Go(func() { e.conn(c) })
	}
}

func (e *closingEngine) conn(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for n := 1; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		e.mu.Lock()
		e.got[string(body)]++
		e.mu.Unlock()
		if n == e.closeOn {
			return // read whole, never answered
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+
			strconv.Itoa(len(e.answer))+"\r\n\r\n"+e.answer)
	}
}

// received is how many times the engine read a request of this body.
func (e *closingEngine) received(body string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.got[body]
}

// A request that reached an engine whose connection then dropped, before
// any answer, is answered 502 and sent nowhere again: not on a new
// connection to the same engine (http.Transport replays only what is
// replayable, and the proxy strips Idempotency-Key, which would make a
// POST so), not to another engine. On a fresh and on a reused
// connection, plain and resumable, each request is received once.
func TestWrittenRequestIsNeverSentTwice(t *testing.T) {
	const sglang = `{"text":"ok","output_ids":[1],"meta_info":{"id":"x","finish_reason":{"type":"length","length":1},"completion_tokens":1}}`
	for _, tt := range []struct {
		name    string
		path    string
		body    string
		closeOn int
		hdr     map[string]string
	}{
		{"fresh/plain", "/v1/completions", `{"model":"m","prompt":"p%d"}`, 1, nil},
		{"reused/plain", "/v1/completions", `{"model":"m","prompt":"p%d"}`, 2, nil},
		{"reused/plain/idempotency-key", "/v1/completions", `{"model":"m","prompt":"p%d"}`, 2, map[string]string{"Idempotency-Key": "k", "X-Idempotency-Key": "k"}},
		{"fresh/resumable", "/generate", `{"input_ids":[%d,2],"sampling_params":{"max_new_tokens":4}}`, 1, nil},
		{"reused/resumable", "/generate", `{"input_ids":[%d,2],"sampling_params":{"max_new_tokens":4}}`, 2, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			engines := []*closingEngine{newClosingEngine(t, tt.closeOn, sglang), newClosingEngine(t, tt.closeOn, sglang)}
			l := &fakeLeaser{policies: []routing.Policy{{Index: 0, ID: "p0", URL: engines[0].URL()}, {Index: 1, ID: "p1", URL: engines[1].URL()}}}
			var ew errorWriter
			p := New(Config{Options: Options{Retries: 2, Resume: true}, Leaser: l, WriteError: ew.write})
			t.Cleanup(p.CloseIdleConnections)
			for i := 1; i <= 4; i++ {
				body := strings.Replace(tt.body, "%d", strconv.Itoa(i), 1)
				req := httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(body))
				for k, v := range tt.hdr {
					req.Header.Set(k, v)
				}
				rec := httptest.NewRecorder()
				p.Forward(rec, req)
				n := engines[0].received(body) + engines[1].received(body)
				closed := tt.closeOn == 1 || i%2 == 0 // on a reused connection, every second request on it
				switch {
				case n != 1:
					t.Errorf("request %d: received %d times by the engines; want once", i, n)
				case closed && rec.Code != http.StatusServiceUnavailable: // errorWriter's status
					t.Errorf("request %d, dropped by its engine: %d %q; want the proxy's error", i, rec.Code, rec.Body)
				case !closed && rec.Code != http.StatusOK:
					t.Errorf("request %d: %d %q; want 200", i, rec.Code, rec.Body)
				}
			}
			ew.mu.Lock()
			defer ew.mu.Unlock()
			for _, err := range ew.errs {
				var perr *Error
				if !errors.As(err, &perr) || perr.Code != api.CodeUpstreamFailed {
					t.Errorf("WriteError got %v; want %s", err, api.CodeUpstreamFailed)
				}
			}
		})
	}
}

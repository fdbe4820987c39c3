package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

// roundTripperFunc hides the proxy's transport from the direct path, so
// that the request goes through httputil.ReverseProxy.
type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The direct path sends what httputil.ReverseProxy sends, and answers
// what it answers: the same requests through a proxy on each path reach
// the policy with the same request line, Host and headers, and the
// client gets the same status, headers and body.
func TestDirectPathMatchesReverseProxy(t *testing.T) {
	type seen struct {
		line, host, body string
		header           http.Header
	}
	var mu sync.Mutex
	var got []seen
	policy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h := r.Header.Clone()
		mu.Lock()
		got = append(got, seen{r.Method + " " + r.RequestURI, r.Host, string(b), h})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "dropped")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Request-Id", "from-policy")
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		if r.URL.Query().Get("trailer") != "" {
			w.Header().Set("Trailer", "X-Checksum")
			_, _ = io.WriteString(w, `{"text":"ok"}`)
			w.Header().Set("X-Checksum", "c1")
			w.Header().Set(http.TrailerPrefix+"X-Late", "l1")
			return
		}
		if r.URL.Query().Get("chunked") != "" {
			_, _ = io.WriteString(w, `{"text":`)
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, `"ok"}`)
	}))
	t.Cleanup(policy.Close)

	tr := NewTransport(nil)
	proxies := map[string]*Proxy{}
	for _, path := range []string{"direct", "reverseproxy"} {
		for _, base := range []string{"", "/base", "/base/?k=v"} {
			l := &fakeLeaser{policies: []routing.Policy{{Index: 3, ID: "p3", URL: policy.URL + base}}}
			var ew errorWriter
			opts := Options{Transport: tr, APIKey: func(routing.Policy) string { return "engine-key" }}
			if path == "reverseproxy" {
				opts.Transport = roundTripperFunc(tr.RoundTrip)
			}
			proxies[path+base] = New(Config{Options: opts, Leaser: l, WriteError: ew.write})
		}
	}
	t.Cleanup(tr.(*transport).CloseIdleConnections)
	servers := map[string]string{}
	for name, p := range proxies {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["X-Request-Id"] = []string{"from-router"}
			p.Forward(w, r)
		}))
		t.Cleanup(s.Close)
		servers[name] = s.Listener.Addr().String()
	}

	heads := []string{
		"POST /v1/completions HTTP/1.1\r\nHost: router.example\r\n",
		"POST /v1/completions?a=1&b=%2F HTTP/1.1\r\nHost: router.example:8080\r\nUser-Agent: trainer/1\r\nAuthorization: Bearer router-token\r\n",
		"POST /generate?trailer=1 HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Private\r\nX-Private: no\r\nKeep-Alive: 5\r\nTe: trailers, deflate\r\nProxy-Authorization: x\r\n",
		"POST /v1/chat/completions?chunked=1 HTTP/1.1\r\nHost: h\r\nForwarded: for=1.2.3.4\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Host: old\r\nX-Forwarded-Proto: https\r\nX-Session-Id: s1\r\nX-Multi: 1\r\nX-Multi: 2\r\n",
		"POST /a%2Fb/generate HTTP/1.1\r\nHost: h\r\nAccept-Encoding: gzip\r\n",
	}
	body := `{"model":"m","prompt":"hi"}`
	for _, base := range []string{"", "/base", "/base/?k=v"} {
		for i, head := range heads {
			var answers []string
			mu.Lock()
			got = nil
			mu.Unlock()
			for _, path := range []string{"direct", "reverseproxy"} {
				answers = append(answers, rawExchange(t, servers[path+base], head+fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body))+body))
			}
			mu.Lock()
			if len(got) != 2 {
				mu.Unlock()
				t.Fatalf("base %q, request %d: the policy saw %d requests, want 2", base, i, len(got))
			}
			d, rp := got[0], got[1]
			mu.Unlock()
			if d.line != rp.line || d.host != rp.host || d.body != rp.body || !sameHeaders(d.header, rp.header) {
				t.Errorf("base %q, request %d: the policy saw\n direct:       %s %s %q %v\n reverseproxy: %s %s %q %v",
					base, i, d.line, d.host, d.body, d.header, rp.line, rp.host, rp.body, rp.header)
			}
			if answers[0] != answers[1] {
				t.Errorf("base %q, request %d: the client got\n direct:       %q\n reverseproxy: %q", base, i, answers[0], answers[1])
			}
		}
	}
}

// sameHeaders compares headers whose multiple values may come in either
// order of their keys (ReverseProxy sorts them on the wire; the direct
// path writes them in map order), not of one key's values.
func sameHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// rawExchange sends one raw request to addr and returns its answer with
// the Date header cut out, the headers sorted.
func rawExchange(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	res.Header.Del("Date")
	var lines []string
	for k, v := range res.Header {
		lines = append(lines, k+": "+strings.Join(v, "|"))
	}
	for k, v := range res.Trailer {
		lines = append(lines, "trailer "+k+": "+strings.Join(v, "|"))
	}
	slices.Sort(lines)
	return fmt.Sprintf("%d %v chunked=%v\n%s\n%s", res.StatusCode, res.ContentLength, slices.Contains(res.TransferEncoding, "chunked"),
		strings.Join(lines, "\n"), b)
}

// --proxy-timeout bounds an attempt on either path: a policy that never
// answers gets the upstream_timeout answer, a stream that stalls ends
// with an error event that says so, and both leases end unfinished (the
// engine may still be at work), with the failure counted.
func TestProxyTimeout(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	policy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if r.URL.Path == "/v1/completions" {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
			w.(http.Flusher).Flush()
		}
		select { // stalls until the test ends or the proxy leaves
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(policy.Close)
	for _, path := range []string{"direct", "reverseproxy"} {
		t.Run(path, func(t *testing.T) {
			tr := NewTransport(nil)
			t.Cleanup(tr.(*transport).CloseIdleConnections)
			opts := Options{Transport: tr, Timeout: 100 * time.Millisecond}
			if path == "reverseproxy" {
				opts.Transport = roundTripperFunc(tr.RoundTrip)
			}
			l := &fakeLeaser{policies: []routing.Policy{{Index: 0, ID: "p0", URL: policy.URL}}}
			var ew errorWriter
			p := New(Config{Options: opts, Leaser: l, WriteError: ew.write})

			rec := httptest.NewRecorder()
			p.Forward(rec, httptest.NewRequest(http.MethodPost, "/generate", strings.NewReader(`{"text":"hi"}`)))
			var perr *Error
			if len(ew.errs) != 1 || !errors.As(ew.errs[0], &perr) || perr.Code != api.CodeUpstreamTimeout {
				t.Errorf("a policy that never answers: WriteError got %v; want one %s", ew.errs, api.CodeUpstreamTimeout)
			}

			rec = httptest.NewRecorder()
			p.Forward(rec, httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(`{"model":"m","prompt":"hi","stream":true}`)))
			if b := rec.Body.String(); rec.Code != http.StatusOK || !strings.HasPrefix(b, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n") ||
				!strings.Contains(b, "did not finish within --proxy-timeout") {
				t.Errorf("a stalled stream: %d %q; want its first event, then an error event naming --proxy-timeout", rec.Code, b)
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			if o, ok := l.released[1]; !ok || !o.Unfinished || o.Failure == nil {
				t.Errorf("lease 1 (no answer): released %v, %+v; want released unfinished, with a failure", ok, o)
			}
			// A generation longer than the bound is not the policy's fault.
			if o, ok := l.released[2]; !ok || !o.Unfinished || o.Failure != nil {
				t.Errorf("lease 2 (a stalled stream): released %v, %+v; want released unfinished, without a failure", ok, o)
			}
		})
	}
}

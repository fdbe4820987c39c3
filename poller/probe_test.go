package poller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/routing"
)

func TestParseAnswer(t *testing.T) {
	tests := []struct {
		body    string
		want    engine.Answer
		wantErr bool
	}{
		{body: `{"idle": true}`, want: engine.Answer{Idle: true}},
		{body: `{"idle": false}`, want: engine.Answer{Idle: false}},
		{body: `{"idle": true, "load": 3}`, want: engine.Answer{Idle: true, Load: 3, HasLoad: true}},
		{body: `{"idle": false, "load": 0, "model": "v7"}`, want: engine.Answer{Load: 0, HasLoad: true}},
		{body: `{"idle": true, "load": null}`, want: engine.Answer{Idle: true}},
		{body: "true", want: engine.Answer{Idle: true}},
		{body: " false\r\n", want: engine.Answer{Idle: false}},
		{body: "{\"idle\":true}\n", want: engine.Answer{Idle: true}},
		{body: ``, wantErr: true},
		{body: `TRUE`, wantErr: true},
		{body: `1`, wantErr: true},
		{body: `null`, wantErr: true},
		{body: `[true]`, wantErr: true},
		{body: `"idle"`, wantErr: true},
		{body: `{}`, wantErr: true},
		{body: `{"load": 3}`, wantErr: true},
		{body: `{"idle": null}`, wantErr: true},
		{body: `{"idle": "yes"}`, wantErr: true},
		{body: `{"idle": 1}`, wantErr: true},
		{body: `{"idle": true, "load": 2.5}`, wantErr: true},
		{body: `{"idle": true, "load": "3"}`, wantErr: true},
		{body: `{"idle": true} {"idle": false}`, wantErr: true},
		{body: `{"idle": true`, wantErr: true},
		{body: `<html>ok</html>`, wantErr: true},
		{body: `{"idle": true, "version": 8}`, want: engine.Answer{Idle: true, Version: 8, HasVersion: true}},
		{body: `{"idle": false, "weight_version": 3}`, want: engine.Answer{Version: 3, HasVersion: true}},
		{body: `{"idle": true, "version": 5, "weight_version": 3}`, want: engine.Answer{Idle: true, Version: 5, HasVersion: true}},
		{body: `{"idle": true, "version": null}`, want: engine.Answer{Idle: true}},
		{body: `{"idle": true, "version": -1}`, wantErr: true},
		{body: `{"idle": true, "version": "8"}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			got, err := engine.ParseIdle([]byte(tt.body))
			if (err != nil) != tt.wantErr {
				t.Fatalf("engine.ParseIdle(%q) error = %v, want error %v", tt.body, err, tt.wantErr)
			}
			if err == nil && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("engine.ParseIdle(%q) = %+v, want %+v", tt.body, got, tt.want)
			}
		})
	}
}

// handlerFunc is a fake policy's /idle behaviour.
type handlerFunc = func(w http.ResponseWriter, r *http.Request)

func answerWith(status int, body string) handlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}
}

func hang(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

func TestProbe(t *testing.T) {
	target := newFake(t, answerWith(200, `{"idle": true}`))
	tests := []struct {
		name    string
		h       handlerFunc
		path    string // appended to the server URL to make the policy URL
		want    engine.Answer
		wantErr string
		// wantKind is the cause kind of wantErr.
		wantKind string
	}{
		{name: "idle", h: answerWith(200, `{"idle": true}`), want: engine.Answer{Idle: true}},
		{name: "busy with load", h: answerWith(200, `{"idle": false, "load": 3}`), want: engine.Answer{Load: 3, HasLoad: true}},
		{name: "bare", h: answerWith(200, "false\n"), want: engine.Answer{}},
		{name: "trailing slash", h: answerWith(200, "true"), path: "/", want: engine.Answer{Idle: true}},
		{name: "path prefix", h: answerWith(200, "true"), path: "/p/3", want: engine.Answer{Idle: true}},
		{name: "201", h: answerWith(201, "true"), want: engine.Answer{Idle: true}},
		{name: "500", h: answerWith(500, `{"idle": true}`), wantErr: "status 500", wantKind: "status_500"},
		{name: "404", h: http.NotFound, wantErr: "status 404", wantKind: "status_404"},
		{name: "204", h: answerWith(204, ""), wantErr: "not an idle answer", wantKind: "decode"},
		{name: "redirect", h: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+"/idle", http.StatusFound)
		}, wantErr: "status 302", wantKind: "status_302"},
		{name: "garbage", h: answerWith(200, "OK"), wantErr: "not an idle answer", wantKind: "decode"},
		{name: "other json", h: answerWith(200, `{"status": "ok"}`), wantErr: `no boolean "idle"`, wantKind: "decode"},
		{name: "too large", h: answerWith(200, `{"idle": true, "pad": "`+strings.Repeat("x", MaxBodyBytes)+`"}`), wantErr: "exceeds", wantKind: "decode"},
		{name: "slow within timeout", h: func(w http.ResponseWriter, _ *http.Request) {
			time.Sleep(30 * time.Millisecond)
			fmt.Fprint(w, "true")
		}, want: engine.Answer{Idle: true}},
	}
	p := New(nil, Config{Interval: time.Second, Timeout: 10 * time.Second, Logger: discard()})
	defer p.closeIdle()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFake(t, tt.h)
			m := newMember(routing.Policy{ID: "p", URL: srv.URL + tt.path})
			got, err := p.probe(context.Background(), m)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("probe error = %v, want one containing %q", err, tt.wantErr)
				}
				if got := errKind(err); got != tt.wantKind {
					t.Errorf("errKind(%v) = %q, want %q", err, got, tt.wantKind)
				}
				return
			}
			if err != nil {
				t.Fatalf("probe: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("probe = %+v, want %+v", got, tt.want)
			}
			if gotPath, wantPath := srv.lastPath.Load(), strings.TrimSuffix(tt.path, "/")+"/idle"; gotPath == nil || *gotPath != wantPath {
				t.Errorf("probed path %v, want %q", gotPath, wantPath)
			}
		})
	}
	if n := target.hits.Load(); n != 0 {
		t.Errorf("redirect target got %d requests: the redirect was followed", n)
	}
}

func TestProbeTimeoutIsNetTimeout(t *testing.T) {
	srv := newFake(t, hang)
	p := New(nil, Config{Interval: 10 * time.Millisecond, Timeout: 20 * time.Millisecond, Logger: discard()})
	defer p.closeIdle()
	_, err := p.probe(context.Background(), newMember(routing.Policy{ID: "p", URL: srv.URL}))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("probe of a hung policy: %v, want a timeout", err)
	}
}

func TestProbeBadURL(t *testing.T) {
	p := New(nil, Config{Logger: discard()})
	for _, u := range []string{"ftp://example.com", "127.0.0.1:80", "http://[::1", "/relative"} {
		if _, err := p.probe(context.Background(), newMember(routing.Policy{ID: "p", URL: u})); err == nil {
			t.Errorf("probe of %q succeeded", u)
		}
	}
}

// TestProbeHidesPassword: a password in a policy URL stays out of probe
// errors and logs.
func TestProbeHidesPassword(t *testing.T) {
	srv := newFake(t, answerWith(500, ""))
	garbage := newFake(t, answerWith(200, "nope"))
	withPassword := func(u string) string { return strings.Replace(u, "http://", "http://user:s3cret@", 1) }
	p := New(nil, Config{Logger: discard()})
	defer p.closeIdle()
	for _, u := range []string{withPassword(srv.URL), withPassword(garbage.URL), "http://user:s3cret@127.0.0.1:1", "ftp://user:s3cret@example.com", "http://user:s3cret@[::1"} {
		m := newMember(routing.Policy{ID: "p", URL: u})
		_, err := p.probe(context.Background(), m)
		if err == nil {
			t.Fatalf("probe of %s succeeded", m.shown)
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(m.shown, "s3cret") {
			t.Errorf("password shown: error %q, url %q", err, m.shown)
		}
	}
}

// TestConnectionReuse checks that answers are read to the end, failed
// ones included, so that each policy keeps one connection.
func TestConnectionReuse(t *testing.T) {
	p := New(nil, Config{Interval: time.Second, Timeout: 10 * time.Second, Logger: discard()})
	defer p.closeIdle()
	for _, tt := range []struct {
		name string
		h    handlerFunc
	}{
		{"ok", answerWith(200, `{"idle": true, "load": 1}`)},
		{"500 with body", answerWith(500, strings.Repeat("error ", 1000))},
		{"garbage", answerWith(200, strings.Repeat("garbage ", 100))},
		{"too large but drainable", answerWith(200, strings.Repeat("x", 3*MaxBodyBytes))},
		{"redirect", answerWith(http.StatusMovedPermanently, "moved")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFake(t, tt.h)
			m := newMember(routing.Policy{ID: "p", URL: srv.URL})
			for range 20 {
				_, _ = p.probe(context.Background(), m)
			}
			if got := srv.conns.Load(); got != 1 {
				t.Errorf("20 probes used %d connections, want 1", got)
			}
		})
	}
}

// fake is a fake policy server: an httptest server that counts requests,
// connections and requests in flight, then runs its handler.
type fake struct {
	*httptest.Server
	hits     atomic.Int64
	conns    atomic.Int64
	inflight atomic.Int64
	lastPath atomic.Pointer[string]
}

func newFake(tb testing.TB, h handlerFunc) *fake {
	tb.Helper()
	f := &fake{}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		path := r.URL.Path
		f.lastPath.Store(&path)
		f.inflight.Add(1)
		defer f.inflight.Add(-1)
		h(w, r)
	}))
	f.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.conns.Add(1)
		}
	}
	f.Start()
	tb.Cleanup(f.Close)
	return f
}

func BenchmarkParseAnswer(b *testing.B) {
	for _, body := range []string{`true`, `{"idle": true}`, `{"idle": false, "load": 12}`} {
		b.Run(body, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := engine.ParseIdle([]byte(body)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkProbe is one probe round trip over a kept-alive loopback
// connection.
func BenchmarkProbe(b *testing.B) {
	srv := newFake(b, answerWith(200, `{"idle": true, "load": 2}`))
	p := New(nil, Config{Logger: discard()})
	defer p.closeIdle()
	m := newMember(routing.Policy{ID: "p", URL: srv.URL})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.probe(context.Background(), m); err != nil {
			b.Fatal(err)
		}
	}
}

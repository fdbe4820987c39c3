package handlers

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/proxy"
	"github.com/policyrouter/policyrouter/routing"
)

// The backends of these tests are written here from the OpenAI streaming
// format (chat.completion.chunk events, then "data: [DONE]"), not the
// project's fake policy: the proxy must carry any server's stream.

// backend is one upstream server that counts its requests in flight.
type backend struct {
	*httptest.Server
	inflight, peak atomic.Int64
	served         atomic.Int64
	mu             sync.Mutex
	auth           []string // Authorization headers seen
	cancelled      chan time.Time
}

func newBackend(tb testing.TB, h func(b *backend, w http.ResponseWriter, r *http.Request)) *backend {
	tb.Helper()
	b := &backend{cancelled: make(chan time.Time, 64)}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := b.inflight.Add(1)
		defer b.inflight.Add(-1)
		for {
			p := b.peak.Load()
			if n <= p || b.peak.CompareAndSwap(p, n) {
				break
			}
		}
		b.mu.Lock()
		b.auth = append(b.auth, r.Header.Get("Authorization"))
		b.mu.Unlock()
		b.served.Add(1)
		h(b, w, r)
	}))
	tb.Cleanup(b.Close)
	return b
}

// chunk writes one chat.completion.chunk event and flushes it.
func chunk(w http.ResponseWriter, text string) {
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": text}, "finish_reason": nil}},
	})
	fmt.Fprintf(w, "data: %s\n\n", b)
	w.(http.Flusher).Flush()
}

func streamHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
}

// proxyServer is a router on a real listener with the given backends
// registered as policies 0..n-1, each of the given capacity.
func proxyServer(tb testing.TB, cfg Config, capacity int, urls ...string) *httptest.Server {
	tb.Helper()
	ts := newTestServer(tb, cfg)
	var req api.ReplacePoliciesRequest
	for i, u := range urls {
		idx, c := i, capacity
		req.Policies = append(req.Policies, api.PolicyRequest{URL: u, Index: &idx, Capacity: &c})
	}
	body, _ := json.Marshal(req)
	want(tb, ts.do(tb, "PUT", "/policies", string(body)), http.StatusOK, nil)
	srv := httptest.NewServer(ts.h)
	tb.Cleanup(srv.Close)
	return srv
}

func postChat(ctx context.Context, tb testing.TB, url string, hdr map[string]string) (*http.Response, error) {
	tb.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return http.DefaultClient.Do(req)
}

// 64 concurrent streams arrive incrementally: each client reads its first
// chunk while its upstream is still held open, waiting for the test.
func TestProxyStreamsIncrementally(t *testing.T) {
	const streams = 64
	release := make(chan struct{})
	var backends []string
	for range 4 {
		b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
			streamHeaders(w)
			chunk(w, "first")
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			chunk(w, "second")
			fmt.Fprint(w, "data: [DONE]\n\n")
		})
		backends = append(backends, b.URL)
	}
	srv := proxyServer(t, Config{}, streams/4, backends...)
	var firsts sync.WaitGroup
	firsts.Add(streams)
	errs := make(chan error, streams)
	var done sync.WaitGroup
	for i := range streams {
		done.Go(func() {
			res, err := postChat(context.Background(), t, srv.URL, map[string]string{proxy.HeaderSessionID: "s" + strconv.Itoa(i)})
			if err != nil {
				errs <- err
				firsts.Done()
				return
			}
			defer res.Body.Close()
			rd := bufio.NewReader(res.Body)
			line, err := rd.ReadString('\n')
			firsts.Done()
			if err != nil || !strings.Contains(line, `"first"`) {
				errs <- fmt.Errorf("first line %q, %v", line, err)
				return
			}
			rest, _ := io.ReadAll(rd)
			if !strings.Contains(string(rest), `"second"`) || !strings.Contains(string(rest), "[DONE]") {
				errs <- fmt.Errorf("rest of the stream: %q", rest)
			}
			if res.Header.Get(proxy.HeaderPolicyIndex) == "" || res.Header.Get(proxy.HeaderWeightVersion) != "0" {
				errs <- fmt.Errorf("answer headers %v", res.Header)
			}
		})
	}
	firsts.Wait() // every client has its first chunk; no upstream has finished
	close(release)
	done.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A policy's concurrent proxied requests never exceed its capacity: the
// others wait for a slot.
func TestProxyRespectsCapacity(t *testing.T) {
	var bs []*backend
	var urls []string
	for range 3 {
		b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
			time.Sleep(5 * time.Millisecond)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"stop"}]}`)
		})
		bs = append(bs, b)
		urls = append(urls, b.URL)
	}
	srv := proxyServer(t, Config{}, 2, urls...)
	var wg sync.WaitGroup
	for range 60 {
		wg.Go(func() {
			res, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"p"}`))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Errorf("status %d", res.StatusCode)
			}
		})
	}
	wg.Wait()
	total := int64(0)
	for i, b := range bs {
		if p := b.peak.Load(); p > 2 {
			t.Errorf("backend %d: %d requests at once; capacity 2", i, p)
		}
		total += b.served.Load()
	}
	if total != 60 {
		t.Errorf("%d requests served; want 60", total)
	}
}

// A client that leaves mid-stream cancels its upstream request at once
// and frees the slot.
func TestProxyClientLeavesMidStream(t *testing.T) {
	b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		chunk(w, "first")
		<-r.Context().Done()
		b.cancelled <- time.Now()
	})
	ts := newTestServer(t, Config{})
	idx, capacity := 0, 1
	body, _ := json.Marshal(api.ReplacePoliciesRequest{Policies: []api.PolicyRequest{{URL: b.URL, Index: &idx, Capacity: &capacity}}})
	want(t, ts.do(t, "PUT", "/policies", string(body)), http.StatusOK, nil)
	srv := httptest.NewServer(ts.h)
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	res, err := postChat(ctx, t, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	left := time.Now()
	cancel()
	res.Body.Close()
	select {
	case at := <-b.cancelled:
		t.Logf("upstream cancelled %v after the client left", at.Sub(left))
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not cancelled")
	}
	deadline := time.Now().Add(10 * time.Second)
	for ts.State.Stats().Leases != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the slot was not freed")
		}
		time.Sleep(time.Millisecond)
	}
}

// Requests of one session land on one policy; the answer names it.
func TestProxySessionsStick(t *testing.T) {
	var urls []string
	for range 4 {
		b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"text":"ok","meta_info":{"id":"1","finish_reason":{"type":"stop"}}}`)
		})
		urls = append(urls, b.URL)
	}
	srv := proxyServer(t, Config{}, 4, urls...)
	for _, hdr := range []string{proxy.HeaderSessionID, proxy.HeaderSMGRoutingKey} {
		seen := map[string]bool{}
		for range 10 {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/generate", strings.NewReader(`{"text":"hi","sampling_params":{"max_new_tokens":4}}`))
			req.Header.Set(hdr, "episode-42")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d", res.StatusCode)
			}
			seen[res.Header.Get(proxy.HeaderPolicyIndex)] = true
		}
		if len(seen) != 1 {
			t.Errorf("%s: one session went to policies %v; want one", hdr, seen)
		}
	}
}

// A policy that refuses connections, or answers 503, is skipped before the
// first byte; the failure to connect counts against its health.
func TestProxyRetriesOnAnotherPolicy(t *testing.T) {
	good := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok":true}`)
	})
	busy := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()

	ts := newTestServer(t, Config{Proxy: proxy.Options{Retries: 2}})
	var reg api.ReplacePoliciesRequest
	for i, u := range []string{refused, busy.URL, good.URL} {
		idx := i
		reg.Policies = append(reg.Policies, api.PolicyRequest{URL: u, Index: &idx})
	}
	body, _ := json.Marshal(reg)
	want(t, ts.do(t, "PUT", "/policies", string(body)), http.StatusOK, nil)
	srv := httptest.NewServer(ts.h)
	defer srv.Close()
	// simple: policy 0 (refused) first, then 1 (503), then 2.
	res, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"p"}`))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get(proxy.HeaderPolicyIndex) != "2" || string(got) != `{"ok":true}` {
		t.Fatalf("answer %d from policy %q: %s; want 200 from 2", res.StatusCode, res.Header.Get(proxy.HeaderPolicyIndex), got)
	}
	ps, _ := ts.State.PolicyStats(ts.State.Snapshot().Policies()[0].ID)
	if ps.FailStreak != 1 || !strings.Contains(ps.LastError, "connect") {
		t.Errorf("refusing policy: fail streak %d, last error %q; want 1, a connect error", ps.FailStreak, ps.LastError)
	}
	if st := ts.State.Stats(); st.Leases != 0 {
		t.Errorf("%d leases out after the request", st.Leases)
	}

	// With no retries left, the client gets 502 upstream_failed.
	ts2 := newTestServer(t, Config{})
	idx := 0
	body, _ = json.Marshal(api.ReplacePoliciesRequest{Policies: []api.PolicyRequest{{URL: busy.URL, Index: &idx}}})
	want(t, ts2.do(t, "PUT", "/policies", string(body)), http.StatusOK, nil)
	rec := ts2.do(t, "POST", "/v1/completions", `{"prompt":"p"}`)
	wantError(t, rec, http.StatusBadGateway, api.CodeUpstreamFailed, "")
}

// An upstream that dies mid-stream ends the client's stream with an error
// event, frees the slot and counts against the policy's health.
func TestProxyUpstreamDiesMidStream(t *testing.T) {
	b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		chunk(w, "first")
		panic(http.ErrAbortHandler) // the connection drops
	})
	ts := newTestServer(t, Config{})
	idx := 0
	body, _ := json.Marshal(api.ReplacePoliciesRequest{Policies: []api.PolicyRequest{{URL: b.URL, Index: &idx}}})
	want(t, ts.do(t, "PUT", "/policies", string(body)), http.StatusOK, nil)
	srv := httptest.NewServer(ts.h)
	defer srv.Close()
	res, err := postChat(context.Background(), t, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("the client's stream broke off (%v) instead of ending with an error event: %q", err, got)
	}
	events := strings.Split(strings.TrimSpace(string(got)), "\n\n")
	last := events[len(events)-1]
	var ev struct {
		Error struct{ Message, Type, Code string }
	}
	if len(events) != 2 || !strings.HasPrefix(last, "data: ") || json.Unmarshal([]byte(strings.TrimPrefix(last, "data: ")), &ev) != nil ||
		ev.Error.Code != api.CodeUpstreamFailed || ev.Error.Message == "" {
		t.Fatalf("stream %q; want the first chunk, then an error event", got)
	}
	ps, _ := ts.State.PolicyStats(ts.State.Snapshot().Policies()[0].ID)
	if ps.FailStreak != 1 || ts.State.Stats().Leases != 0 {
		t.Errorf("fail streak %d, leases %d; want 1, 0", ps.FailStreak, ts.State.Stats().Leases)
	}
}

// The client's bearer token never reaches a policy; the policy's key
// does.
func TestProxyAuthorization(t *testing.T) {
	b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{}`)
	})
	ts := newTestServer(t, Config{Proxy: proxy.Options{APIKey: func(p routing.Policy) string { return "engine-key-" + strconv.Itoa(p.Index) }}})
	idx := 0
	body, _ := json.Marshal(api.ReplacePoliciesRequest{Policies: []api.PolicyRequest{{URL: b.URL, Index: &idx}}})
	want(t, ts.do(t, "PUT", "/policies", string(body)), http.StatusOK, nil)
	req := ts.request("POST", "/v1/completions", `{"prompt":"p"}`)
	req.Header.Set("Authorization", "Bearer router-token")
	if rec := ts.doReq(t, req); rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	b.mu.Lock()
	if len(b.auth) != 1 || b.auth[0] != "Bearer engine-key-0" {
		t.Errorf("the policy saw Authorization %q; want only its own key", b.auth)
	}
	b.auth = nil
	b.mu.Unlock()

	// By default the key is the policy's registered api_key, which no
	// answer shows.
	ts2 := newTestServer(t, Config{})
	rec := ts2.do(t, "PUT", "/policies", `{"policies": [{"url": "`+b.URL+`", "index": 0, "api_key": "sk-engine-secret"}]}`)
	if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), "sk-engine-secret") {
		t.Fatalf("register: %d %s", rec.Code, rec.Body)
	}
	req = ts2.request("POST", "/v1/chat/completions", `{"messages": []}`)
	req.Header.Set("Authorization", "Bearer router-token")
	if rec := ts2.doReq(t, req); rec.Code != http.StatusOK || strings.Contains(rec.Body.String()+fmt.Sprint(rec.Header()), "sk-engine-secret") {
		t.Fatalf("status %d: %s %v", rec.Code, rec.Body, rec.Header())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.auth) != 1 || b.auth[0] != "Bearer sk-engine-secret" {
		t.Errorf("the policy saw Authorization %q; want its registered api_key", b.auth)
	}
}

// Bad routing headers are a 422 naming the header; an oversized body 413.
func TestProxyBadInput(t *testing.T) {
	ts := newTestServer(t, Config{Proxy: proxy.Options{MaxBody: 16}})
	ts.register(t, 1)
	for _, tt := range []struct{ header, value string }{
		{proxy.HeaderMinWeightVersion, "soon"},
		{proxy.HeaderMinWeightVersion, "-1"},
		{proxy.HeaderRouter, "node_affinity"}, // round robin issues no lease
		{proxy.HeaderRouter, "fifo"},
		{proxy.HeaderSessionID, strings.Repeat("s", 300)},
		{proxy.HeaderStickyWaitMS, "-5"},
	} {
		req := ts.request("POST", "/generate", `{}`)
		req.Header.Set(tt.header, tt.value)
		wantError(t, ts.doReq(t, req), http.StatusUnprocessableEntity, api.CodeValidationFailed, tt.header)
	}
	wantError(t, ts.do(t, "POST", "/generate", `{"text": "far too long for the limit"}`), http.StatusRequestEntityTooLarge, api.CodeTooLarge, "")
}

// GET /v1/models lists the routable policies' models once each.
func TestProxyModels(t *testing.T) {
	var urls []string
	for _, models := range [][]string{{"qwen"}, {"qwen", "llama"}} {
		b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
			var data []map[string]any
			for _, m := range models {
				data = append(data, map[string]any{"id": m, "object": "model", "owned_by": "x"})
			}
			json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
		})
		urls = append(urls, b.URL)
	}
	srv := proxyServer(t, Config{}, 1, urls...)
	res, err := http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var list struct {
		Object string
		Data   []struct{ ID string }
	}
	if err := json.NewDecoder(res.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	if list.Object != "list" || strings.Join(ids, ",") != "qwen,llama" {
		t.Errorf("models %+v; want qwen, llama", list)
	}
}

// An X-Env-ID that names no env worker of the topology is named in the
// answer (X-Env-Unmapped), one that does is not.
func TestProxyEnvUnmapped(t *testing.T) {
	b := newBackend(t, func(b *backend, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"text":"ok","meta_info":{"id":"1","finish_reason":{"type":"stop"}}}`)
	})
	srv := proxyServer(t, Config{}, 1, b.URL)
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/topology", strings.NewReader(`{"node-a": {"env": {"ids": [0]}, "eval": {"ids": [0]}}}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("PUT /topology: %d", res.StatusCode)
	}
	for env, want := range map[string]string{"env-0": "", "worker-9": "true", "": ""} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/generate", strings.NewReader(`{"text":"hi"}`))
		if env != "" {
			req.Header.Set(proxy.HeaderEnvID, env)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if got := res.Header.Get(proxy.HeaderEnvUnmapped); res.StatusCode != http.StatusOK || got != want {
			t.Errorf("X-Env-ID %q: status %d, X-Env-Unmapped %q; want 200, %q", env, res.StatusCode, got, want)
		}
	}
}

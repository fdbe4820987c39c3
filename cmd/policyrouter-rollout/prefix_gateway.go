package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
)

// cacheAwareGateway runs the cache_aware rule (prefix_cacheaware.go) as
// what SGLang Model Gateway is: a gateway, one HTTP hop in front of the
// engines, rather than a picker inside the client. Its /generate does
// what the gateway's regular HTTP router does for a /generate
// (sgl-model-gateway/src/routers/http/router.rs route_typed_request and
// send_typed_request, sgl-project/sglang commit
// 033e8423f994c635b5efbdd8b8390f56d436162b): it reads the whole request
// body and decodes it (the gateway deserialises a GenerateRequest), takes
// the prompt for routing (extract_text_for_routing: the input_ids; here
// the token ids themselves, see prefix_cacheaware.go), asks the policy for
// a worker, counts the request in that worker's load for as long as it
// runs (WorkerLoadGuard, dropped once the worker's answer is read; here
// once it has been passed on), and forwards the body to the worker.
//
// It is net/http/httputil.ReverseProxy with the rule's choice as its
// Rewrite. The gateway forwards the body it read, unchanged, where SMG
// serialises the request again: if anything, this hop costs less than
// SMG's. It adds one header of its own, gatewayWorkerHeader, so that the
// simulator can count the requests each worker served.
type cacheAwareGateway struct {
	rule    *cacheAware
	targets []*url.URL
	proxy   *httputil.ReverseProxy
	srv     *http.Server
	url     string
}

// gatewayWorkerHeader names the worker the gateway chose, in its answer.
const gatewayWorkerHeader = "X-Gateway-Worker"

// maxGatewayBody is the largest request body the gateway reads.
const maxGatewayBody = 64 << 20

// workerKey is the context key of the worker chosen for a request.
type workerKey struct{}

// startCacheAwareGateway serves the gateway on a loopback port in front
// of the engines at urls, forwarding through transport.
func startCacheAwareGateway(urls []string, transport http.RoundTripper) (*cacheAwareGateway, error) {
	g := &cacheAwareGateway{rule: newCacheAware(len(urls))}
	for _, u := range urls {
		t, err := url.Parse(u)
		if err != nil {
			return nil, fmt.Errorf("engine URL %q: %w", u, err)
		}
		g.targets = append(g.targets, t)
	}
	g.proxy = &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(g.targets[pr.In.Context().Value(workerKey{}).(int)])
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Set(gatewayWorkerHeader, strconv.Itoa(resp.Request.Context().Value(workerKey{}).(int)))
			return nil
		},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /generate", g.generate)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g.srv = &http.Server{Handler: mux}
	g.url = "http://" + ln.Addr().String()
	go func() { _ = g.srv.Serve(ln) }()
	return g, nil
}

// generate routes one /generate: the body decoded for its prompt, the
// rule's choice, the request forwarded there and counted in the worker's
// load until its answer is passed on.
func (g *cacheAwareGateway) generate(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxGatewayBody))
	if err != nil {
		http.Error(w, "read the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var req struct {
		InputIDs []int64 `json:"input_ids"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "decode the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	i := g.rule.pick(req.InputIDs)
	defer g.rule.done(i)
	r = r.WithContext(context.WithValue(r.Context(), workerKey{}, i))
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	g.proxy.ServeHTTP(w, r)
}

// close stops the gateway.
func (g *cacheAwareGateway) close() error {
	if err := g.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

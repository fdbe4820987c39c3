package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-chi/chi/v5"

	"github.com/policyrouter/policyrouter"
	"github.com/policyrouter/policyrouter/auth"
	"github.com/policyrouter/policyrouter/metrics"
	"github.com/policyrouter/policyrouter/registry"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
	"github.com/policyrouter/policyrouter/updates"
)

// The contract, openapi.yaml, loaded once for every test of the package.
var (
	specOnce   sync.Once
	specDoc    *openapi3.T
	specRouter routers.Router
	specErr    error
)

func loadSpec() (*openapi3.T, routers.Router, error) {
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(policyrouter.OpenAPI)
		if err != nil {
			specErr = err
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			specErr = err
			return
		}
		// Match paths whatever host the test request names.
		doc.Servers = nil
		r, err := gorillamux.NewRouter(doc)
		if err != nil {
			specErr = err
			return
		}
		specDoc, specRouter = doc, r
	})
	return specDoc, specRouter, specErr
}

// checkSpec fails the test unless openapi.yaml documents the response to
// req: its status (an undocumented one fails; the spec has no default
// responses), its content type and body, and the headers the spec
// documents (required ones must be there). A status documented without
// content must come with an empty body. A 404 or 405 for a path or method
// the spec does not have must be the error envelope. The request body is
// not checked: tests send bad bodies on purpose.
func checkSpec(tb testing.TB, req *http.Request, status int, header http.Header, body []byte) {
	tb.Helper()
	_, router, err := loadSpec()
	if err != nil {
		tb.Errorf("openapi.yaml: %v", err)
		return
	}
	where := req.Method + " " + req.URL.Path
	r := req.Clone(context.Background())
	r.Body = http.NoBody
	head := r.Method == http.MethodHead
	if head {
		// HEAD is GET without a body (RFC 9110 §9.3.2).
		if len(body) > 0 {
			tb.Errorf("%s -> %d: HEAD answered with a body", where, status)
		}
		r.Method = http.MethodGet
	}
	route, params, err := router.FindRoute(r)
	if p := r.URL.Path; errors.Is(err, routers.ErrPathNotFound) && status != http.StatusNotFound &&
		len(p) > 1 && strings.HasSuffix(p, "/") {
		// A chi sub-router serves "/policies/" as "/policies"; the spec
		// names the path without the trailing slash.
		u := *r.URL
		u.Path, u.RawPath = strings.TrimSuffix(p, "/"), ""
		r.URL = &u
		route, params, err = router.FindRoute(r)
	}
	switch {
	case err == nil:
	case errors.Is(err, routers.ErrPathNotFound) && status == http.StatusNotFound,
		errors.Is(err, routers.ErrMethodNotAllowed) && status == http.StatusMethodNotAllowed:
		// The spec's top-level description: a path or method the API
		// does not have answers 404 or 405 in the error envelope.
		checkEnvelope(tb, where, status, header, body)
		return
	default:
		tb.Errorf("%s -> %d: route not in openapi.yaml: %v", where, status, err)
		return
	}
	ref := route.Operation.Responses.Status(status)
	if ref == nil || ref.Value == nil {
		tb.Errorf("%s -> %d: status not documented in openapi.yaml (body %s)", where, status, clip(body))
		return
	}
	if len(ref.Value.Content) == 0 && len(body) > 0 {
		tb.Errorf("%s -> %d: openapi.yaml documents no body, got %s", where, status, clip(body))
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request:    r,
			PathParams: params,
			Route:      route,
		},
		Status: status,
		Header: header,
		Body:   io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			ExcludeResponseBody:   head,
			MultiError:            true,
		},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		tb.Errorf("%s -> %d: response does not match openapi.yaml: %v\nbody: %s", where, status, err, clip(body))
	}
}

// checkEnvelope fails the test unless body is the spec's ErrorResponse,
// sent as application/json.
func checkEnvelope(tb testing.TB, where string, status int, header http.Header, body []byte) {
	tb.Helper()
	doc, _, _ := loadSpec()
	if mt, _, err := mime.ParseMediaType(header.Get("Content-Type")); err != nil || mt != "application/json" {
		tb.Errorf("%s -> %d: Content-Type %q, want application/json", where, status, header.Get("Content-Type"))
		return
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		tb.Errorf("%s -> %d: body is not JSON: %v\nbody: %s", where, status, err, clip(body))
		return
	}
	envelope := doc.Components.Schemas["ErrorResponse"].Value
	if err := envelope.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()); err != nil {
		tb.Errorf("%s -> %d: body is not the error envelope: %v\nbody: %s", where, status, err, clip(body))
	}
}

func clip(b []byte) string {
	const n = 600
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

func TestOpenAPISpecValid(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(policyrouter.OpenAPI)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi.yaml is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	// Validate also checks every example against its schema.
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
}

func TestSpecCheckSpec(t *testing.T) {
	jsonCT := http.Header{"Content-Type": {"application/json"}}
	envelope := `{"error":{"code":"no_idle_policy","message":"no idle policy within 0s","request_id":"r1"}}`
	type response struct {
		name   string
		req    *http.Request
		status int
		header http.Header
		body   string
	}
	ok := []response{
		{"health", mustRequest(http.MethodGet, "/healthz"), http.StatusOK, jsonCT, `{"status":"ok"}` + "\n"},
		{"trailing slash", mustRequest(http.MethodGet, "/policies/"), http.StatusOK, jsonCT, `{"policies":[]}`},
		{"503 with Retry-After", mustRequest(http.MethodPost, "/select"), http.StatusServiceUnavailable,
			http.Header{"Content-Type": {"application/json"}, "Retry-After": {"1"}}, envelope},
		{"204 without body", mustRequest(http.MethodDelete, "/policies/p1"), http.StatusNoContent, http.Header{}, ""},
		{"unknown path", mustRequest(http.MethodGet, "/nowhere"), http.StatusNotFound, jsonCT,
			`{"error":{"code":"not_found","message":"no route for GET /nowhere","request_id":"r1"}}`},
		{"unknown method", mustRequest(http.MethodPatch, "/policies"), http.StatusMethodNotAllowed, jsonCT,
			`{"error":{"code":"method_not_allowed","message":"method PATCH not allowed here","request_id":"r1"}}`},
	}
	for _, c := range ok {
		ft := &fakeTB{TB: t}
		checkSpec(ft, c.req, c.status, c.header, []byte(c.body))
		if ft.failed {
			t.Errorf("%s: checkSpec refused a response the spec describes: %s", c.name, ft.msg)
		}
	}

	healthz := mustRequest(http.MethodGet, "/healthz")
	bad := []response{
		{"undocumented status", healthz, http.StatusTeapot, jsonCT, `{"status":"ok"}`},
		{"wrong body", healthz, http.StatusOK, jsonCT, `{"status":7}`},
		{"unknown field", healthz, http.StatusOK, jsonCT, `{"status":"ok","x":1}`},
		{"wrong content type", healthz, http.StatusOK, http.Header{"Content-Type": {"text/plain"}}, `{"status":"ok"}`},
		{"no content type", healthz, http.StatusOK, http.Header{}, `{"status":"ok"}`},
		{"unknown route answered 200", mustRequest(http.MethodGet, "/nowhere"), http.StatusOK, jsonCT, `{}`},
		{"404 without envelope", mustRequest(http.MethodGet, "/nowhere"), http.StatusNotFound, jsonCT, `{"status":"ok"}`},
		{"503 without Retry-After", mustRequest(http.MethodPost, "/select"), http.StatusServiceUnavailable, jsonCT, envelope},
		{"204 with body", mustRequest(http.MethodDelete, "/policies/p1"), http.StatusNoContent, jsonCT, `{}`},
		{"error without request_id", mustRequest(http.MethodPost, "/assign"), http.StatusUnprocessableEntity, jsonCT,
			`{"error":{"code":"validation_failed","message":"m"}}`},
	}
	for _, c := range bad {
		ft := &fakeTB{TB: t}
		checkSpec(ft, c.req, c.status, c.header, []byte(c.body))
		if !ft.failed {
			t.Errorf("%s: checkSpec passed a response the spec does not describe", c.name)
		}
	}
}

// newSpecServer is a Server with every optional route configured.
func newSpecServer(tb testing.TB) *Server {
	tb.Helper()
	st := routing.New(routing.Options{})
	mem := store.NewMemory()
	reg, err := registry.Open(context.Background(), mem, st)
	if err != nil {
		tb.Fatal(err)
	}
	ups, err := updates.New(updates.Config{Registry: reg, State: st, Store: mem}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return New(Config{
		Registry: reg,
		State:    st,
		Updates:  ups,
		Metrics:  metrics.New(st),
		OpenAPI:  policyrouter.OpenAPI,
		Logger:   slog.New(slog.DiscardHandler),
	})
}

// TestSpecCoversRoutes compares the routes the router serves with the
// operations openapi.yaml describes: each must have the other.
func TestSpecCoversRoutes(t *testing.T) {
	doc, _, err := loadSpec()
	if err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	h := newSpecServer(t).Handler()
	routes, ok := h.(chi.Routes)
	if !ok {
		t.Fatalf("Handler() is a %T, not chi.Routes: cannot list its routes", h)
	}
	served := map[string]bool{}
	err = chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served[method+" "+specPath(route)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	var undocumented, unserved []string
	for r := range served {
		if path, ok := strings.CutPrefix(r, http.MethodHead+" "); ok && documented[http.MethodGet+" "+path] {
			continue // HEAD is GET without a body
		}
		if !documented[r] {
			undocumented = append(undocumented, r)
		}
	}
	for r := range documented {
		if !served[r] {
			unserved = append(unserved, r)
		}
	}
	slices.Sort(undocumented)
	slices.Sort(unserved)
	if len(undocumented) > 0 {
		t.Errorf("routes served but not in openapi.yaml:\n  %s", strings.Join(undocumented, "\n  "))
	}
	if len(unserved) > 0 {
		t.Errorf("operations in openapi.yaml the router does not serve:\n  %s", strings.Join(unserved, "\n  "))
	}
}

// specPath writes a chi route pattern as an OpenAPI path: no trailing
// slash (chi's "/policies/" for a sub-router's "/"), and "{id}" for a
// parameter with a regexp, "{id:[0-9]+}".
func specPath(route string) string {
	if len(route) > 1 {
		route = strings.TrimSuffix(route, "/")
	}
	// A catch-all (/fleet/engine/*) is the spec's {path}.
	if rest, ok := strings.CutSuffix(route, "/*"); ok {
		route = rest + "/{path}"
	}
	var b strings.Builder
	for {
		open := strings.IndexByte(route, '{')
		if open < 0 {
			break
		}
		end := strings.IndexByte(route[open:], '}')
		if end < 0 {
			break
		}
		name, _, _ := strings.Cut(route[open+1:open+end], ":")
		b.WriteString(route[:open] + "{" + name + "}")
		route = route[open+end+1:]
	}
	b.WriteString(route)
	return b.String()
}

// TestSpecConventions holds every operation to the API's rules: one scope
// of the three, 401 and 403 where a token is needed, and the decoding
// errors where there is a JSON body.
func TestSpecConventions(t *testing.T) {
	doc, _, err := loadSpec()
	if err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	open := map[string]bool{
		"GET /healthz": true, "GET /readyz": true,
		"GET /": true, "GET /dashboard.js": true, "GET /charts.js": true, "GET /dashboard.css": true,
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			name := method + " " + path
			sec := doc.Security
			if op.Security != nil {
				sec = *op.Security
			}
			if open[name] {
				if len(sec) != 0 {
					t.Errorf("%s: needs no token, want security: []", name)
				}
				continue
			}
			if len(sec) != 1 || len(sec[0]["bearerAuth"]) != 1 || !slices.Contains([]string{"admin", "route", "read"}, sec[0]["bearerAuth"][0]) {
				t.Errorf("%s: security %v, want bearerAuth with one of admin, route, read", name, sec)
			}
			want := []int{http.StatusUnauthorized, http.StatusForbidden}
			if op.RequestBody != nil {
				want = append(want, http.StatusBadRequest, http.StatusRequestEntityTooLarge,
					http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity)
			}
			for _, status := range want {
				if op.Responses.Status(status) == nil {
					t.Errorf("%s: no %d response", name, status)
				}
			}
			if op.Responses.Default() != nil {
				t.Errorf("%s: a default response would document every status", name)
			}
		}
	}
}

// TestSpecServedDocuments checks the answers that are not JSON: the
// contract, the metrics and the dashboard, with its revalidation.
func TestSpecServedDocuments(t *testing.T) {
	h := newSpecServer(t).Handler()
	serve := func(req *http.Request) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkSpec(t, req, rec.Code, rec.Header(), rec.Body.Bytes())
		return rec
	}
	routes, _ := h.(chi.Routes)
	for _, path := range []string{"/openapi.yaml", "/metrics", "/", "/dashboard.js", "/dashboard.css"} {
		if routes != nil && !routes.Match(chi.NewRouteContext(), http.MethodGet, path) {
			t.Logf("GET %s is not routed yet; TestSpecCoversRoutes reports it", path)
			continue
		}
		rec := serve(httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("GET %s = %d, want 200", path, rec.Code)
			continue
		}
		if etag := rec.Header().Get("ETag"); etag != "" {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.Header.Set("If-None-Match", etag)
			if rec := serve(req); rec.Code != http.StatusNotModified {
				t.Errorf("GET %s with If-None-Match = %d, want 304", path, rec.Code)
			}
		}
	}
}

// TestSpecAuthErrors checks the answers of the auth layer: a missing
// token, a token without the route's scope, and the routes open to all.
func TestSpecAuthErrors(t *testing.T) {
	cfg := auth.Config{Secret: bytes.Repeat([]byte("k"), 64)}
	v, err := auth.NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := newSpecServer(t)
	s.Auth = v
	h := s.Handler()
	token := func(scope string) string {
		tok, err := auth.Mint(cfg, "spec-test", []string{scope}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok
	}
	for _, c := range []struct {
		method, path, authz string
		want                int
	}{
		{http.MethodGet, "/stats", "", http.StatusUnauthorized},
		{http.MethodGet, "/stats", "Bearer not-a-jwt", http.StatusUnauthorized},
		{http.MethodGet, "/stats", token(auth.ScopeRoute), http.StatusForbidden},
		{http.MethodGet, "/stats", token(auth.ScopeRead), http.StatusOK},
		{http.MethodPost, "/assign", token(auth.ScopeRead), http.StatusForbidden},
		{http.MethodDelete, "/policies/p1", "", http.StatusUnauthorized},
		{http.MethodGet, "/metrics", "", http.StatusUnauthorized},
		{http.MethodGet, "/healthz", "", http.StatusOK},
		// SMG's worker API takes the scopes of the routes it maps onto.
		{http.MethodPost, "/workers", token(auth.ScopeRead), http.StatusForbidden},
		{http.MethodGet, "/workers", token(auth.ScopeRead), http.StatusOK},
		{http.MethodGet, "/workers/w1", token(auth.ScopeRoute), http.StatusForbidden},
		{http.MethodDelete, "/workers/w1", token(auth.ScopeAdmin), http.StatusNotFound},
		{http.MethodPost, "/add_worker?url=http://10.0.0.5:30000", token(auth.ScopeRoute), http.StatusForbidden},
		{http.MethodPost, "/remove_worker?url=http://10.0.0.5:30000", "", http.StatusUnauthorized},
		{http.MethodGet, "/list_workers", token(auth.ScopeRead), http.StatusOK},
		{http.MethodPost, "/finish_session?session_id=s1", token(auth.ScopeRead), http.StatusForbidden},
		{http.MethodPost, "/finish_session?session_id=s1", token(auth.ScopeRoute), http.StatusOK},
		// No token needed: not ready (no policies), but not 401.
		{http.MethodGet, "/readyz", "", http.StatusServiceUnavailable},
	} {
		req := httptest.NewRequest(c.method, c.path, nil)
		if c.authz != "" {
			req.Header.Set("Authorization", c.authz)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s %s = %d, want %d", c.method, c.path, rec.Code, c.want)
		}
		checkSpec(t, req, rec.Code, rec.Header(), rec.Body.Bytes())
	}
}

func mustRequest(method, path string) *http.Request {
	return httptest.NewRequest(method, "http://router.test"+path, nil)
}

// fakeTB records failures instead of failing the test.
type fakeTB struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
}

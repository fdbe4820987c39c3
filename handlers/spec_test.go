package handlers

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/policyrouter/policyrouter"
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
// req: its status (explicitly, not through a default or range), its
// content type and body, and its documented headers. A status documented
// without content must come with an empty body. The request body is not
// checked: tests send bad bodies on purpose.
func checkSpec(tb testing.TB, req *http.Request, status int, header http.Header, body []byte) {
	tb.Helper()
	_, router, err := loadSpec()
	if err != nil {
		tb.Errorf("openapi.yaml: %v", err)
		return
	}
	// chi serves "/policies/" and "/policies" alike; the spec names the
	// path without the trailing slash.
	r := req.Clone(context.Background())
	if p := r.URL.Path; len(p) > 1 && strings.HasSuffix(p, "/") {
		u := *r.URL
		u.Path = strings.TrimSuffix(p, "/")
		u.RawPath = ""
		r.URL = &u
	}
	r.Body = http.NoBody
	where := req.Method + " " + req.URL.Path
	route, params, err := router.FindRoute(r)
	if err != nil {
		tb.Errorf("%s -> %d: route not in openapi.yaml: %v", where, status, err)
		return
	}
	ref := route.Operation.Responses.Status(status)
	if ref == nil || ref.Value == nil {
		tb.Errorf("%s -> %d: status not documented in openapi.yaml (body %s)", where, status, clip(body))
		return
	}
	if len(ref.Value.Content) == 0 && len(bytes.TrimSpace(body)) > 0 {
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
			MultiError:            true,
		},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		tb.Errorf("%s -> %d: response does not match openapi.yaml: %v\nbody: %s", where, status, err, clip(body))
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
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
}

func TestSpecCheckSpec(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "http://router.test/healthz", nil)
	h := http.Header{"Content-Type": {"application/json"}}
	// The real answer passes.
	checkSpec(t, req, http.StatusOK, h, []byte(`{"status":"ok"}`+"\n"))

	// What the spec does not describe fails.
	for _, c := range []struct {
		name   string
		req    *http.Request
		status int
		header http.Header
		body   string
	}{
		{"undocumented status", req, http.StatusTeapot, h, `{"status":"ok"}`},
		{"wrong body", req, http.StatusOK, h, `{"status":7}`},
		{"unknown field", req, http.StatusOK, h, `{"status":"ok","x":1}`},
		{"wrong content type", req, http.StatusOK, http.Header{"Content-Type": {"text/plain"}}, `{"status":"ok"}`},
		{"unknown route", mustRequest(http.MethodGet, "/nowhere"), http.StatusOK, h, `{}`},
	} {
		ft := &fakeTB{TB: t}
		checkSpec(ft, c.req, c.status, c.header, []byte(c.body))
		if !ft.failed {
			t.Errorf("%s: checkSpec passed a response the spec does not describe", c.name)
		}
	}
}

func mustRequest(method, path string) *http.Request {
	req, err := http.NewRequest(method, "http://router.test"+path, nil)
	if err != nil {
		panic(err)
	}
	return req
}

// fakeTB records failures instead of failing the test.
type fakeTB struct {
	testing.TB
	failed bool
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Errorf(string, ...any) { f.failed = true }

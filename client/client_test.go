package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/client"
	"github.com/policyrouter/policyrouter/routing"
)

// fakeRouter answers each path with a canned status and body, and records
// the last request's method, path, body and authorization header.
type fakeRouter struct {
	answers map[string]struct {
		code int
		body string
	}
	method, path, body, auth string
}

func (f *fakeRouter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.method, f.path, f.body, f.auth = r.Method, r.URL.Path, string(b), r.Header.Get("Authorization")
	a, ok := f.answers[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.WriteHeader(a.code)
	_, _ = io.WriteString(w, a.body)
}

func newFake(tb testing.TB) (*fakeRouter, *client.Client) {
	tb.Helper()
	f := &fakeRouter{answers: map[string]struct {
		code int
		body string
	}{
		"/select":       {200, `{"index": 3, "id": "p3", "url": "http://p/3", "node_id": "node-a", "lease_id": "L"}`},
		"/release":      {503, `{"error": {"code": "not_leader", "message": "a follower", "leader": "http://r2"}}`},
		"/registration": {200, `{"policies": [], "topology": {}}`},
		"/assign":       {200, `{"assignments": [1, 1], "policies": {"1": {"id": "p1", "url": "http://p/1", "node_id": "node-a"}}}`},
		"/complete":     {200, `{"index": 1, "load": 3}`},
	}}
	srv := httptest.NewServer(f)
	tb.Cleanup(srv.Close)
	return f, client.New(srv.URL+"/", srv.Client())
}

func TestSelectSendsAndDecodes(t *testing.T) {
	f, c := newFake(t)
	c.Token = "tok"
	got, err := c.Select(context.Background(), api.SelectRequest{EnvID: "env-1", SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (api.SelectResponse{Index: 3, ID: "p3", URL: "http://p/3", NodeID: "node-a", LeaseID: "L"}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if f.method != http.MethodPost || f.path != "/select" || f.auth != "Bearer tok" {
		t.Errorf("request %s %s auth %q; want POST /select with the bearer token", f.method, f.path, f.auth)
	}
	var sent api.SelectRequest
	if err := json.Unmarshal([]byte(f.body), &sent); err != nil || sent.EnvID != "env-1" || sent.SessionID != "s" {
		t.Errorf("body %s (%v); want the request", f.body, err)
	}
}

func TestAssignSendsAndDecodes(t *testing.T) {
	f, c := newFake(t)
	got, err := c.Assign(context.Background(), api.AssignRequest{NumTasks: new(2), EnvIDs: []string{"env-0", "env-1"}})
	if err != nil {
		t.Fatal(err)
	}
	want := api.AssignResponse{Assignments: []int{1, 1}, Policies: map[string]api.PolicyRef{"1": {ID: "p1", URL: "http://p/1", NodeID: "node-a"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if f.method != http.MethodPost || f.path != "/assign" {
		t.Errorf("request %s %s; want POST /assign", f.method, f.path)
	}
	var sent api.AssignRequest
	if err := json.Unmarshal([]byte(f.body), &sent); err != nil || sent.NumTasks == nil || *sent.NumTasks != 2 || len(sent.EnvIDs) != 2 {
		t.Errorf("body %s (%v); want the request", f.body, err)
	}
}

func TestCompleteSendsAndDecodes(t *testing.T) {
	f, c := newFake(t)
	got, err := c.Complete(context.Background(), api.CompleteRequest{Index: new(1), Count: new(2)})
	if err != nil {
		t.Fatal(err)
	}
	if want := (api.CompleteResponse{Index: 1, Load: 3}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if f.method != http.MethodPost || f.path != "/complete" {
		t.Errorf("request %s %s; want POST /complete", f.method, f.path)
	}
	var sent api.CompleteRequest
	if err := json.Unmarshal([]byte(f.body), &sent); err != nil || sent.Index == nil || *sent.Index != 1 || sent.Count == nil || *sent.Count != 2 {
		t.Errorf("body %s (%v); want the request", f.body, err)
	}
}

func TestErrors(t *testing.T) {
	f, c := newFake(t)
	tests := []struct {
		name     string
		call     func() error
		wantCode string
		wantHTTP int
		wantMsg  string
	}{
		{"envelope", func() error { _, err := c.Release(context.Background(), "L"); return err }, api.CodeNotLeader, 503, "a follower"},
		{"no envelope", func() error { _, err := c.Stats(context.Background()); return err }, "", 404, "404 page not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e *client.Error
			if err := tt.call(); !errors.As(err, &e) {
				t.Fatalf("error %v, want a *client.Error", err)
			}
			if e.Code != tt.wantCode || e.StatusCode != tt.wantHTTP || e.Message != tt.wantMsg {
				t.Errorf("got code %q status %d message %q; want %q %d %q", e.Code, e.StatusCode, e.Message, tt.wantCode, tt.wantHTTP, tt.wantMsg)
			}
		})
	}
	_, err := c.Release(context.Background(), "L")
	var e *client.Error
	if errors.As(err, &e); e.Leader != "http://r2" {
		t.Errorf("leader %q, want the envelope's", e.Leader)
	}
	if f.path != "/release" {
		t.Errorf("path %q", f.path)
	}
}

func TestPutRegistrationSendsTheTopology(t *testing.T) {
	f, c := newFake(t)
	idx := 0
	_, err := c.PutRegistration(context.Background(), []api.PolicyRequest{{URL: "http://p/0", Index: &idx}},
		routing.Topology{"node-a": {"env": {0}}})
	if err != nil {
		t.Fatal(err)
	}
	var sent struct {
		Policies []api.PolicyRequest `json:"policies"`
		Topology json.RawMessage     `json:"topology"`
	}
	if err := json.Unmarshal([]byte(f.body), &sent); err != nil {
		t.Fatal(err)
	}
	if f.method != http.MethodPut || len(sent.Policies) != 1 || string(sent.Topology) != `{"node-a":{"env":{"ids":[0]}}}` {
		t.Errorf("%s %s %s; want the policies and the topology", f.method, f.path, f.body)
	}
}

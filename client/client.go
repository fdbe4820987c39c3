// Package client is a small typed Go client of the router's HTTP API: each
// method sends one request and returns the wire types of package api, or an
// *Error that carries the error envelope's code.
//
// It holds no state beyond the base URL, the token and the *http.Client it
// is given, so one Client may be used from many goroutines at once.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/routing"
)

// maxErrorBody bounds how much of a non-2xx answer is read for the error.
const maxErrorBody = 64 << 10

// Client calls one router (or any JSON HTTP server, through Do).
type Client struct {
	base string
	hc   *http.Client
	// Token, when set, is sent as a bearer token with every request.
	Token string
}

// New returns a client of the router at baseURL ("http://127.0.0.1:8080";
// a trailing slash is dropped), sending its requests through hc
// (http.DefaultClient when nil).
func New(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: hc}
}

// BaseURL returns the base URL requests are sent to.
func (c *Client) BaseURL() string { return c.base }

// Error is an answer other than 2xx. For the router's answers it holds the
// error envelope (Code, Message, Fields...); for others, Message holds the
// start of the body.
type Error struct {
	Method     string
	URL        string
	StatusCode int
	api.ErrorBody
}

func (e *Error) Error() string {
	msg := e.Message
	if e.Code != "" {
		msg = e.Code + ": " + msg
	}
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.URL, e.StatusCode, msg)
}

// Do sends body, JSON already encoded (nil for none), with method to the
// base URL + path. A 2xx answer is decoded into out when out is non-nil;
// any other is an *Error. The body is read to its end either way, so that
// the connection is reused.
func (c *Client) Do(ctx context.Context, method, path string, body []byte, out any) error {
	u := c.base + path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		_, _ = io.Copy(io.Discard, resp.Body)
		e := &Error{Method: method, URL: u, StatusCode: resp.StatusCode}
		var env api.ErrorResponse
		if json.Unmarshal(msg, &env) == nil && env.Error.Code != "" {
			e.ErrorBody = env.Error
		} else {
			e.Message = string(bytes.TrimSpace(msg[:min(len(msg), 512)]))
		}
		return e
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("%s %s: decode the answer: %w", method, u, err)
		}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// call encodes in as JSON (nil sends no body) and calls Do.
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	return c.Do(ctx, method, path, body, out)
}

// Select is POST /select.
func (c *Client) Select(ctx context.Context, req api.SelectRequest) (api.SelectResponse, error) {
	var out api.SelectResponse
	return out, c.call(ctx, http.MethodPost, "/select", req, &out)
}

// Release is POST /release of a lease.
func (c *Client) Release(ctx context.Context, leaseID string) (api.ReleaseResponse, error) {
	var out api.ReleaseResponse
	return out, c.call(ctx, http.MethodPost, "/release", api.ReleaseRequest{LeaseID: leaseID}, &out)
}

// Assign is POST /assign: a batch of tasks (async mode).
func (c *Client) Assign(ctx context.Context, req api.AssignRequest) (api.AssignResponse, error) {
	var out api.AssignResponse
	return out, c.call(ctx, http.MethodPost, "/assign", req, &out)
}

// Complete is POST /complete: finished tasks, subtracted from a policy's
// tracked load.
func (c *Client) Complete(ctx context.Context, req api.CompleteRequest) (api.CompleteResponse, error) {
	var out api.CompleteResponse
	return out, c.call(ctx, http.MethodPost, "/complete", req, &out)
}

// PutRegistration is PUT /registration: the policies and the topology in
// one atomic call.
func (c *Client) PutRegistration(ctx context.Context, policies []api.PolicyRequest, topo routing.Topology) (api.Registration, error) {
	var out api.Registration
	t, err := json.Marshal(topo)
	if err != nil {
		return out, err
	}
	return out, c.call(ctx, http.MethodPut, "/registration", api.RegistrationRequest{Policies: policies, Topology: t}, &out)
}

// Policies is GET /policies.
func (c *Client) Policies(ctx context.Context) (api.PolicyList, error) {
	var out api.PolicyList
	return out, c.call(ctx, http.MethodGet, "/policies", nil, &out)
}

// Drain is POST /policies/{id}/drain.
func (c *Client) Drain(ctx context.Context, id string) (api.Policy, error) {
	var out api.Policy
	return out, c.call(ctx, http.MethodPost, "/policies/"+url.PathEscape(id)+"/drain", nil, &out)
}

// Resume is POST /policies/{id}/resume.
func (c *Client) Resume(ctx context.Context, id string) (api.Policy, error) {
	var out api.Policy
	return out, c.call(ctx, http.MethodPost, "/policies/"+url.PathEscape(id)+"/resume", nil, &out)
}

// Stats is GET /stats.
func (c *Client) Stats(ctx context.Context) (api.Stats, error) {
	var out api.Stats
	return out, c.call(ctx, http.MethodGet, "/stats", nil, &out)
}

// StartUpdate is POST /updates: a rolling weight update.
func (c *Client) StartUpdate(ctx context.Context, req api.UpdateRequest) (api.Update, error) {
	var out api.Update
	return out, c.call(ctx, http.MethodPost, "/updates", req, &out)
}

// Update is GET /updates/{id}.
func (c *Client) Update(ctx context.Context, id string) (api.Update, error) {
	var out api.Update
	return out, c.call(ctx, http.MethodGet, "/updates/"+url.PathEscape(id), nil, &out)
}

// Ready is GET /readyz: nil once the router routes, an *Error (503
// not_ready, or not_leader on a follower) before.
func (c *Client) Ready(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, "/readyz", nil, nil)
}

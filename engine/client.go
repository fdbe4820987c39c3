package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/policyrouter/policyrouter/routing"
)

// Body limits of the engines' answers: a JSON document, and a Prometheus
// exposition (vLLM's /metrics carries every histogram of every engine
// core: hundreds of kilobytes).
const (
	MaxJSONBytes    = 1 << 20
	MaxMetricsBytes = 16 << 20
)

// maxDrain is how much of an unread body is drained so that the
// connection can be reused; a longer body costs the connection instead.
const maxDrain = 64 << 10

// userAgent is sent with every request of this package.
const userAgent = "policyrouter"

// Client sends the engines' requests: the probes, the update steps and the
// fleet verbs' calls. It adds the policy's key, bounds what it reads, and
// keeps a URL's password out of every error. Safe for concurrent use.
type Client struct {
	// HTTP sends the requests; it should not follow redirects.
	HTTP *http.Client
}

// Server is one policy server as the engines see it: its registration,
// its parsed URL, and what the probes learnt about it. The poller keeps
// one per registered policy and replaces it when the registration
// changes.
type Server struct {
	// Policy is the registration the Server was made for; its
	// SleepMarked is as it was then (SetSleepMarked changes what the
	// probes read, not this copy).
	Policy routing.Policy
	// Shown is the URL without its password, for logs and errors.
	Shown string
	base  *url.URL
	// idleURL and errURL are the native GET /idle, with and without the
	// password (the native probe is the hot path: built once).
	idleURL, errURL string
	// idleReq is the native probe's request, headers and all: each probe
	// sends a copy bound to its context (no URL to parse, no headers to
	// build on the hot path).
	idleReq *http.Request
	// What the engine learnt of the server: SGLang without /v1/loads (use
	// the older /get_load) or without /model_info (the older
	// /get_model_info); vLLM without /is_paused, /weight_info or
	// /is_sleeping (not in dev mode, or older).
	legacyLoad, legacyModelInfo        atomic.Bool
	noPauseInfo, noWeightInfo, noSleep atomic.Bool
	// sleepMarked is the policy's asleep record (Policy.SleepMarked), as
	// last registered: SetSleepMarked changes it without a new Server.
	sleepMarked atomic.Bool
	// pauseMarked is the policy's paused record (Policy.PauseMarked), as
	// last registered: SetPauseMarked changes it without a new Server.
	pauseMarked atomic.Bool
	// streamForm is how the server streams a native /generate, as its
	// server info said (SGLang): one of the streamForm constants. The
	// probes write it; IncrementalStreaming reads it from anywhere.
	streamForm atomic.Int32
	// infoTries counts the probes that asked for the server info without
	// an answer; infoRead is set once one answered (or the tries ran
	// out): the info is asked for again only after a failed probe (the
	// server may have restarted with other flags). legacyServerInfo: an
	// SGLang without /server_info (use /get_server_info). Written by the
	// probes only.
	infoTries                  atomic.Int32
	infoRead, legacyServerInfo atomic.Bool
	// kvTokens is the KV cache's size in tokens as the server info said
	// (SGLang), 0 when it did not.
	kvTokens atomic.Int64
	// probes counts the probes, for the occasional GET /v1/models.
	probes atomic.Uint64
}

// NewServer parses p's URL. The error keeps the URL's password out.
func NewServer(p routing.Policy) (*Server, error) {
	s := &Server{Policy: p, Shown: "(unparsable)"}
	s.sleepMarked.Store(p.SleepMarked)
	s.pauseMarked.Store(p.PauseMarked)
	u, err := url.Parse(p.URL)
	if err != nil {
		return s, fmt.Errorf("parse url: %w", RedactURLError(err))
	}
	s.Shown = u.Redacted()
	if u.Scheme != "http" && u.Scheme != "https" {
		return s, fmt.Errorf("url %q: scheme must be http or https", s.Shown)
	}
	s.base = u
	idle := u.JoinPath("idle")
	s.idleURL, s.errURL = idle.String(), idle.Redacted()
	s.idleReq, err = http.NewRequest(http.MethodGet, s.idleURL, nil)
	if err != nil {
		return s, fmt.Errorf("parse url: %w", RedactURLError(err))
	}
	s.idleReq.Header.Set("Accept", "application/json")
	s.idleReq.Header.Set("User-Agent", userAgent)
	if key := p.BearerFor(false); key != "" {
		s.idleReq.Header.Set("Authorization", "Bearer "+key)
	}
	return s, nil
}

// Forms of a server's streamed native /generate chunks (Server.streamForm).
const (
	streamUnknown     = iota
	streamCumulative  // each chunk holds every token so far
	streamIncremental // each chunk holds its new tokens only
)

// IncrementalStreaming reports how the server streams a native /generate,
// as its probes learnt it: incremental (each chunk holds its new tokens
// only) or cumulative (every token so far), and known false when no probe
// has learnt it (not probed yet, an engine or release that does not say).
// Safe for concurrent use with Probe.
func (s *Server) IncrementalStreaming() (incremental, known bool) {
	switch s.streamForm.Load() {
	case streamCumulative:
		return false, true
	case streamIncremental:
		return true, true
	}
	return false, false
}

// SetSleepMarked records a change of the policy's asleep record
// (Policy.SleepMarked) for the probes that follow, and for one in flight
// that has not yet had its answer: what the probes learnt of the server
// is kept. Safe for concurrent use with Probe.
func (s *Server) SetSleepMarked(marked bool) { s.sleepMarked.Store(marked) }

// SetPauseMarked records a change of the policy's paused record
// (Policy.PauseMarked), as SetSleepMarked does the asleep one.
func (s *Server) SetPauseMarked(marked bool) { s.pauseMarked.Store(marked) }

// Endpoint returns the URL of path (which may carry a query) on the
// server, and the same without its password, for errors.
func (s *Server) Endpoint(path string) (full, shown string) {
	rel, query, _ := strings.Cut(path, "?")
	u := s.base.JoinPath(rel)
	u.RawQuery = query
	return u.String(), u.Redacted()
}

// StatusError is a non-2xx answer of an engine endpoint.
type StatusError struct {
	Endpoint string // method and URL without password
	Status   int
}

func (e *StatusError) Error() string { return fmt.Sprintf("%s: status %d", e.Endpoint, e.Status) }

// IsStatus reports whether err is an answer with the given status.
func IsStatus(err error, status int) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == status
}

// DecodeError is a 2xx answer that could not be used: not JSON, too
// long, or not the shape of its engine's contract.
type DecodeError struct{ Err error }

func (e *DecodeError) Error() string { return e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// RedactURLError keeps the cause of a *url.Error, whose URL (password
// included) the caller names otherwise.
func RedactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}

// get sends GET path (which may carry a query) to s with its API key,
// bounded by ctx, and returns the body, at most limit bytes. Errors name
// the endpoint; a non-2xx answer is a *StatusError.
func (c *Client) get(ctx context.Context, s *Server, path string, limit int64) ([]byte, error) {
	full, shown := s.Endpoint(path)
	endpoint := "GET " + shown
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, full, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: build request: %w", endpoint, err)
	}
	req.Header.Set("User-Agent", userAgent)
	if key := s.Policy.BearerFor(false); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", endpoint, RedactURLError(err))
	}
	defer drain(resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &StatusError{Endpoint: endpoint, Status: resp.StatusCode}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: read body: %w", endpoint, err)
	}
	if int64(len(body)) > limit {
		return nil, &DecodeError{fmt.Errorf("%s: body exceeds %d bytes", endpoint, limit)}
	}
	return body, nil
}

// getJSON is get of a JSON document decoded into v.
func (c *Client) getJSON(ctx context.Context, s *Server, path string, v any) error {
	body, err := c.get(ctx, s, path, MaxJSONBytes)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return endpointError(s, path, fmt.Errorf("decode: %w", err))
	}
	return nil
}

// drain reads and closes a body so that its connection goes back to the
// pool.
func drain(b io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(b, maxDrain))
	_ = b.Close()
}

// endpointError names the endpoint whose answer could not be used: a
// *DecodeError.
func endpointError(s *Server, path string, err error) error {
	_, shown := s.Endpoint(path)
	return &DecodeError{fmt.Errorf("GET %s: %w", shown, err)}
}

// Reply is an engine's answer to a Call.
type Reply struct {
	Status int
	// Body is the answer's first MaxReplyBytes.
	Body []byte
}

// MaxReplyBytes is how much of a call's answer Send keeps.
const MaxReplyBytes = 64 << 10

// Send makes call to the server at baseURL, with key as a bearer token
// when not empty, bounded by ctx. A non-2xx answer is a Reply, not an
// error; an error is a transport failure, without the URL's password.
func (c *Client) Send(ctx context.Context, baseURL, key string, call Call) (Reply, error) {
	var body io.Reader
	if call.Body != nil {
		body = bytes.NewReader(call.Body)
	}
	req, err := http.NewRequestWithContext(ctx, call.Method, strings.TrimRight(baseURL, "/")+call.Path, body)
	if err != nil {
		return Reply{}, RedactURLError(err)
	}
	req.Header.Set("User-Agent", userAgent)
	if call.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return Reply{}, RedactURLError(err)
	}
	defer drain(resp.Body)
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxReplyBytes))
	if err != nil {
		return Reply{Status: resp.StatusCode}, fmt.Errorf("read answer: %w", err)
	}
	return Reply{Status: resp.StatusCode, Body: b}, nil
}

// ModelsEvery is how often a probe also asks GET /v1/models: on the first
// probe of a server, then every ModelsEvery probes (10 s at the default
// 100 ms interval). Models change only on a restart or a LoRA load, and
// the list is not worth a request per probe.
const ModelsEvery = 100

// openAIModels is the OpenAI list answer of GET /v1/models, served by
// SGLang (ModelList in python/sglang/srt/entrypoints/openai/protocol.py)
// and vLLM alike: {"object": "list", "data": [{"id", ...}]}.
type openAIModels struct {
	Data []struct {
		ID string `json:"id"`
	} `json:"data"`
}

// probeModels reads GET /v1/models into a when due. Its failure is not
// the probe's: the models last read stay.
func (c *Client) probeModels(ctx context.Context, s *Server, a *Answer) {
	if (s.probes.Add(1)-1)%ModelsEvery != 0 {
		return
	}
	var v openAIModels
	if c.getJSON(ctx, s, RouteModels, &v) != nil {
		return
	}
	ids := make([]string, 0, len(v.Data))
	for _, m := range v.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	a.Models, a.HasModels = ids, true
}

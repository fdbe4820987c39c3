package poller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/policyrouter/policyrouter/routing"
)

// engine speaks one kind of policy server's wire formats: how a probe
// learns its load, whether it is idle, and its weight version. One file
// per engine (engine_*.go), each quoting the upstream source of the
// formats it reads. Engines are stateless values; what they learn about
// one server (e.g. that it lacks an endpoint) lives on its member.
// probe is called from many goroutines at once, never twice at once for
// one member.
type engine interface {
	// probe asks m's server once. An error names the endpoint that failed
	// (its URL without a password) and why: a status, a transport error,
	// or an answer it could not read.
	probe(ctx context.Context, p *Poller, m *member) (answer, error)
	// UpdateSteps are the engine's steps of a rolling weight update.
	UpdateSteps
}

// Call is one HTTP request of a weight update to an engine: Method to the
// policy's URL plus Path (which may carry a query), with Body as JSON
// when it is not nil. The update manager sends it with the policy's admin
// key.
type Call struct {
	Method string
	Path   string
	Body   []byte
}

// Pause modes of POST /updates (pause_mode). PauseWait is the router's
// own: it drains the policy's leases first, then pauses the engine; the
// others are passed to the engine, which handles the requests in flight.
const (
	PauseWait    = "wait"
	PauseAbort   = "abort"    // the engine aborts the requests in flight
	PauseRetract = "retract"  // SGLang: back to the waiting queue, resumed after
	PauseInPlace = "in_place" // SGLang: kept in the running batch with their KV cache
	PauseKeep    = "keep"     // vLLM: frozen in the queue, resumed after
)

// PauseModes lists every pause mode, PauseWait (the default) first.
var PauseModes = []string{PauseWait, PauseAbort, PauseRetract, PauseInPlace, PauseKeep}

// UpdateSteps are the HTTP calls by which an engine takes new weights, in
// the order a rolling update makes them: pause, load the weights (or let
// the trainer do it: external mode), set the version, resume; the poller
// then confirms the version. A step the engine has not got answers false,
// and the update skips it. Methods are pure: they only build requests.
type UpdateSteps interface {
	// PauseModes lists the pause modes (of PauseModes) the engine takes.
	PauseModes() []string
	// Pause pauses generation in mode, one of PauseModes().
	Pause(mode string) (Call, bool)
	// LoadFromDisk loads the weights at modelPath and labels them version.
	LoadFromDisk(modelPath, version string) (Call, bool)
	// SetVersion sets the version string the engine reports, after the
	// trainer moved the weights itself.
	SetVersion(version string) (Call, bool)
	// Resume resumes generation after Pause.
	Resume() (Call, bool)
}

// Steps returns the update steps of the engine with the given
// registration name, and false for a name not in the table.
func Steps(name string) (UpdateSteps, bool) {
	e, ok := engines[name]
	return e, ok
}

// jsonCall builds a call with v marshalled as its body.
func jsonCall(method, path string, v any) Call {
	body, err := json.Marshal(v)
	if err != nil {
		panic("poller: marshal an engine call: " + err.Error()) // only plain structs are passed
	}
	return Call{Method: method, Path: path, Body: body}
}

// engines is the table of engines by registration name, the source of
// every list of their names (API validation, --default-engine, OpenAPI,
// which a test ties to this table).
var engines = map[string]engine{
	routing.EnginePolicyrouter: nativeEngine{},
	EngineSGLang:               sglangEngine{},
	EngineVLLM:                 vllmEngine{},
}

// Engine names beside routing.EnginePolicyrouter.
const (
	EngineSGLang = "sglang"
	EngineVLLM   = "vllm"
)

// EngineNames returns the registration names of the engines,
// routing.EnginePolicyrouter (the default) first, then sorted.
func EngineNames() []string {
	names := make([]string, 0, len(engines))
	for name := range engines {
		if name != routing.EnginePolicyrouter {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return append([]string{routing.EnginePolicyrouter}, names...)
}

// IsEngine reports whether name is the name of an engine.
func IsEngine(name string) bool {
	_, ok := engines[name]
	return ok
}

// engineOf returns the engine of p; a name not in the table (a stored
// registration from a newer router) gets the native one, whose failing
// probes then say what is wrong.
func engineOf(p routing.Policy) engine {
	if e, ok := engines[p.EngineName()]; ok {
		return e
	}
	return nativeEngine{}
}

// Body limits of the engines' answers: a JSON document, and a Prometheus
// exposition (vLLM's /metrics carries every histogram of every engine
// core: hundreds of kilobytes).
const (
	maxJSONBytes    = 1 << 20
	maxMetricsBytes = 16 << 20
)

// statusError is a non-2xx answer of an engine endpoint.
type statusError struct {
	endpoint string // method and URL without password
	status   int
}

func (e *statusError) Error() string { return fmt.Sprintf("%s: status %d", e.endpoint, e.status) }

// isStatus reports whether err is an answer with the given status.
func isStatus(err error, status int) bool {
	var se *statusError
	return errors.As(err, &se) && se.status == status
}

// get sends GET {m.url}{path} (path may carry a query) with m's API key,
// bounded by the poller's timeout through ctx, and returns the body, at
// most limit bytes. Errors name the endpoint; a non-2xx answer is a
// *statusError.
func (p *Poller) get(ctx context.Context, m *member, path string, limit int64) ([]byte, error) {
	full, shown := m.endpoint(path)
	endpoint := "GET " + shown
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, full, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: build request: %w", endpoint, err)
	}
	req.Header.Set("User-Agent", "policyrouter-poller")
	if key := m.pol.BearerFor(false); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", endpoint, redactURLError(err))
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
		_ = resp.Body.Close()
	}()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &statusError{endpoint: endpoint, status: resp.StatusCode}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: read body: %w", endpoint, err)
	}
	if int64(len(body)) > limit {
		return nil, &decodeError{fmt.Errorf("%s: body exceeds %d bytes", endpoint, limit)}
	}
	return body, nil
}

// redactURLError keeps the cause of a *url.Error, whose URL the caller
// has named already.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}

// ParseWeightVersion orders an engine's weight-version string: the
// string as a decimal integer when it is one ("42"), else the integer of
// its trailing digits ("step-42", "v0.43" -> 43), else 0 (SGLang's
// "default"). Surrounding spaces are ignored; a number beyond int64 is an
// error.
func ParseWeightVersion(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	digits := s[i:]
	if digits == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("weight version %q: %w", truncate([]byte(s), 64), err)
	}
	return v, nil
}

// versionAnswer fills a's version from an engine's version string.
func versionAnswer(a *answer, raw string) error {
	v, err := ParseWeightVersion(raw)
	if err != nil {
		return err
	}
	a.version, a.hasVersion, a.weightVersion = v, true, raw
	return nil
}

// idleBelow is an engine's load against the policy's capacity: idle while
// running + waiting is below it.
func idleBelow(a *answer, load int64, capacity int) {
	a.load, a.hasLoad = max(load, 0), true
	a.idle = a.load < int64(max(capacity, 1))
}

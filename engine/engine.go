// Package engine speaks the wire formats of the policy servers the router
// routes to: how a probe learns a server's load, version and state, the
// HTTP calls of a rolling weight update, the lifecycle calls of the fleet
// verbs (sleep, wake), and the routes each kind of server serves.
//
// One file per engine, each quoting the upstream source of the formats it
// speaks (its probe, update steps, lifecycle calls, routes and, when its
// server reports one, capacity); one table (table below) names them. Everything else asks this package by name: nothing outside it
// knows a path of an engine. A new engine is one file and one table row
// (plus its fake in fakepolicy).
package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/policyrouter/policyrouter/routing"
)

// Engine is one kind of policy server. Engines are stateless values; what
// they learn about one server (e.g. that it lacks an endpoint) lives on
// its *Server. Probe is called from many goroutines at once, never twice
// at once for one Server; the other methods are pure.
type Engine interface {
	// Probe asks the server once. An error names the endpoint that failed
	// (its URL without a password) and why: a *StatusError, a transport
	// error, or a *DecodeError for an answer it could not read.
	Probe(ctx context.Context, c *Client, s *Server) (Answer, error)
	// Routes are the proxied routes (request paths) the engine serves.
	Routes() []string
	UpdateSteps
	Lifecycle
}

// Answer is what one probe learnt: the routing state's Probe, whose
// answer fields (Idle, Load, Version, WeightVersion, Paused, Asleep,
// Models, KVTokens) an engine fills; the poller adds when it was sent,
// how long it took and whether it failed.
type Answer = routing.Probe

// Call is one HTTP request to an engine: Method to the policy's URL plus
// Path (which may carry a query), with Body as JSON when it is not nil.
// Update steps and lifecycle calls are sent with the policy's admin key.
type Call struct {
	Method string
	Path   string
	Body   []byte
	// Optional marks a call that older servers lack: their 404 answer
	// means "not here", and the step is skipped rather than failed.
	Optional bool
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

// Lifecycle are the calls of the fleet verbs POST /fleet/sleep and
// /fleet/wake. An engine without them answers false.
type Lifecycle interface {
	// Sleep releases the engine's accelerator memory; level is vLLM's
	// sleep level (1: offload the weights, 2: discard them), 0 the
	// engine's default.
	Sleep(level int) (Call, bool)
	// Wake takes the memory back; tags, when not empty, name the parts to
	// restore first (e.g. "weights", "kv_cache").
	Wake(tags []string) (Call, bool)
	// SleepReported says whether the probe reads the asleep state from
	// the server itself; when false, only the fleet verbs' record
	// (Policy.SleepMarked) says it.
	SleepReported() bool
}

// Names of the engines. routing.EnginePolicyrouter is the default.
const (
	Native = routing.EnginePolicyrouter
	SGLang = "sglang"
	VLLM   = "vllm"
)

// table is the engines by registration name, the source of every list of
// their names (API validation, --default-engine, OpenAPI enums, which a
// test ties to this table).
var table = map[string]Engine{
	Native:   native{},
	SGLang:   sglang{},
	VLLM:     vllm{},
	LlamaCpp: llamacpp{},
}

// Names returns the registration names of the engines, Native (the
// default) first, then sorted.
func Names() []string {
	names := make([]string, 0, len(table))
	for name := range table {
		if name != Native {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return append([]string{Native}, names...)
}

// Lookup returns the engine with the given registration name, and false
// for a name not in the table.
func Lookup(name string) (Engine, bool) {
	e, ok := table[name]
	return e, ok
}

// Is reports whether name is the name of an engine.
func Is(name string) bool {
	_, ok := table[name]
	return ok
}

// Of returns the engine of p; a name not in the table (a stored
// registration from a newer router) gets the native one, whose failing
// probes then say what is wrong.
func Of(p routing.Policy) Engine {
	if e, ok := table[p.EngineName()]; ok {
		return e
	}
	return native{}
}

// Probe asks s's server once in its engine's wire format. The answer is
// asleep when the engine says so, or when a fleet verb put it to sleep
// and has not woken it (Policy.SleepMarked, stored, so that a restarted
// router and every replica read it): from before the sleep call is sent,
// so that no request lands on it meanwhile, and for engines that cannot
// say it at all (SleepReported false). Likewise it is paused when a
// fleet fan-out paused the engine's generation (Policy.PauseMarked),
// unless the engine reports its pause itself (vLLM's GET /is_paused): its
// report wins. The records are read once the engine has answered, so
// that a probe reported after a record changed has read it.
func Probe(ctx context.Context, c *Client, s *Server) (Answer, error) {
	e := Of(s.Policy)
	a, err := e.Probe(ctx, c, s)
	if err == nil && s.sleepMarked.Load() {
		a.Asleep = true
	}
	if err == nil && s.pauseMarked.Load() && !pauseReported(e, s) {
		a.Paused = true
	}
	return a, err
}

// Serves reports whether p's engine serves the proxied route: the
// routing.Options.Serves of the router.
func Serves(p *routing.Policy, route string) bool {
	return slices.Contains(Of(*p).Routes(), route)
}

// The proxied routes (DESIGN §8), for the engines' Routes.
const (
	RouteCompletions = "/v1/completions"
	RouteChat        = "/v1/chat/completions"
	RouteGenerate    = "/generate"
	RouteModels      = "/v1/models"
)

// The engines' Routes, shared (Serves asks for them on every proxied
// request): not to be modified.
var (
	allRoutes    = []string{RouteGenerate, RouteCompletions, RouteChat, RouteModels}
	openAIRoutes = []string{RouteCompletions, RouteChat, RouteModels}
)

// jsonCall builds a call with v marshalled as its body.
func jsonCall(method, path string, v any) Call {
	body, err := json.Marshal(v)
	if err != nil {
		panic("engine: marshal an engine call: " + err.Error()) // only plain structs are passed
	}
	return Call{Method: method, Path: path, Body: body}
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
func versionAnswer(a *Answer, raw string) error {
	v, err := ParseWeightVersion(raw)
	if err != nil {
		return err
	}
	a.Version, a.HasVersion, a.WeightVersion = v, true, raw
	return nil
}

// idleBelow is an engine's load against the policy's capacity: idle while
// running + waiting is below it.
func idleBelow(a *Answer, load int64, capacity int) {
	a.Load, a.HasLoad = max(load, 0), true
	a.Idle = a.Load < int64(max(capacity, 1))
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

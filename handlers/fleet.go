package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fleet"
	"github.com/policyrouter/policyrouter/routing"
)

// The fleet verbs (scope admin): POST /fleet/sleep, /fleet/wake and
// /fleet/engine/{path...} make one engine call to every policy the
// request's selector picks, at most fleetConcurrency at once, each with
// the policy's admin key, and answer every policy's status and body: 200
// when all answered 2xx, else 207 listing the others in failed[]. Nothing
// is retried. Sleep, wake and an exclusive fan-out hold the refit lock of
// their policies while they run (409 naming the holder for another); an
// engine's pause verb holds it until its resume (fleet_pause.go).

const (
	// fleetConcurrency bounds the calls of one fleet verb in flight.
	fleetConcurrency = 32
	// fleetCallTimeout bounds one fleet verb: waking an engine reloads
	// its weights.
	fleetCallTimeout = 10 * time.Minute
	// fleetRecordTimeout bounds the store write that clears the asleep
	// record after the engine calls.
	fleetRecordTimeout = 30 * time.Second
)

// fleetSelect resolves a selector over the registered policies: a
// selector that picks none is the caller's error.
func (s *Server) fleetSelect(sel api.FleetSelector) ([]routing.Policy, error) {
	pols := fleet.Selector{IDs: sel.IDs, Indices: sel.Indices, Labels: sel.Labels, Engine: sel.Engine}.
		Select(s.State.Snapshot().Policies())
	if len(pols) == 0 {
		return nil, fieldError("selector", "picks no registered policy")
	}
	return pols, nil
}

// fleetTake resolves sel (fleetSelect) and takes the refit lock of what
// it picks for holder: a policy held already (by another verb, or an
// update working on it) is a *fleet.HeldError, 409 naming its holder.
// The caller calls release when done.
func (s *Server) fleetTake(sel api.FleetSelector, holder string) (pols []routing.Policy, release func(), err error) {
	if pols, err = s.fleetSelect(sel); err != nil {
		return nil, nil, err
	}
	if release, err = s.fleetLocks.Acquire(pols, holder); err != nil {
		return nil, nil, err
	}
	return pols, release, nil
}

func (s *Server) fleetSleep(w http.ResponseWriter, r *http.Request) {
	var req api.FleetSleepRequest
	if err := s.decode(w, r, s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	pols, release, err := s.fleetTake(req.Selector, "POST /fleet/sleep")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer release()
	// Out of routing first: marked asleep (a stored record, which a
	// restarted router and every replica read), the next probe says so,
	// and no request lands on an engine that is releasing its memory. A
	// record that cannot be stored sends no sleep call.
	var marked []string
	for _, p := range pols {
		if _, ok := engine.Of(p).Sleep(req.Level); ok {
			marked = append(marked, p.ID)
		}
	}
	if err := s.Registry.SetSleepMarked(r.Context(), true, marked...); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.awaitState(r.Context(), marked, routing.StateAsleep)
	if req.Drain == nil || *req.Drain {
		s.awaitDrained(r.Context(), marked, s.DefaultSelectWait)
	}
	// What the sleep aborts (drain false, or a generation that outlasted
	// the drain) is the router's doing: a proxied generation may wait for
	// a policy to be woken, up to resume_within_ms.
	within := s.DefaultSelectWait
	if req.ResumeWithinMS != nil {
		within = time.Duration(*req.ResumeWithinMS) * time.Millisecond
	}
	if within > 0 {
		s.State.ExpectReturn(time.Now().Add(within), marked...)
	}
	results := s.fanOut(r.Context(), pols, func(p routing.Policy) (engine.Call, bool) { return engine.Of(p).Sleep(req.Level) })
	var failed []string
	for _, res := range results {
		if !res.OK() {
			failed = append(failed, res.Policy.ID) // not asleep: routed again
		}
	}
	s.State.ExpectReturn(time.Time{}, failed...)
	if err := s.clearSleepMarks(r.Context(), failed); err != nil {
		// Still out of routing, as if asleep, until a wake succeeds:
		// their failure is in the answer already.
		s.logger.Warn("fleet sleep: policies whose sleep call failed stay marked asleep", "policies", failed, "error", err)
	}
	s.writeFleet(w, results)
}

func (s *Server) fleetWake(w http.ResponseWriter, r *http.Request) {
	var req api.FleetWakeRequest
	if err := s.decode(w, r, s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	pols, release, err := s.fleetTake(req.Selector, "POST /fleet/wake")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer release()
	results := s.fanOut(r.Context(), pols, func(p routing.Policy) (engine.Call, bool) { return engine.Of(p).Wake(req.Tags) })
	var woken []string
	for _, res := range results {
		if res.OK() {
			woken = append(woken, res.Policy.ID) // routed again from the next probe
		}
	}
	// Due back still, until the next probe shows them awake (the routing
	// state forgets the record then): a generation the sleep aborted
	// whose abort reaches the proxy only after this wake still waits for
	// its policy, a moment, instead of ending with its tokens so far.
	if err := s.clearSleepMarks(r.Context(), woken); err != nil {
		// Awake, but out of routing: the caller must know, and wake again.
		for i := range results {
			if results[i].OK() {
				results[i].Err = "woken, but still marked asleep (not routed): " + err.Error()
			}
		}
	}
	s.writeFleet(w, results)
}

// clearSleepMarks clears the asleep record of the policies with the given
// ids, even when the request that made the engine calls has ended: the
// record must follow what the engines did.
func (s *Server) clearSleepMarks(ctx context.Context, ids []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fleetRecordTimeout)
	defer cancel()
	return s.Registry.SetSleepMarked(ctx, false, ids...)
}

// fleetEngine forwards one engine-native call, POST /fleet/engine/{path},
// to every selected policy's {url}/{path}.
func (s *Server) fleetEngine(w http.ResponseWriter, r *http.Request) {
	var req api.FleetEngineRequest
	if err := s.decode(w, r, s.MaxBodyBytes, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	path := "/" + strings.TrimLeft(chi.URLParam(r, "*"), "/")
	if path == "/" || strings.ContainsAny(path, "?#") || strings.Contains(path, "..") {
		s.writeError(w, r, fieldError("path", "must name an engine endpoint, without a query (give it in \"query\") or \"..\""))
		return
	}
	pols, err := s.fleetSelect(req.Selector)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	method := req.Method
	if method == "" {
		method = http.MethodPost
	}
	if len(req.Query) > 0 {
		q := url.Values{}
		for k, v := range req.Query {
			q.Set(k, v)
		}
		path += "?" + q.Encode()
	}
	call := engine.Call{Method: method, Path: path}
	if len(req.Body) > 0 && string(req.Body) != "null" {
		call.Body = req.Body
	}
	verbs := make(map[string]engine.GenerationVerb)
	for _, p := range pols {
		if v := engine.VerbOf(p, call.Method, call.Path); v != engine.VerbOther {
			verbs[p.ID] = v
		}
	}
	if len(verbs) > 0 {
		s.fleetGenerationVerb(w, r, pols, call, verbs) // fleet_pause.go
		return
	}
	if req.Exclusive {
		release, err := s.fleetLocks.Acquire(pols, "POST /fleet/engine"+call.Path+" (exclusive)")
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		defer release()
	}
	s.writeFleet(w, s.fanOut(r.Context(), pols, func(routing.Policy) (engine.Call, bool) { return call, true }))
}

// fanOut runs the calls, bounded by fleetCallTimeout.
func (s *Server) fanOut(ctx context.Context, pols []routing.Policy, callOf func(routing.Policy) (engine.Call, bool)) []fleet.Result {
	ctx, cancel := context.WithTimeout(ctx, fleetCallTimeout)
	defer cancel()
	return fleet.Run(ctx, s.engines, pols, fleetConcurrency, callOf)
}

// awaitState waits, at most a few probe periods, until every policy of
// ids reads state: no wait without a poller, whose probes would say so.
func (s *Server) awaitState(ctx context.Context, ids []string, state string) {
	if s.Poller == nil || len(ids) == 0 {
		return
	}
	st := s.Poller.Stats()
	ctx, cancel := context.WithTimeout(ctx, 3*st.Interval+st.Timeout)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		done := true
		for _, id := range ids {
			if ps, ok := s.State.PolicyStats(id); ok && ps.State != state {
				done = false
				break
			}
		}
		if done {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// awaitDrained waits, at most bound, until no policy of ids has a
// generation in flight: a lease out, proxied requests included. A proxied
// generation that an abort ended and that waits for a policy to return
// holds no lease, and so is not waited for.
func (s *Server) awaitDrained(ctx context.Context, ids []string, bound time.Duration) {
	if len(ids) == 0 || bound <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		drained := true
		for _, id := range ids {
			if ps, ok := s.State.PolicyStats(id); ok && ps.Inflight > 0 {
				drained = false
				break
			}
		}
		if drained {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// writeFleet answers the results: 200 when every call answered 2xx, else
// 207 with the others in failed too.
func (s *Server) writeFleet(w http.ResponseWriter, results []fleet.Result) {
	out := api.FleetResponse{Results: make([]api.FleetResult, 0, len(results)), Failed: []api.FleetResult{}}
	for _, res := range results {
		fr := api.FleetResult{ID: res.Policy.ID, Index: res.Policy.Index, Engine: res.Policy.EngineName(), Status: res.Status, Error: res.Err}
		if res.Call.Method != "" {
			fr.Call = res.Call.Method + " " + res.Call.Path
		}
		fr.Body = replyBody(res.Body)
		if res.Err == "" && !res.OK() {
			fr.Error = "status " + http.StatusText(res.Status)
		}
		out.Results = append(out.Results, fr)
		if !res.OK() {
			out.Failed = append(out.Failed, fr)
		}
	}
	status := http.StatusOK
	if len(out.Failed) > 0 {
		status = http.StatusMultiStatus
	}
	writeJSON(w, status, out)
}

// replyBody is an engine's answer as JSON: itself when it is JSON, else
// its text as a string; nil when empty.
func replyBody(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	if !utf8.Valid(b) {
		b = []byte(strings.ToValidUTF8(string(b), "\uFFFD"))
	}
	out, _ := json.Marshal(string(b))
	return out
}

// noRedirect makes a client return a 3xx answer as is: an engine call is
// never sent elsewhere with the policy's admin key.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

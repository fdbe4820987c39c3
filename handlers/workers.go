package handlers

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/auth"
	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/registry"
	"github.com/policyrouter/policyrouter/routing"
)

// SGLang Model Gateway's worker API (api/workers.go cites the source),
// mapped onto policies: a worker registered here is an ordinary policy,
// stored, probed, routed and shown in /stats like one registered with
// POST /policies, and every policy is a worker. A worker's SMG id is its
// policy's id: a new UUID for a worker registered here (SMG's are UUIDs
// too, v7), whatever id a policy registered through /policies was given.
//
// What differs from SMG, and why:
//   - POST /workers and DELETE /workers/{id} answer SMG's 202 and body, but
//     the change is made (durably, and a new worker probed once) before the
//     answer, not by a background job: a worker is routable when its
//     registration returns, and gets nothing more once its removal does.
//   - A worker registered without policyrouter's own "capacity" takes its
//     engine's (poller.Poller.EngineCapacity, engine.Client.Capacity: SGLang's max_running_requests, vLLM's
//     max_num_seqs, else their documented defaults).
//   - Errors are policyrouter's one envelope, with SMG's status codes: 400
//     for a malformed body or a bad url, 404 for an unknown worker, 409 for
//     a url already registered; 422 names a field SMG would take and
//     policyrouter cannot honour (worker_type, connection_mode,
//     runtime_type, priority, cost). An id SMG would refuse as not a UUID
//     is looked up all the same (policies' ids need not be UUIDs): unknown,
//     it is 404, not 400.
//   - The legacy routes' failures are all 400, as SMG's were; their
//     successes the same plain-text sentences.

// mountWorkers mounts the worker API, with the scopes of policyrouter's
// own routes: admin to change the registration, read to see it, route
// for a session's end. On a follower, the leader answers the worker
// routes (viaLeader): a registration waits for its first probe, and the
// lists show each worker's state, both of which only the leader knows.
func (s *Server) mountWorkers(r chi.Router) {
	admin := r.With(s.require(auth.ScopeAdmin), s.viaLeader)
	read := r.With(s.require(auth.ScopeRead), s.viaLeader)
	admin.Post("/workers", s.createWorker)
	read.Get("/workers", s.listWorkers)
	read.Get("/workers/{id}", s.getWorker)
	admin.Delete("/workers/{id}", s.deleteWorker)
	admin.Post("/add_worker", s.addWorkerLegacy)
	admin.Post("/remove_worker", s.removeWorkerLegacy)
	read.Get("/list_workers", s.listWorkerURLs)
	r.With(s.require(auth.ScopeRoute)).Post("/finish_session", s.finishSession)
}

// SMG's WorkerSpec defaults (crates/protocols/src/worker.rs:
// DEFAULT_WORKER_PRIORITY, DEFAULT_WORKER_COST), the only values taken.
const (
	smgPriority = 50
	smgCost     = 1.0
)

func (s *Server) createWorker(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	if err := s.decode(w, r, s.MaxBodyBytes, &raw); err != nil {
		s.writeError(w, r, err)
		return
	}
	// Unknown fields are ignored, as SMG's serde does.
	var req api.WorkerSpecRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		s.writeError(w, r, decodeError(err, s.MaxBodyBytes))
		return
	}
	if err := s.validateTags(&req); err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := s.registerWorker(r, req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	loc := "/workers/" + url.PathEscape(p.ID)
	w.Header().Set("Location", loc)
	writeJSON(w, http.StatusAccepted, api.WorkerAccepted{Status: "accepted", WorkerID: p.ID, URL: p.URL, Location: loc,
		Message: "Worker registered; it is routed to once its engine answers a probe"})
}

// registerWorker registers the worker req describes as a policy and waits
// for its first probe. A url already registered is a conflict, as in SMG.
func (s *Server) registerWorker(r *http.Request, req api.WorkerSpecRequest) (routing.Policy, error) {
	spec, err := workerSpec(req)
	if err != nil {
		return routing.Policy{}, err
	}
	spec.Engine = s.Registry.ResolveEngine(spec.Engine)
	if spec.Capacity == nil {
		n := s.engineCapacity(r, spec)
		spec.Capacity = &n
	}
	p, _, err := s.Registry.Register(r.Context(), spec)
	if err != nil {
		return routing.Policy{}, err
	}
	s.awaitFirstProbes(r, []routing.Policy{p})
	return p, nil
}

// workerSpec maps a worker's spec onto a policy's, refusing what policies
// cannot honour. The engine is left unresolved ("" for the default).
func workerSpec(req api.WorkerSpecRequest) (registry.Spec, error) {
	if err := checkPolicyURL("url", req.URL); err != nil {
		// SMG answers a url it cannot use 400 (validate_worker_url).
		var e *Error
		if errors.As(err, &e) {
			e.Code = api.CodeBadRequest
		}
		return registry.Spec{}, err
	}
	if t := req.WorkerType; t != "" && t != "regular" {
		return registry.Spec{}, fieldError("worker_type", `must be "regular", not `+quote(t)+
			": policyrouter routes every policy alike and has no prefill, decode or encode pools")
	}
	if m := req.ConnectionMode; m != "" && m != "http" {
		return registry.Spec{}, fieldError("connection_mode", `must be "http", not `+quote(m))
	}
	field, name := "runtime_type", req.RuntimeType
	if name == "" {
		field, name = "runtime", req.Runtime
	}
	switch {
	case name == "" || name == "unspecified":
		name = "" // the server's --default-engine
	case !engine.Is(name):
		return registry.Spec{}, fieldError(field, "must be "+routing.NameList(append(engine.Names(), "unspecified"))+
			", not "+quote(name)+": policyrouter has no engine of that name")
	}
	if req.Priority != nil && *req.Priority != smgPriority {
		return registry.Spec{}, fieldError("priority", "must be 50 (SMG's default) or absent: policyrouter does not weigh workers by priority")
	}
	if req.Cost != nil && *req.Cost != smgCost {
		return registry.Spec{}, fieldError("cost", "must be 1.0 (SMG's default) or absent: policyrouter does not weigh workers by cost")
	}
	var models []string
	for _, m := range req.Models {
		if m.ID != "" {
			models = append(models, m.ID)
		}
	}
	return registry.Spec{URL: req.URL, NodeID: req.NodeID, Capacity: req.Capacity, Labels: req.Labels,
		Engine: name, APIKey: req.APIKey, Models: models}, nil
}

// engineCapacity is the capacity of a worker registered without one: its
// engine's own, as its server reports it, else the engine's default.
func (s *Server) engineCapacity(r *http.Request, spec registry.Spec) int {
	if s.EngineCapacity == nil {
		return engine.DefaultCapacity(spec.Engine)
	}
	var key routing.Secret
	if spec.APIKey != nil {
		key = routing.Secret(*spec.APIKey)
	}
	n, err := s.EngineCapacity(r.Context(), routing.Policy{URL: spec.URL, Engine: spec.Engine, APIKey: key, Capacity: 1})
	if err != nil {
		s.logger.InfoContext(r.Context(), "worker registered at its engine's default capacity", "engine", spec.Engine,
			"capacity", n, "why", err.Error(), "request_id", RequestIDFromContext(r.Context()))
	}
	return n
}

func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request) {
	// ?model= filters SMG's list by model; it is not applied here: every
	// policy is listed, as SMG lists its wildcard workers, under every
	// model (its models are in model_id and GET /policies).
	ps := s.Registry.Current().Policies
	live := s.liveStats()
	out := api.WorkerList{Workers: make([]api.WorkerInfo, len(ps)), Total: len(ps), Stats: api.WorkerCountStats{RegularCount: len(ps)}}
	for i, p := range ps {
		st, ok := live(p.ID)
		out.Workers[i] = workerInfo(p, st, ok)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getWorker(w http.ResponseWriter, r *http.Request) {
	id := workerID(r)
	p, err := s.Registry.Get(id)
	if err != nil {
		s.writeError(w, r, workerNotFound(id, err))
		return
	}
	st, live := s.State.PolicyStats(p.ID)
	writeJSON(w, http.StatusOK, workerInfo(p, st, live))
}

func (s *Server) deleteWorker(w http.ResponseWriter, r *http.Request) {
	id := workerID(r)
	if err := s.Registry.Delete(r.Context(), id); err != nil {
		s.writeError(w, r, workerNotFound(id, err))
		return
	}
	writeJSON(w, http.StatusAccepted, api.WorkerAccepted{Status: "accepted", WorkerID: id,
		Message: "Worker removed; it gets no new requests"})
}

// addWorkerLegacy is SMG's legacy POST /add_worker?url=...&api_key=...: a
// regular HTTP worker of the default engine, answered 200 in plain text.
func (s *Server) addWorkerLegacy(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	raw := q.Get("url")
	if raw == "" {
		s.writeLegacyError(w, r, &Error{Code: api.CodeBadRequest, Message: "invalid request: the query parameter url is required",
			Fields: map[string]string{"url": "is required"}})
		return
	}
	req := api.WorkerSpecRequest{URL: raw}
	if q.Has("api_key") {
		key := q.Get("api_key")
		req.APIKey = &key
	}
	if _, err := s.registerWorker(r, req); err != nil {
		s.writeLegacyError(w, r, err)
		return
	}
	writeText(w, http.StatusOK, "Worker "+raw+" added successfully")
}

// removeWorkerLegacy is SMG's legacy POST /remove_worker?url=...: the
// policy registered at exactly that url.
func (s *Server) removeWorkerLegacy(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query().Get("url")
	var id string
	for _, p := range s.Registry.Current().Policies {
		if p.URL == raw {
			id = p.ID
			break
		}
	}
	if raw == "" || id == "" {
		s.writeLegacyError(w, r, &Error{Code: api.CodeNotFound, Message: "Worker " + raw + " not found",
			Fields: map[string]string{"url": "is not the url of a registered worker"}})
		return
	}
	if err := s.Registry.Delete(r.Context(), id); err != nil {
		s.writeLegacyError(w, r, err)
		return
	}
	writeText(w, http.StatusOK, "Worker "+raw+" removed successfully")
}

// listWorkerURLs is SMG's legacy GET /list_workers: every worker's url.
func (s *Server) listWorkerURLs(w http.ResponseWriter, r *http.Request) {
	ps := s.Registry.Current().Policies
	out := api.WorkerURLList{URLs: make([]string, len(ps))}
	for i, p := range ps {
		out.URLs[i] = p.URL
	}
	writeJSON(w, http.StatusOK, out)
}

// finishSession is POST /finish_session?session_id=..., the session
// release of vllm-router's sticky_least_loaded policy, which Prime-RL
// calls when a rollout ends (PrimeIntellect-ai/prime-rl PR #3563:
// InferenceClient.finish_sessions posts it with params={"session_id"} and
// reads nothing but the status; the policy's finish_session is in
// src/policies/sticky_least_loaded.rs of PrimeIntellect-ai/router, commit
// f64492fa6d30, and vllm-project/router PR #235 proposes the route,
// "idempotent release"). That policy keeps a table of sessions and their
// replicas, so a session that is never finished holds its place until its
// TTL. policyrouter keeps none: a session's home is a function of its key
// and the registered policies (consistent hashing, routing/ring.go), so
// there is nothing to release, and the call answers 200 for any session,
// known or not, as the idempotent release does. The answer's shape is
// SkyRL's stand-in of that route ({"status": "ok", "session_id"}); the
// router's own handler was not in the sources read.
func (s *Server) finishSession(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("session_id")
	if id == "" {
		s.writeError(w, r, fieldError("session_id", "is required (a query parameter)"))
		return
	}
	if err := routing.CheckSession("session_id", id); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.FinishSessionResponse{Status: "ok", SessionID: id})
}

// workerInfo renders a policy as an SMG worker; live is false when the
// routing state has no figures for it.
func workerInfo(p routing.Policy, st routing.PolicyStats, live bool) api.WorkerInfo {
	out := api.WorkerInfo{ID: p.ID, URL: p.URL, WorkerType: "regular", ConnectionMode: "http", RuntimeType: p.EngineName(),
		Labels: p.Labels, Priority: smgPriority, Cost: smgCost, Status: "pending", Index: p.Index, Capacity: p.Capacity, NodeID: p.NodeID}
	if len(p.Models) > 0 {
		out.ModelID = p.Models[0]
	}
	if !live {
		return out
	}
	if len(st.Models) > 0 {
		out.ModelID = st.Models[0]
	}
	out.NodeID, out.Load = st.Node, st.Occupancy
	switch st.State {
	case routing.StateIdle, routing.StateBusy:
		out.Status, out.IsHealthy = "ready", true
	case routing.StateUnknown:
		out.Status = "pending"
	case routing.StateDraining:
		out.Status = "draining"
	default:
		out.Status = "not_ready"
	}
	return out
}

// workerID is the {id} of a /workers/{id} path, unescaped.
func workerID(r *http.Request) string {
	raw := chi.URLParam(r, "id")
	if id, err := url.PathUnescape(raw); err == nil {
		return id
	}
	return raw
}

// workerNotFound names the worker when err is the registry's not found.
func workerNotFound(id string, err error) error {
	if errors.Is(err, registry.ErrNotFound) {
		return errorf(api.CodeNotFound, "Worker "+id+" not found")
	}
	return err
}

// writeLegacyError answers a legacy route's failure 400, as SMG's legacy
// routes did for every one of them, keeping the code; failures that are
// not the request's (503, 5xx) keep their status.
func (s *Server) writeLegacyError(w http.ResponseWriter, r *http.Request, err error) {
	e := asError(err)
	if st := statusOf(e.Code); st >= 400 && st < 500 {
		writeEnvelope(w, r, http.StatusBadRequest, e)
		return
	}
	s.writeError(w, r, e)
}

// writeText writes a plain-text answer.
func writeText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg))
}

// quote is strconv.Quote for the messages, kept short.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	b, _ := json.Marshal(s)
	return string(b)
}

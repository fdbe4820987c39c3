package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/fleet"
	"github.com/policyrouter/policyrouter/proxy"
	"github.com/policyrouter/policyrouter/registry"
	"github.com/policyrouter/policyrouter/routing"
	"github.com/policyrouter/policyrouter/store"
	"github.com/policyrouter/policyrouter/updates"
)

// Error is the one application error type of the handlers: a code of the
// error envelope, a message for the caller and, for invalid input, the bad
// fields.
type Error struct {
	Code    string
	Message string
	Fields  map[string]string
	Leader  string // on not_leader: the leader's advertised URL, if known
	// Details are the figures behind the answer (api.ErrorDetails).
	Details *api.ErrorDetails
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func errorf(code, msg string) *Error { return &Error{Code: code, Message: msg} }

func fieldError(field, msg string) *Error {
	return &Error{Code: api.CodeValidationFailed, Message: "invalid request: " + field + " " + msg, Fields: map[string]string{field: msg}}
}

// statusOf maps an error code to its HTTP status.
func statusOf(code string) int {
	switch code {
	case api.CodeBadRequest:
		return http.StatusBadRequest
	case api.CodeValidationFailed:
		return http.StatusUnprocessableEntity
	case api.CodeUnauthorized:
		return http.StatusUnauthorized
	case api.CodeForbidden:
		return http.StatusForbidden
	case api.CodeNotFound, api.CodeModelNotFound:
		return http.StatusNotFound
	case api.CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case api.CodeConflict:
		return http.StatusConflict
	case api.CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case api.CodeUnsupportedMedia:
		return http.StatusUnsupportedMediaType
	case api.CodeUpstreamFailed:
		return http.StatusBadGateway
	case api.CodeUpstreamTimeout:
		return http.StatusGatewayTimeout
	case api.CodeNoPolicies, api.CodeAllUnavailable, api.CodeNoIdlePolicy, api.CodeShuttingDown, api.CodeOverloaded, api.CodeNotReady, api.CodeNoFreshPolicy, api.CodeFloorUnmet, api.CodeNotLeader, api.CodeStoreDown:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// asError turns any error into an *Error. Errors the handlers do not know
// are internal: logged in full by writeError, shown as "internal error".
func asError(err error) *Error {
	var e *Error
	var in *routing.InputError
	var we *routing.WaitError
	var ce *registry.ConflictError
	var mnf *routing.ModelNotFoundError
	var held *fleet.HeldError
	var pe *proxy.Error
	var ufe *updates.FieldError
	switch {
	case errors.As(err, &e):
		return e
	case errors.As(err, &pe):
		return errorf(pe.Code, pe.Message)
	case errors.As(err, &held):
		return errorf(api.CodeConflict, "refit lock: "+held.Error()+"; retry when it ends")
	case errors.As(err, &mnf):
		served := mnf.Served
		if served == nil {
			served = []string{}
		}
		return &Error{Code: api.CodeModelNotFound, Message: mnf.Error(), Details: &api.ErrorDetails{Models: served}}
	case errors.As(err, &ufe):
		return fieldError(ufe.Field, ufe.Msg)
	case errors.Is(err, updates.ErrNotFound):
		return errorf(api.CodeNotFound, err.Error())
	case errors.Is(err, updates.ErrRunning), errors.Is(err, updates.ErrEnded), errors.Is(err, updates.ErrNotReady):
		return errorf(api.CodeConflict, err.Error())
	case errors.As(err, &we) && errors.Is(we.Err, routing.ErrNoFreshPolicy):
		return errorf(api.CodeNoFreshPolicy, we.Error())
	case errors.As(err, &we):
		return errorf(api.CodeNoIdlePolicy, we.Error())
	case errors.Is(err, routing.ErrShuttingDown):
		return errorf(api.CodeShuttingDown, "server is shutting down")
	case errors.As(err, &in):
		return fieldError(in.Field, in.Msg)
	case errors.Is(err, store.ErrUnavailable):
		return errorf(api.CodeStoreDown, "the registration's store did not answer; nothing was written: "+err.Error())
	case errors.Is(err, store.ErrStale):
		return errorf(api.CodeConflict, "the registration kept changing under this request (other replicas writing); nothing was written, send it again")
	case errors.As(err, &ce):
		return &Error{Code: api.CodeConflict, Message: err.Error(), Fields: map[string]string{ce.Field: ce.Msg}}
	case errors.Is(err, registry.ErrConflict):
		return errorf(api.CodeConflict, err.Error())
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, routing.ErrUnknownPolicy):
		return errorf(api.CodeNotFound, "policy not found")
	case errors.Is(err, routing.ErrAdoptConflict):
		return errorf(api.CodeConflict, err.Error())
	case errors.Is(err, routing.ErrUnknownLease):
		return errorf(api.CodeNotFound, "lease not found: not issued by this server, or no lease out for that policy")
	case errors.Is(err, routing.ErrNoPolicies):
		return errorf(api.CodeNoPolicies, "no policies registered: register them with PUT /registration (or PUT /policies)")
	case errors.Is(err, routing.ErrNoFreshPolicy):
		return errorf(api.CodeNoFreshPolicy, "no available policy has a fresh enough weight version (see GET /weights and the versions in GET /stats)")
	case errors.Is(err, routing.ErrAllExcluded):
		return errorf(api.CodeAllUnavailable, "no policy to route to: every available policy was tried already for this request")
	case errors.Is(err, routing.ErrAllUnavailable):
		return errorf(api.CodeAllUnavailable, "no policy to route to: every registered policy is unhealthy, draining or not yet heard from")
	case errors.Is(err, routing.ErrOverloaded):
		return errorf(api.CodeOverloaded, "too many /select calls waiting for an idle policy already (--max-waiters): retry later")
	default:
		return &Error{Code: api.CodeInternal, Message: "internal error"}
	}
}

// writeError writes the error envelope for err.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := asError(err)
	if e.Code == api.CodeAllUnavailable || e.Code == api.CodeNoPolicies {
		e = s.withAvailability(e)
	}
	if e.Code == api.CodeInternal {
		s.logger.ErrorContext(r.Context(), "internal error", "err", err, "request_id", RequestIDFromContext(r.Context()))
	}
	if statusOf(e.Code) == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeEnvelope(w, r, statusOf(e.Code), e)
}

func writeEnvelope(w http.ResponseWriter, r *http.Request, status int, e *Error) {
	writeJSON(w, status, api.ErrorResponse{Error: api.ErrorBody{
		Code:      e.Code,
		Message:   e.Message,
		Fields:    e.Fields,
		RequestID: RequestIDFromContext(r.Context()),
		Leader:    e.Leader,
		Details:   e.Details,
	}})
}

// WriteAuthError writes an authentication or authorisation failure in the
// error envelope; the auth middleware calls it.
func WriteAuthError(w http.ResponseWriter, r *http.Request, status int, code, message string) {
	writeEnvelope(w, r, status, &Error{Code: code, Message: message})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b := buffers.Get().(*jsonBuffer)
	defer b.release()
	if err := b.enc.Encode(v); err != nil {
		slog.Debug("write response", "err", err)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		return
	}
	writeBody(w, status, b.buf.Bytes())
}

// writeBody writes an encoded JSON answer.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// jsonBuffer is an answer's buffer with an encoder writing into it;
// buffers keeps them between requests, so that an answer costs neither a
// new encoder nor a new buffer.
type jsonBuffer struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var buffers = sync.Pool{New: func() any {
	b := new(jsonBuffer)
	b.buf.Grow(1 << 10) // room for the hand-written answers
	b.enc = json.NewEncoder(&b.buf)
	b.enc.SetEscapeHTML(false)
	return b
}}

// release puts b back in buffers, unless an answer grew it past 64 KiB.
func (b *jsonBuffer) release() {
	if b.buf.Cap() > 64<<10 {
		return
	}
	b.buf.Reset()
	buffers.Put(b)
}

// withAvailability adds to a no_policies or all_unavailable answer the
// counts of policies by state and their last errors by cause kind, so
// that the caller sees why without a second call to /stats.
func (s *Server) withAvailability(e *Error) *Error {
	if s.State == nil || e.Details != nil {
		return e
	}
	return withAvailability(e, s.State.Availability())
}

// withAvailability returns e with the figures of av.
func withAvailability(e *Error, av routing.Availability) *Error {
	out := *e
	out.Details = &api.ErrorDetails{Policies: av.Policies, States: av.ByState,
		LastError: av.LastError, LastErrorCount: av.LastErrorCount}
	for _, c := range av.Causes {
		out.Details.Causes = append(out.Details.Causes, api.ErrorCause{Kind: c.Kind, Count: c.Count, Example: c.Example})
	}
	if e.Code == api.CodeAllUnavailable && av.Policies > 0 {
		out.Message = e.Message + "; " + describeAvailability(av) + " (see GET /stats)"
	}
	return &out
}

// unroutable returns the no_policies or all_unavailable error that av
// calls for, with its figures, or nil when a policy is available.
func unroutable(av routing.Availability) *Error {
	var err error
	switch {
	case av.Policies == 0:
		err = routing.ErrNoPolicies
	case av.Available == 0:
		err = routing.ErrAllUnavailable
	default:
		return nil
	}
	return withAvailability(asError(err), av)
}

// describeAvailability says, for people, how many policies are in which
// state and their last errors by cause kind, with the most frequent
// kind's example, e.g. "of 3 policies, 2 unhealthy, 1 unknown; last
// errors by cause: connect_refused (1 policy), status_503 (1 policy);
// e.g. policy p0: ...: connection refused".
func describeAvailability(av routing.Availability) string {
	var b strings.Builder
	b.WriteString("of " + nPolicies(av.Policies))
	sep := ", "
	for _, st := range routing.States {
		if n := av.ByState[st]; n > 0 {
			b.WriteString(sep + strconv.Itoa(n) + " " + st)
		}
	}
	for i, c := range av.Causes {
		if i == 0 {
			b.WriteString("; last errors by cause: ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(c.Kind + " (" + nPolicies(c.Count) + ")")
	}
	if len(av.Causes) > 0 {
		b.WriteString("; e.g. " + av.Causes[0].Example)
	}
	return b.String()
}

// nPolicies is "1 policy" or "n policies".
func nPolicies(n int) string {
	if n == 1 {
		return "1 policy"
	}
	return strconv.Itoa(n) + " policies"
}

package handlers

import (
	"context"
	"encoding/binary"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"

	"github.com/policyrouter/policyrouter/api"
)

type ctxKey int

const requestIDKey ctxKey = iota

// RequestIDFromContext returns the request's id, or "" outside a request.
func RequestIDFromContext(ctx context.Context) string {
	if c, _ := ctx.Value(requestIDKey).(*requestIDContext); c != nil {
		return c.id
	}
	return ""
}

// requestIDContext is a request's context with its id: one allocation
// holds the context value and the X-Request-ID header's value, where
// context.WithValue, boxing the id and Header.Set took four. It is read
// only through RequestIDFromContext.
type requestIDContext struct {
	context.Context
	id  string
	hdr [1]string
}

// Value returns the requestIDContext itself for requestIDKey; any other
// key is the parent's.
func (c *requestIDContext) Value(key any) any {
	if key == requestIDKey {
		return c
	}
	return c.Context.Value(key)
}

// requestID gives every request an id: the caller's X-Request-ID when it
// is a sane token, else a new UUID. It is echoed in X-Request-ID and in
// every error envelope.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id string
		if v := r.Header["X-Request-Id"]; len(v) > 0 { // Header.Get, without canonicalising the key each time
			id = v[0]
		}
		if !saneID(id) {
			id = newRequestID()
		}
		c := &requestIDContext{Context: r.Context(), id: id}
		c.hdr[0] = id
		w.Header()["X-Request-Id"] = c.hdr[:] // http.CanonicalHeaderKey("X-Request-ID")
		next.ServeHTTP(w, r.WithContext(c))
	})
}

// newRequestID returns a random (version 4) UUID. Its bits come from
// math/rand/v2's per-thread generator rather than crypto/rand: an id must
// be unique, not secret, and this one costs no lock and no system call.
func newRequestID() string {
	var u uuid.UUID
	binary.LittleEndian.PutUint64(u[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(u[8:], rand.Uint64())
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return u.String()
}

func saneID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// logRequests writes one line per request: method, route pattern, status,
// duration, bytes and request id, at requestLevel. Paths are not logged
// (they may carry ids); the route pattern is. With NoAccessLog only the
// lines at Warn and above (faults) are written.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		pattern := chi.RouteContext(r.Context()).RoutePattern()
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		dur := time.Since(start)
		s.observe(pattern, r.Method, status, dur)
		level := requestLevel(status, s.RequestLogLevel)
		if s.NoAccessLog && level < slog.LevelWarn {
			return
		}
		logger := s.logger
		if level < slog.LevelWarn && s.AccessLogger != nil {
			logger = s.AccessLogger
		}
		if !logger.Enabled(r.Context(), level) {
			return
		}
		// The record as LogAttrs makes it, without the caller's PC: no
		// handler of the router logs the source, and runtime.Callers was an
		// eighth of the line's cost.
		rec := slog.NewRecord(time.Now(), level, "request", 0)
		rec.AddAttrs(
			slog.String("method", r.Method),
			slog.String("route", pattern),
			slog.Int("status", status),
			slog.Duration("duration", dur),
			slog.Int("bytes", ww.BytesWritten()),
			slog.String("request_id", RequestIDFromContext(r.Context())),
		)
		_ = logger.Handler().Handle(r.Context(), rec)
	})
}

// recoverer turns a panic into a logged 500 with the envelope, so one bad
// request never takes the server down. http.ErrAbortHandler is re-raised:
// it is how a handler asks net/http to drop the connection.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.logger.ErrorContext(r.Context(), "panic", "panic", p, "stack", string(debug.Stack()),
				"request_id", RequestIDFromContext(r.Context()))
			writeEnvelope(w, r, http.StatusInternalServerError, errorf(api.CodeInternal, "internal error"))
		}()
		next.ServeHTTP(w, r)
	})
}

package handlers

import (
	"context"
	"log/slog"
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
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// requestID gives every request an id: the caller's X-Request-ID when it
// is a sane token, else a new UUID. It is echoed in X-Request-ID and in
// every error envelope.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-ID")
		if !saneID(id) {
			id = uuid.NewString()
		}
		w.Header().Set("X-Request-ID", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
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
		s.logger.LogAttrs(r.Context(), level, "request",
			slog.String("method", r.Method),
			slog.String("route", pattern),
			slog.Int("status", status),
			slog.Duration("duration", dur),
			slog.Int("bytes", ww.BytesWritten()),
			slog.String("request_id", RequestIDFromContext(r.Context())),
		)
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

package handlers

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
)

func TestNewRequestID(t *testing.T) {
	seen := make(map[string]bool)
	for range 10000 {
		id := newRequestID()
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 4 || u.Variant() != uuid.RFC4122 || u.String() != id {
			t.Fatalf("newRequestID() = %q: not a version 4 UUID in canonical form (%v)", id, err)
		}
		if seen[id] {
			t.Fatalf("newRequestID() = %q twice", id)
		}
		seen[id] = true
	}
}

// BenchmarkLogRequests is the access log's cost per request: the
// middleware around a handler that answers at once, logging a JSON line
// at info to io.Discard.
//
// go test -run '^$' -bench LogRequests -benchmem ./handlers
func BenchmarkLogRequests(b *testing.B) {
	s := &Server{logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), observe: func(string, string, int, time.Duration) {}}
	mux := chi.NewRouter()
	mux.Use(requestID, s.logRequests)
	mux.Post("/v1/completions", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	req := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
	b.ReportAllocs()
	for b.Loop() {
		mux.ServeHTTP(httptest.NewRecorder(), req)
	}
}

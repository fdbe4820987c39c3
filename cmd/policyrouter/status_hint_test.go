package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
)

// status says how to reach the router when it cannot: --url and
// POLICYROUTER_URL when nothing answers, --ca on a certificate it does
// not trust, the other scheme, a token.
func TestStatusHints(t *testing.T) {
	stats := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(api.Stats{Time: time.Now()})
	})
	plain := httptest.NewServer(stats)
	defer plain.Close()
	withTLS := httptest.NewTLSServer(stats)
	defer withTLS.Close()
	locked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.ErrorBody{Code: api.CodeUnauthorized, Message: "missing bearer token"}})
	}))
	defer locked.Close()

	for _, c := range []struct {
		name, url string
		want      []string
	}{
		{"nothing listens", "http://127.0.0.1:1", []string{"127.0.0.1:1", "--url", "POLICYROUTER_URL"}},
		{"no such host", "http://no-such-router.invalid:8080", []string{"--url", "POLICYROUTER_URL"}},
		{"untrusted certificate", withTLS.URL, []string{"certificate", "--ca"}},
		{"https to plain HTTP", strings.Replace(plain.URL, "http://", "https://", 1), []string{"plain HTTP", "http://"}},
		{"plain HTTP to https", strings.Replace(withTLS.URL, "https://", "http://", 1), []string{"https://"}},
		{"no token", locked.URL, []string{"--token", "POLICYROUTER_TOKEN"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := statusCommand(context.Background(), io.Discard, []string{"--url", c.url, "--timeout", "5s"})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	t.Run("POLICYROUTER_URL", func(t *testing.T) {
		t.Setenv("POLICYROUTER_URL", plain.URL)
		if err := statusCommand(context.Background(), io.Discard, nil); err != nil {
			t.Errorf("status with POLICYROUTER_URL=%s: %v", plain.URL, err)
		}
	})
}

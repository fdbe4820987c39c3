package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/policyrouter/policyrouter/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A polling router is not ready until its first probe round is answered,
// says why, and stays ready after.
func TestReadyAfterFirstProbeRound(t *testing.T) {
	policy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"idle": true}`)
	}))
	defer policy.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := New(ctx, Config{PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, _, err := a.Registry.Register(ctx, registry.Spec{URL: policy.URL}); err != nil {
		t.Fatal(err)
	}
	if err := a.Ready(); err == nil || !strings.Contains(err.Error(), "1 of 1") {
		t.Fatalf("Ready before any probe = %v; want an error naming 1 of 1 policies", err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for a.Ready() != nil {
		time.Sleep(time.Millisecond)
	}
	// A policy registered later does not make the router unready.
	if _, _, err := a.Registry.Register(ctx, registry.Spec{URL: policy.URL + "/other"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Ready(); err != nil {
		t.Errorf("Ready after a later registration = %v; want nil", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// The router name is checked against the table of routers.
func TestUnknownRouterRefused(t *testing.T) {
	if _, err := New(context.Background(), Config{Router: "least_busy"}); err == nil || !strings.Contains(err.Error(), "idle_affinity") {
		t.Errorf("New(router least_busy) = %v; want an error listing the routers a default may name", err)
	}
}

package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/client"
)

// TestRestartWhileHeldHandsOutNothing is the trial that found policies
// handed out while busy: register 4 policies, select all 4 (each then
// answers busy), SIGKILL the router, start it again on the same --data-dir.
// The restarted router must hand out nothing while every policy answers
// busy, say it is not ready until it has heard from them, and hand out a
// policy once it answers idle.
func TestRestartWhileHeldHandsOutNothing(t *testing.T) {
	var busy [4]atomic.Bool
	var urls []string
	for i := range busy {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/idle" {
				http.NotFound(w, r)
				return
			}
			fmt.Fprintf(w, `{"idle": %v}`, !busy[i].Load())
		}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	dir := t.TempDir()
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--poll-interval", "50ms"}
	p := start(t, nil, args...)
	base := "http://" + p.addr
	var regs []string
	for i, u := range urls {
		regs = append(regs, fmt.Sprintf(`{"url": %q, "index": %d}`, u, i))
	}
	req, _ := http.NewRequest(http.MethodPut, base+"/policies", strings.NewReader(`{"policies": [`+strings.Join(regs, ",")+`]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ctx, c := context.Background(), client.New(base, nil)
	for range 4 {
		sel, err := c.Select(ctx, api.SelectRequest{TimeoutMS: new(5000)})
		if err != nil {
			t.Fatalf("select before the restart: %v", err)
		}
		busy[sel.Index].Store(true)
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.done <- nil

	p = start(t, nil, args...)
	base = "http://" + p.addr
	c = client.New(base, nil)
	if code, body := post(t, base+"/select", "", `{"timeout_ms": 0}`); code != http.StatusServiceUnavailable {
		t.Fatalf("first select after the restart: %d %s; want 503", code, body)
	}
	// Ready once the first round of probes is answered.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d after 10s", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Ten probe periods of busy answers: still nothing to hand out.
	time.Sleep(500 * time.Millisecond)
	for _, router := range []string{"simple", "idle_affinity"} {
		if code, body := post(t, base+"/select", "", `{"timeout_ms": 0, "router": "`+router+`"}`); code != http.StatusServiceUnavailable {
			t.Errorf("%s select while every policy answers busy: %d %s; want 503", router, code, body)
		}
	}
	stats, err := c.Stats(ctx)
	if err != nil || stats.Totals.Busy != 4 {
		t.Errorf("stats totals %+v, %v; want 4 busy", stats.Totals, err)
	}
	busy[2].Store(false)
	if sel, err := c.Select(ctx, api.SelectRequest{TimeoutMS: new(10000)}); err != nil || sel.Index != 2 {
		t.Errorf("select once policy 2 answers idle: %+v %v; want policy 2", sel, err)
	}
}

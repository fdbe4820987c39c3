package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/policyrouter/policyrouter/client"
)

// TestCrashKeepsAcknowledgedWrites registers policies and replaces the
// topology concurrently, kills the router with SIGKILL in the middle,
// restarts it on the same --data-dir and checks that every write answered
// 2xx is there and nothing half-written is.
func TestCrashKeepsAcknowledgedWrites(t *testing.T) {
	dir := t.TempDir()
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--poll-interval", "0"}
	p := start(t, nil, args...)
	base := "http://" + p.addr

	// Policies 0-3 carry the topologies below.
	for i := range 4 {
		if code, body := post(t, base+"/policies", "", policyBody(i)); code != 201 {
			t.Fatalf("register %d: %d %s", i, code, body)
		}
	}
	topologies := make([]string, 8)
	for k := range topologies {
		topologies[k] = fmt.Sprintf(`{"node-%d":{"env":{"ids":[0,1]},"eval":{"ids":[0,1]}},"other-%d":{"env":{"ids":[2,3]},"eval":{"ids":[2,3]}}}`, k, k)
	}

	const n = 400
	var (
		acked   sync.Map // index -> true, for registrations answered 201
		ackN    atomic.Int64
		killed  = make(chan struct{})
		once    sync.Once
		wg      sync.WaitGroup
		sem     = make(chan struct{}, 32)
		hc      = &http.Client{}
		putTopo = func(k int) {
			req, _ := http.NewRequest(http.MethodPut, base+"/topology", strings.NewReader(topologies[k]))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := hc.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	)
	for i := 4; i < n; i++ {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			select {
			case <-killed:
				return
			default:
			}
			if i%10 == 0 {
				putTopo(i / 10 % len(topologies))
			}
			resp, err := hc.Post(base+"/policies", "application/json", strings.NewReader(policyBody(i)))
			if err != nil {
				return // the crash cut it off: it may or may not be stored
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				acked.Store(i, true)
				if ackN.Add(1) == n/2 {
					once.Do(func() {
						_ = p.cmd.Process.Kill()
						close(killed)
					})
				}
			}
		})
	}
	wg.Wait()
	once.Do(func() { _ = p.cmd.Process.Kill(); close(killed) })
	<-p.done
	p.done <- nil
	if ackN.Load() < n/2 {
		t.Fatalf("only %d registrations acknowledged before the kill", ackN.Load())
	}

	p2 := start(t, nil, args...)
	c := client.New("http://"+p2.addr, nil)
	list, err := c.Policies(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stored := make(map[int]bool)
	for _, pol := range list.Policies {
		// Whole, never half-written: every field as registered.
		if pol.ID != fmt.Sprintf("policy-%d", pol.Index) || pol.URL != fmt.Sprintf("http://127.0.0.1:9/p%d", pol.Index) {
			t.Errorf("restored policy is not one that was sent: %+v", pol)
		}
		stored[pol.Index] = true
	}
	missing := 0
	acked.Range(func(k, _ any) bool {
		if !stored[k.(int)] {
			missing++
			t.Errorf("acknowledged registration %d lost", k.(int))
		}
		return true
	})
	for i := range 4 {
		if !stored[i] {
			t.Errorf("policy %d registered before the crash phase lost", i)
		}
	}
	// Compared as generic JSON, the form the topologies were sent in.
	var topo map[string]any
	if err := c.Do(context.Background(), http.MethodGet, "/topology", nil, &topo); err != nil {
		t.Fatal(err)
	}
	if len(topo) != 0 {
		got, _ := json.Marshal(topo)
		found := false
		for _, sent := range topologies {
			var want map[string]any
			_ = json.Unmarshal([]byte(sent), &want)
			w, _ := json.Marshal(want)
			found = found || string(w) == string(got)
		}
		if !found {
			t.Errorf("restored topology %s is none of those sent", got)
		}
	}
	t.Logf("%d acknowledged before SIGKILL, %d restored, %d lost", ackN.Load(), len(list.Policies), missing)
	if err := p2.stop(t); err != nil {
		t.Fatal(err)
	}

	// A second process on the same directory is refused clearly.
	p3 := start(t, nil, args...)
	out, err := runBinary(args...)
	if err == nil || !strings.Contains(out, "another policyrouter process") {
		t.Errorf("second process on %s: err=%v output=%s", dir, err, out)
	}
	_ = p3.stop(t)
}

func policyBody(i int) string {
	return fmt.Sprintf(`{"url":"http://127.0.0.1:9/p%d","index":%d,"id":"policy-%d"}`, i, i, i)
}

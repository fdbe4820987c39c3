package main

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/client"
	"github.com/policyrouter/policyrouter/internal/poll"
)

// demo --fleet-addr serves the simulated policies on that address, for a
// user behind a firewall or a port range; a value that is not host:port
// is refused, naming the flag.
func TestDemoFleetAddr(t *testing.T) {
	fleet := freeAddrs(t, 1)[0]
	p := start(t, nil, "demo", "--addr", "127.0.0.1:0", "--fleet-addr", fleet, "--policies", "2", "--workers", "0")
	ctx, c := context.Background(), client.New("http://"+p.addr, nil)
	var stats api.Stats
	poll.Until(t, "the demo's policies heard from", func() bool {
		var err error
		stats, err = c.Stats(ctx)
		return err == nil && len(stats.Policies) == 2 && stats.Totals.Unknown == 0
	})
	for _, ps := range stats.Policies {
		if want := "http://" + fleet + "/p/" + strconv.Itoa(ps.Index); ps.URL != want {
			t.Errorf("policy %d at %s; want %s", ps.Index, ps.URL, want)
		}
	}
	resp, err := http.Get("http://" + fleet + "/p/1/idle")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /p/1/idle on --fleet-addr: %d", resp.StatusCode)
	}
	if err := p.stop(t); err != nil {
		t.Fatal(err)
	}

	code, _, stderr := runCLI(t, "demo", "--addr", "127.0.0.1:0", "--fleet-addr", "9100")
	if code == 0 || !strings.Contains(stderr, "--fleet-addr must be host:port") {
		t.Errorf("demo --fleet-addr 9100: exit %d, stderr %q; want an error naming --fleet-addr", code, stderr)
	}
}

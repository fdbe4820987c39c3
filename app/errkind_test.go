package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/routing"
)

// A fleet that fails for one reason is one cause: 100 policies refusing
// connections on 100 ports make the all_unavailable answer name
// connect_refused, count 100, though no two last_error texts are alike,
// and /stats gives each policy's last_error_kind.
func TestAllUnavailableGroupsByCause(t *testing.T) {
	const n = 100
	a, addr := serveApp(t, Config{PollInterval: 50 * time.Millisecond, PollTimeout: 2 * time.Second, FailThreshold: 1})
	base := "http://" + addr

	// n distinct ports, listening together a moment ago, closed now; on
	// 127.0.0.2, where no other test's listener (on 127.0.0.1) answers a
	// port given back.
	lns := make([]net.Listener, n)
	var reg api.RegistrationRequest
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		reg.Policies = append(reg.Policies, api.PolicyRequest{URL: "http://" + ln.Addr().String(), Index: new(i)})
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	reg.Topology = json.RawMessage(`{}`)
	body, err := json.Marshal(reg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPut, base+"/registration", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /registration: %d", resp.StatusCode)
	}
	poll.Until(t, "every policy unhealthy", func() bool {
		return a.State.Availability().ByState[routing.StateUnhealthy] == n
	})

	code, _, out := post(t, base, "/select", map[string]any{"timeout_ms": 0})
	var e api.ErrorResponse
	raw, _ := json.Marshal(out)
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	if code != http.StatusServiceUnavailable || e.Error.Code != api.CodeAllUnavailable || e.Error.Details == nil {
		t.Fatalf("/select: %d %s", code, raw)
	}
	causes := e.Error.Details.Causes
	if len(causes) != 1 || causes[0].Kind != routing.ErrKindConnectRefused || causes[0].Count != n ||
		!strings.Contains(causes[0].Example, "connection refused") {
		t.Errorf("causes %+v; want one, connect_refused, count %d, with a connection refused example", causes, n)
	}
	if want := fmt.Sprintf("by cause: connect_refused (%d policies)", n); !strings.Contains(e.Error.Message, want) {
		t.Errorf("message %q lacks %q", e.Error.Message, want)
	}

	resp, err = http.Get(base + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var stats api.Stats
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
		t.Fatal(err)
	}
	for _, ps := range stats.Policies {
		if ps.LastErrorKind != routing.ErrKindConnectRefused {
			t.Errorf("/stats policy %d: last_error_kind %q (last_error %q); want connect_refused", ps.Index, ps.LastErrorKind, ps.LastError)
		}
	}
}

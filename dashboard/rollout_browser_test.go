package dashboard_test

// The rolling update in the browser: a real router (app.New) rolls a
// fleet of fake policies to a new version while the page shows each
// policy's phase and wave.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/app"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/registry"
)

// startRouter serves a router in this process on a free loopback port,
// polling often, with the fleet's policies registered at version 1, and
// returns its base URL once it routes.
func startRouter(tb testing.TB, fleet *fakepolicy.Fleet) (*app.App, string) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, app.Config{Addr: "127.0.0.1:0", PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	ln, err := a.Listen()
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			tb.Errorf("serve: %v", err)
		}
	})
	one := int64(1)
	for i := range fleet.Len() {
		fleet.Policy(i).SetVersion(1)
		node := fmt.Sprintf("node-%c", 'a'+i%2)
		if _, _, err := a.Registry.Register(ctx, registry.Spec{URL: fleet.URL(i), NodeID: node, Version: &one}); err != nil {
			tb.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Ready() != nil {
		if time.Now().After(deadline) {
			tb.Fatalf("router not ready within 10s: %v", a.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return a, "http://" + ln.Addr().String()
}

// call sends a JSON request to the router and decodes a 2xx answer into out.
func call(tb testing.TB, method, url, body string, out any) {
	tb.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader([]byte(body)))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 != 2 {
		tb.Fatalf("%s %s: %s: %s", method, url, res.Status, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			tb.Fatalf("%s %s: %v", method, url, err)
		}
	}
}

// waitUpdate reads GET /updates/{id} until cond holds of it.
func waitUpdate(tb testing.TB, base, id, what string, cond func(api.Update) bool) api.Update {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var u api.Update
		call(tb, "GET", base+"/updates/"+id, "", &u)
		if cond(u) {
			return u
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after 15s, update %s: %s is still false: %+v", id, what, u)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// phaseOf is the policy's phase and wave as the page shows them, "" when
// it shows no such policy.
const phaseOf = `((i) => { const e = document.querySelector('#rollout .ro-p[data-index="' + i + '"]'); return e ? e.dataset.phase + "@" + e.closest(".ro-wave").dataset.wave : ""; })`

// TestDashboardRollingUpdateInBrowser rolls three policies to version 2,
// one per wave, in external mode: each wave's policy stays updating (step
// ready) until the test moves its weights and confirms it. Meanwhile the
// page shows it updating in the current wave and the others pending, then
// done. A second update whose action fails shows the failed policy and
// its error.
func TestDashboardRollingUpdateInBrowser(t *testing.T) {
	b := newBrowser(t)
	fleet, err := fakepolicy.New(3, nil, fakepolicy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	_, base := startRouter(t, fleet)

	var u api.Update
	call(t, "POST", base+"/updates", `{"version": 2, "max_unavailable": 1}`, &u)
	b.do(t, 15*time.Second, chromedp.Navigate(base+"/"))

	for wave := 1; wave <= fleet.Len(); wave++ {
		u = waitUpdate(t, base, u.ID, fmt.Sprintf("wave %d waits for the trainer", wave), func(u api.Update) bool {
			return u.Waves == wave && len(u.Ready) == 1
		})
		var p api.UpdatePolicy
		for _, q := range u.Policies {
			if q.ID == u.Ready[0] {
				p = q
			}
		}
		waitFor(t, b, fmt.Sprintf("policy %d updating in wave %d", p.Index, wave),
			fmt.Sprintf(`%s(%d) === "updating@%d"`, phaseOf, p.Index, wave), 10*time.Second)
		if got := eval[string](t, b, `Array.from(document.querySelectorAll("#rollout .ro-wave.current"), w => w.dataset.wave).join(" ")`); got != fmt.Sprint(wave) {
			t.Errorf("wave %d: current wave shown = %q", wave, got)
		}
		pending, done := 0, 0
		for i := range fleet.Len() {
			switch got := eval[string](t, b, fmt.Sprintf(`%s(%d)`, phaseOf, i)); {
			case i == p.Index:
			case strings.HasPrefix(got, "done@"):
				done++
			case got == "pending@0":
				pending++
			default:
				t.Errorf("wave %d: policy %d shown as %q; want done in an earlier wave or pending", wave, i, got)
			}
		}
		if pending != fleet.Len()-wave || done != wave-1 {
			t.Errorf("wave %d: %d pending and %d done shown; want %d and %d", wave, pending, done, fleet.Len()-wave, wave-1)
		}
		item := fmt.Sprintf(`document.querySelector('#rollout .ro-p[data-index="%d"]')`, p.Index)
		if got := eval[string](t, b, item+`.querySelector(".ro-step").textContent`); !strings.HasPrefix(got, "ready · ") {
			t.Errorf("wave %d: step shown %q; want ready and its time", wave, got)
		}
		if got := eval[string](t, b, item+`.querySelector(".ro-ver").textContent`); got != "v1 → v2" {
			t.Errorf("wave %d: version shown %q; want v1 → v2", wave, got)
		}
		if wave == 1 {
			b.screenshot(t, "rollout")
		}

		fleet.Policy(p.Index).SetVersion(2)
		call(t, "POST", base+"/updates/"+u.ID+"/done", fmt.Sprintf(`{"policies": [%q]}`, p.ID), nil)
		waitFor(t, b, fmt.Sprintf("policy %d done in wave %d", p.Index, wave),
			fmt.Sprintf(`%s(%d) === "done@%d"`, phaseOf, p.Index, wave), 10*time.Second)
	}
	waitFor(t, b, "the update shown succeeded", `document.getElementById("rollout").dataset.state === "succeeded"`, 10*time.Second)
	if got := eval[string](t, b, `document.getElementById("ro-title").textContent`); got != "rolling update to v2 · succeeded" {
		t.Errorf("title = %q", got)
	}
	if n := eval[int](t, b, `document.querySelectorAll("#rollout .ro-wave.current").length`); n != 0 {
		t.Errorf("%d current waves shown after the update ended", n)
	}
	if got := eval[string](t, b, `Array.from(document.querySelectorAll("#rollout .ro-wave"), w => w.dataset.wave).join(" ")`); got != "1 2 3" {
		t.Errorf("waves shown %q; want 1 2 3", got)
	}

	// An update whose action fails: the policy of its first wave fails,
	// the update ends failed, the others were never taken.
	for i := range fleet.Len() {
		fleet.Policy(i).SetFailUpdates(true)
	}
	call(t, "POST", base+"/updates", `{"version": 3, "max_unavailable": 1, "action": {"path": "/update_weights_from_disk", "body": {"version": 3}}}`, &u)
	u = waitUpdate(t, base, u.ID, "failed", func(u api.Update) bool { return u.State == "failed" })
	// The update lists the policies no wave took as pending.
	var failed api.UpdatePolicy
	phases := map[string]int{}
	for _, p := range u.Policies {
		phases[p.Phase]++
		if p.Phase == "failed" {
			failed = p
		}
	}
	if len(u.Policies) != fleet.Len() || phases["failed"] != 1 || phases["pending"] != fleet.Len()-1 {
		t.Fatalf("failed update's policies = %+v; want one failed, the others pending", u.Policies)
	}
	waitFor(t, b, "the failed update shown", fmt.Sprintf(`document.getElementById("rollout").dataset.update === %q && document.getElementById("rollout").dataset.state === "failed"`, u.ID), 10*time.Second)
	if got := eval[string](t, b, fmt.Sprintf(`%s(%d)`, phaseOf, failed.Index)); got != "failed@1" {
		t.Errorf("failed policy %d shown as %q; want failed@1", failed.Index, got)
	}
	errText := eval[string](t, b, fmt.Sprintf(`document.querySelector('#rollout .ro-p[data-index="%d"] .ro-err').textContent`, failed.Index))
	if errText == "" || errText != failed.Error {
		t.Errorf("failed policy's error shown %q; want the update's %q", errText, failed.Error)
	}
	if got := eval[string](t, b, `document.getElementById("ro-error").textContent`); got != u.Error || got == "" {
		t.Errorf("update error shown %q; want %q", got, u.Error)
	}
	if got := eval[int](t, b, `document.querySelectorAll('#rollout .ro-wave[data-wave="0"] .ro-p[data-phase="pending"]').length`); got != fleet.Len()-1 {
		t.Errorf("%d policies shown pending; want the %d no wave took", got, fleet.Len()-1)
	}
	b.screenshot(t, "rollout-failed")
	b.checkConsole(t)
}

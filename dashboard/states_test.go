package dashboard_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/api"
	"github.com/policyrouter/policyrouter/dashboard"
	"github.com/policyrouter/policyrouter/routing"
)

// Every routing state, paused and asleep included, is one the dashboard
// knows: in its list of states, with a counter button and a legend entry
// in the page, a colour and a glyph of its own in the stylesheet; the
// state a failed update leaves (update_failed) has its legend entry too;
// and each tile shows its policy's engine.
func TestEveryStateHasItsColour(t *testing.T) {
	h := dashboard.Handler()
	_, js := get(t, h, http.MethodGet, "/dashboard.js", nil)
	_, page := get(t, h, http.MethodGet, "/", nil)
	_, css := get(t, h, http.MethodGet, "/dashboard.css", nil)
	m := regexp.MustCompile(`const STATES = \[([^\]]*)\]`).FindStringSubmatch(js)
	if m == nil {
		t.Fatal("dashboard.js has no STATES list")
	}
	colours := map[string]string{}
	for _, d := range regexp.MustCompile(`--(\w+): (#[0-9a-f]{6});`).FindAllStringSubmatch(strings.SplitN(css, "@media", 2)[0], -1) {
		colours[d[1]] = d[2]
	}
	seen := map[string]string{}
	for _, s := range routing.States {
		if !strings.Contains(m[1], `"`+s+`"`) {
			t.Errorf("state %s is not in dashboard.js's STATES [%s]", s, m[1])
		}
		for _, want := range []string{`data-state="` + s + `"`, `id="n-` + s + `"`, `<span class="key s-` + s + `"><i class="glyph" aria-hidden="true"></i>` + s + `: `} {
			if !strings.Contains(page, want) {
				t.Errorf("index.html lacks %s", want)
			}
		}
		for _, want := range []string{".s-" + s + " { --st: var(--" + s + "); }", ".s-" + s + " .glyph::before"} {
			if !strings.Contains(css, want) {
				t.Errorf("dashboard.css lacks %q", want)
			}
		}
		c := colours[s]
		if c == "" {
			t.Errorf("dashboard.css has no colour --%s", s)
			continue
		}
		if other, ok := seen[c]; ok {
			t.Errorf("states %s and %s share the colour %s", other, s, c)
		}
		seen[c] = s
	}
	if want := `</i>update failed: `; !strings.Contains(page, want) {
		t.Errorf("index.html's legend lacks the state %s (%q)", api.StateUpdateFailed, want)
	}
	for _, want := range []string{`el("span", "t-eng")`, `setText(t.eng, p.engine || "policyrouter")`} {
		if !strings.Contains(js, want) {
			t.Errorf("dashboard.js lacks %q: the tile does not show the engine", want)
		}
	}
	if !strings.Contains(css, ".t-eng {") {
		t.Error("dashboard.css does not style the tile's engine")
	}
}

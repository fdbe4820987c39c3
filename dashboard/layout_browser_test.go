package dashboard_test

// The page's text and layout in the browser, at the widths of a laptop:
// no value the script failed to compute ("undefined", "NaN"), nothing
// wider than the window, no text outside its box; in the demo, with
// engine fleets whose policies sleep, and with the prefix index.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// layoutWidths are the window widths checkLayout tries: the issue's
// 1400 px and a 1280 px laptop.
var layoutWidths = []int64{1400, 1280}

// badWordsJS lists every "undefined" and "NaN" in the page's text (each
// text node, shown or hidden) and in its tooltips, with a little context
// each.
const badWordsJS = `(() => {
	const texts = Array.from(document.querySelectorAll("[title]"), e => e.title);
	const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
	while (walk.nextNode()) texts.push(walk.currentNode.data);
	const out = [];
	for (const t of texts) {
		for (const m of t.matchAll(/\b(undefined|NaN)\b/g)) out.push(t.slice(Math.max(0, m.index - 30), m.index + 20).replace(/\s+/g, " "));
	}
	return out;
})()`

// overflowJS lists the shown boxes whose content is wider than they are:
// a figure, a state counter, a tile, a node's header, a phase, a chart.
const overflowJS = `Array.from(document.querySelectorAll(
	".figures > div, .count, .tile, .node-head, .ro-p, .ro-wave-head, .chart, .toolbar, .top"))
	.filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
	.map(e => (e.id || e.className) + " (" + e.scrollWidth + " > " + e.clientWidth + "): " + e.textContent.replace(/\s+/g, " ").slice(0, 80))`

type pageWidth struct {
	Scroll int `json:"scroll"`
	Client int `json:"client"`
}

// checkLayout sizes the window to each of layoutWidths, lets the page
// refresh twice, and fails the test on "undefined" or "NaN" in the page,
// a page that scrolls sideways, or a box whose text overflows it.
func checkLayout(tb testing.TB, b *browser, where string) {
	tb.Helper()
	for _, w := range layoutWidths {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		_, err := chromedp.Call(ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{Width: w, Height: 900, DeviceScaleFactor: 1})
		cancel()
		if err != nil {
			tb.Fatal(err)
		}
		for range 2 {
			updated := eval[string](tb, b, `document.getElementById("updated").textContent`)
			waitFor(tb, b, "a refresh", fmt.Sprintf(`document.getElementById("updated").textContent !== %q`, updated), 5*time.Second)
		}
		if bad := eval[[]string](tb, b, badWordsJS); len(bad) > 0 {
			tb.Errorf("%s at %d px: the page shows undefined or NaN: %q", where, w, bad)
		}
		if got := eval[pageWidth](tb, b, `({scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth})`); got.Scroll > got.Client {
			tb.Errorf("%s at %d px: the page scrolls sideways: scrollWidth %d > clientWidth %d", where, w, got.Scroll, got.Client)
		}
		if over := eval[[]string](tb, b, overflowJS); len(over) > 0 {
			tb.Errorf("%s at %d px: text overflows its box: %q", where, w, over)
		}
	}
}

// TestDashboardEnginesInBrowser runs the demo with SGLang and with vLLM
// fleets, puts one policy to sleep through POST /fleet/sleep and checks
// that its node counts it asleep, and the page's text and layout.
func TestDashboardEnginesInBrowser(t *testing.T) {
	for _, engine := range []string{"sglang", "vllm"} {
		t.Run(engine, func(t *testing.T) {
			b := newBrowser(t)
			base := "http://" + startDemo(t, "--engine", engine, "--policies", "4", "--workers", "2")
			deadline := time.Now().Add(10 * time.Second)
			for len(getStats(t, base).Policies) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the demo registered no policies within 10s")
				}
				time.Sleep(100 * time.Millisecond)
			}
			b.do(t, 15*time.Second, chromedp.Navigate(base+"/"))
			waitFor(t, b, "policy tiles rendered", `document.querySelectorAll(".tile").length === 4`, 10*time.Second)

			res, err := http.Post(base+"/fleet/sleep", "application/json", strings.NewReader(`{"selector": {"indices": [0]}}`))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("POST /fleet/sleep: %s", res.Status)
			}
			waitFor(t, b, "policy 0 asleep", `document.querySelector('.tile[data-index="0"]').dataset.state === "asleep"`, 10*time.Second)
			head := eval[string](t, b, `document.querySelector('.tile[data-index="0"]').closest("section").querySelector(".node-meta").innerText`)
			if !strings.Contains(head, "1 asleep") {
				t.Errorf("node header %q does not count the policy asleep", head)
			}
			if got := eval[string](t, b, `document.getElementById("n-asleep").textContent`); got != "1" {
				t.Errorf("asleep counter = %q, want 1", got)
			}
			checkLayout(t, b, engine+" demo")
			b.checkConsole(t)
		})
	}
}

// TestDashboardPrefixInBrowser: the prefix figure, its charts and each
// tile's indexed tokens show while /stats has a prefix index with
// something in it, and stay hidden without one.
func TestDashboardPrefixInBrowser(t *testing.T) {
	b := newBrowser(t)
	fr := &fakeRouter{n: 8, nodes: []string{"node-a", "node-b"}, start: time.Now()}
	srv := httptest.NewServer(fr)
	defer srv.Close()

	b.do(t, 15*time.Second, chromedp.Navigate(srv.URL+"/"))
	waitFor(t, b, "tiles", `document.querySelectorAll(".tile").length === 8`, 10*time.Second)
	waitFor(t, b, "two refreshes", `document.getElementById("f-rate").textContent !== "—"`, 5*time.Second)
	hidden := `document.getElementById("f-prefix-box").hidden && document.getElementById("chart-prefix-hit").hidden && document.getElementById("chart-prefix-decisions").hidden && Array.from(document.querySelectorAll(".t-prefix")).every(e => e.hidden)`
	if !eval[bool](t, b, hidden) {
		t.Error("the prefix figure shows for a router whose /stats has no prefix index")
	}

	fr.setPrefix(true)
	waitFor(t, b, "the prefix figure", `!document.getElementById("f-prefix-box").hidden`, 5*time.Second)
	waitFor(t, b, "the hit-rate chart draws", `+document.getElementById("chart-prefix-hit").dataset.points >= 2`, 8*time.Second)
	waitFor(t, b, "the decisions chart draws", `document.querySelectorAll("#chart-prefix-decisions polyline.series").length === 4`, 5*time.Second)
	if got := eval[string](t, b, `document.getElementById("f-prefix").textContent`); !strings.HasSuffix(got, "%") {
		t.Errorf("prefix hit rate = %q, want a percentage", got)
	}
	title := eval[string](t, b, `document.getElementById("f-prefix-box").title`)
	for _, want := range []string{"hit ", "miss ", "balanced ", "none "} {
		if !strings.Contains(title, want) {
			t.Errorf("prefix figure's title %q lacks the outcome %q", title, want)
		}
	}
	lines := eval[[]string](t, b, `Array.from(document.querySelectorAll(".t-prefix"), e => e.hidden ? "" : e.textContent)`)
	for i, l := range lines {
		if !strings.HasPrefix(l, "prefix ") || !strings.HasSuffix(l, " tok") {
			t.Errorf("tile %d: prefix line %q", i, l)
		}
	}
	checkLayout(t, b, "prefix index")
	b.screenshot(t, "prefix")

	fr.setPrefix(false)
	waitFor(t, b, "the prefix figure hidden again", hidden, 5*time.Second)
	b.checkConsole(t)
}

package app

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/proxy"
)

// When the router itself takes every policy out at once (a whole-fleet
// update with pause_mode abort, POST /fleet/sleep), the generations it
// aborts wait for the policies to return and complete whole; when a
// framework aborts them itself, they come back at once.

// fleetRouter is a router in front of two simulated SGLang engines at
// weight version 1, 25 tokens a second, each of capacity n.
type fleetRouter struct {
	fleet  *fakepolicy.Fleet
	base   string
	client *http.Client
}

func newFleetRouter(t *testing.T, n int) *fleetRouter {
	t.Helper()
	fleet, err := fakepolicy.New(2, rand.NewPCG(1, 2), fakepolicy.Options{Engine: fakepolicy.EngineSGLang, TokensPerSecond: 25})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fleet.Close() })
	for i := range 2 {
		fleet.Policy(i).SetWeightVersion("1")
	}
	cfg := DefaultConfig()
	cfg.Addr = ""
	cfg.PollTimeout = 5 * time.Second // a loaded machine must not make them unhealthy
	a, base := serveWith(t, cfg, func(*http.Server) {})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * n}}
	t.Cleanup(client.CloseIdleConnections)
	fr := &fleetRouter{fleet: fleet, base: base, client: client}
	registerSGLangPair(t, a, base, fleet, n)
	return fr
}

func (fr *fleetRouter) call(t *testing.T, method, path, body string, want int) []byte {
	t.Helper()
	req, _ := http.NewRequest(method, fr.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := fr.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		t.Fatalf("%s %s: %d %s; want %d", method, path, res.StatusCode, b, want)
	}
	return b
}

func (fr *fleetRouter) load() int { return fr.fleet.Policy(0).Load() + fr.fleet.Policy(1).Load() }

// fleetAnswer is one /generate's answer, streamed or not, as its client
// read it: the tokens, the finish, the segments' versions and X-Resume.
type fleetAnswer struct {
	status   int
	ids      []int64
	text     string
	finish   string
	versions []string // of the segments, in order; none when not resumed
	resume   string
	err      error
}

// generations are requests in flight through the router: half of them
// plain, half streamed (whose chunks say how far they are).
type generations struct {
	prompts [][]int64
	answers []fleetAnswer
	done    atomic.Int64
	chunks  atomic.Int64
	wg      sync.WaitGroup
}

// start sends n /generate of tokens tokens each: the plain ones first,
// then, once the engines hold them, the streamed ones; it returns when
// every streamed one has a few tokens (and so the plain ones, begun
// before at the same rate).
func (fr *fleetRouter) start(t *testing.T, n, tokens int) *generations {
	t.Helper()
	g := &generations{prompts: make([][]int64, n), answers: make([]fleetAnswer, n)}
	send := func(i int, stream bool) {
		g.prompts[i] = []int64{int64(i), 21, 22}
		body, _ := json.Marshal(map[string]any{"input_ids": g.prompts[i], "stream": stream,
			"sampling_params": map[string]any{"max_new_tokens": tokens, "temperature": 0}})
		g.wg.Go(func() {
			defer g.done.Add(1)
			if stream {
				g.answers[i] = streamAnswer(readStream(fr.client, fr.base, body, nil, &g.chunks))
				return
			}
			g.answers[i] = fr.plain(body)
		})
	}
	for i := range n / 2 {
		send(i, false)
	}
	poll.Until(t, "the plain generations in flight", func() bool { return fr.load() == n/2 })
	for i := n / 2; i < n; i++ {
		send(i, true)
	}
	poll.Until(t, "every generation in flight, with a few tokens each", func() bool {
		return fr.load() == n && g.chunks.Load() >= int64(3*(n-n/2))
	})
	return g
}

func (fr *fleetRouter) plain(body []byte) fleetAnswer {
	req, _ := http.NewRequest(http.MethodPost, fr.base+"/generate", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := fr.client.Do(req)
	if err != nil {
		return fleetAnswer{err: err}
	}
	defer res.Body.Close()
	var c e2eChunk
	b, err := io.ReadAll(res.Body)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	a := chunkAnswer(c)
	a.status, a.err, a.resume = res.StatusCode, err, res.Header.Get(proxy.HeaderResume)
	return a
}

func chunkAnswer(c e2eChunk) fleetAnswer {
	a := fleetAnswer{ids: c.OutputIDs, text: c.Text, finish: c.finish()}
	for _, s := range c.Meta.Segments {
		a.versions = append(a.versions, s.WeightVersion)
	}
	return a
}

func streamAnswer(s e2eStream) fleetAnswer {
	if s.err != nil || len(s.chunks) == 0 || s.done != 1 {
		return fleetAnswer{status: s.status, err: s.err}
	}
	a := chunkAnswer(s.chunks[len(s.chunks)-1])
	a.status, a.resume = s.status, s.trailer.Get(proxy.HeaderResume)
	return a
}

// wantWhole checks that every answer is 200, resumed, equal token for
// token to the uninterrupted generation, its segments of the versions
// want names (in order, each at least once).
func (g *generations) wantWhole(t *testing.T, tokens int, want ...string) {
	t.Helper()
	whole := 0
	for i, a := range g.answers {
		ids, _ := fakepolicy.Continuation(g.prompts[i], tokens)
		versions := slices.Compact(slices.Clone(a.versions))
		switch {
		case a.err != nil || a.status != http.StatusOK:
			t.Errorf("generation %d: %d, %v; want 200", i, a.status, a.err)
		case !slices.Equal(a.ids, ids) || a.text != fakepolicy.Detokenize(ids) || a.finish != "length":
			t.Errorf("generation %d: %d of %d tokens, finish %q, X-Resume %q; want the uninterrupted %d", i, len(a.ids), tokens, a.finish, a.resume, tokens)
		case a.resume != "resumed" || !slices.Equal(versions, want):
			t.Errorf("generation %d: X-Resume %q, segments of versions %v; want resumed, %v", i, a.resume, a.versions, want)
		default:
			whole++
		}
	}
	t.Logf("%d of %d generations whole", whole, len(g.answers))
}

// Must hold: a whole-fleet update with pause_mode abort, 16 /generate in
// flight: 16 whole answers, exact tokens, segments of both versions.
func TestWholeFleetUpdateResumesGenerations(t *testing.T) {
	const n, tokens = 16, 100
	fr := newFleetRouter(t, n)
	g := fr.start(t, n, tokens)
	var u struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	_ = json.Unmarshal(fr.call(t, "POST", "/updates", `{"version": 2, "model_path": "/ckpt/step-2", "pause_mode": "abort", "max_unavailable": "100%"}`, http.StatusAccepted), &u)
	g.wg.Wait()
	poll.Until(t, "the update to succeed", func() bool {
		_ = json.Unmarshal(fr.call(t, "GET", "/updates/"+u.ID, "", http.StatusOK), &u)
		return u.State == "succeeded"
	})
	for i := range 2 {
		if p := fr.fleet.Policy(i); !strings.Contains(strings.Join(p.Calls(), " "), "/pause_generation") || p.PauseMode() != "abort" {
			t.Errorf("engine %d: pause mode %q; want a pause in mode abort", i, p.PauseMode())
		}
	}
	g.wantWhole(t, tokens, "1", "2")
}

// Must hold: POST /fleet/sleep (without drain: the engines abort what
// they run), then /fleet/wake, with 8 /generate in flight: the aborted
// generations wait for the wake, and all 8 answers are whole.
func TestFleetSleepWakeResumesGenerations(t *testing.T) {
	const n, tokens = 8, 100
	fr := newFleetRouter(t, n)
	g := fr.start(t, n, tokens)
	fr.call(t, "POST", "/fleet/sleep", `{"drain": false, "resume_within_ms": 600000}`, http.StatusOK)
	if !fr.fleet.Policy(0).Asleep() || !fr.fleet.Policy(1).Asleep() || fr.load() != 0 {
		t.Fatalf("engines asleep %v and %v, load %d; want both asleep, nothing running",
			fr.fleet.Policy(0).Asleep(), fr.fleet.Policy(1).Asleep(), fr.load())
	}
	if d := g.done.Load(); d != 0 {
		t.Fatalf("%d generations answered while the fleet sleeps; want them waiting for the wake", d)
	}
	fr.call(t, "POST", "/fleet/wake", `{}`, http.StatusOK)
	g.wg.Wait()
	g.wantWhole(t, tokens, "1")
}

// POST /fleet/sleep with drain (the default) waits for the 8 generations
// in flight: each completes on its engine, and only then is it put to
// sleep.
func TestFleetSleepDrainsGenerations(t *testing.T) {
	const n, tokens = 8, 60
	fr := newFleetRouter(t, n)
	g := fr.start(t, n, tokens)
	fr.call(t, "POST", "/fleet/sleep", `{}`, http.StatusOK)
	if d := g.done.Load(); d != n || !fr.fleet.Policy(0).Asleep() || !fr.fleet.Policy(1).Asleep() {
		t.Fatalf("after the sleep: %d of %d answered, engines asleep %v and %v; want all, both", d, n,
			fr.fleet.Policy(0).Asleep(), fr.fleet.Policy(1).Asleep())
	}
	g.wg.Wait()
	for i, a := range g.answers {
		ids, _ := fakepolicy.Continuation(g.prompts[i], tokens)
		if a.err != nil || a.status != http.StatusOK || !slices.Equal(a.ids, ids) || a.resume != "" {
			t.Errorf("generation %d: %d, %d of %d tokens, X-Resume %q, %v; want 200, whole, never resumed", i, a.status, len(a.ids), tokens, a.resume, a.err)
		}
	}
}

// Must hold: a framework's own abort of every engine (slime's abort_all),
// then its /fleet/sleep: every answer comes back at once, not held until
// a wake that would come only after the framework trained, although the
// sleep would let generations it aborted itself wait ten minutes.
func TestFrameworkAbortThenSleepAnswersAtOnce(t *testing.T) {
	const n, tokens = 8, 200
	fr := newFleetRouter(t, n)
	g := fr.start(t, n, tokens)
	fr.call(t, "POST", "/fleet/engine/abort_request", `{"body": {"abort_all": true}}`, http.StatusOK)
	// Each continues on the other engine, or ends: none waits.
	poll.Until(t, "every generation continued or answered", func() bool { return fr.load()+int(g.done.Load()) == n })
	fr.call(t, "POST", "/fleet/sleep", `{"drain": false, "resume_within_ms": 600000}`, http.StatusOK)
	poll.Until(t, "every generation answered before any wake", func() bool { return g.done.Load() == n })
	g.wg.Wait()
	for i, a := range g.answers {
		ids, _ := fakepolicy.Continuation(g.prompts[i], tokens)
		if a.err != nil || a.status != http.StatusOK || len(a.ids) >= tokens || !slices.Equal(a.ids, ids[:len(a.ids)]) ||
			!strings.HasPrefix(a.resume, "incomplete (") {
			t.Errorf("generation %d: %d, %d of %d tokens, X-Resume %q, %v; want 200, the tokens so far, incomplete", i, a.status, len(a.ids), tokens, a.resume, a.err)
		}
	}
}

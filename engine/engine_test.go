package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/engine"
	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/routing"
)

// fake starts one simulated server of the engine and returns it with the
// engine's view of it.
func fake(tb testing.TB, name string) (*fakepolicy.Policy, *engine.Server) {
	tb.Helper()
	f, err := fakepolicy.New(1, nil, fakepolicy.Options{Engine: name})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = f.Close() })
	s, err := engine.NewServer(routing.Policy{ID: "p", URL: f.URL(0), Engine: name, Capacity: 1})
	if err != nil {
		tb.Fatal(err)
	}
	return f.Policy(0), s
}

func probe(tb testing.TB, c *engine.Client, s *engine.Server) engine.Answer {
	tb.Helper()
	a, err := engine.Probe(context.Background(), c, s)
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// count is how many calls of the log are "METHOD path", with or
// without the fleet's /p/{n} prefix.
func count(calls []string, call string) int {
	method, path, _ := strings.Cut(call, " ")
	n := 0
	for _, c := range calls {
		m, p, _ := strings.Cut(c, " ")
		if m == method && (p == path || strings.HasSuffix(p, path) && strings.HasPrefix(p, "/p/")) {
			n++
		}
	}
	return n
}

// The table is the one list of names, the native engine first, and
// every name is found.
func TestNames(t *testing.T) {
	names := engine.Names()
	if !slices.Equal(names, []string{engine.Native, engine.LlamaCpp, engine.SGLang, engine.VLLM}) {
		t.Fatalf("Names() = %v", names)
	}
	for _, n := range names {
		if !engine.Is(n) {
			t.Errorf("Is(%q) = false", n)
		}
	}
	if engine.Is("tgi") {
		t.Error(`Is("tgi") = true`)
	}
}

// Which engine serves which proxied route: vLLM has no SGLang-native
// /generate.
func TestServes(t *testing.T) {
	for _, tt := range []struct {
		engine, route string
		want          bool
	}{
		{engine.SGLang, engine.RouteGenerate, true},
		{engine.VLLM, engine.RouteGenerate, false},
		{engine.VLLM, engine.RouteChat, true},
		{engine.Native, engine.RouteGenerate, true},
		{engine.SGLang, "/v1/embeddings", false},
		{engine.LlamaCpp, engine.RouteGenerate, false},
		{engine.LlamaCpp, engine.RouteCompletions, true},
		{engine.LlamaCpp, engine.RouteChat, true},
	} {
		p := routing.Policy{Engine: tt.engine}
		if got := engine.Serves(&p, tt.route); got != tt.want {
			t.Errorf("Serves(%s, %s) = %t; want %t", tt.engine, tt.route, got, tt.want)
		}
	}
}

// vLLM: version from /weight_info, paused from /is_paused, asleep from
// /is_sleeping, models from /v1/models; the version step sets the label
// the next probe reads.
func TestVLLMProbe(t *testing.T) {
	fp, s := fake(t, engine.VLLM)
	c := &engine.Client{HTTP: http.DefaultClient}
	a := probe(t, c, s)
	if !a.HasVersion || a.WeightVersion != "default" || a.Version != 0 || a.Paused || a.Asleep || !a.HasModels || !slices.Equal(a.Models, []string{"fake-policy"}) {
		t.Fatalf("fresh vLLM: %+v; want version \"default\" (0), not paused or asleep, models [fake-policy]", a)
	}
	e, _ := engine.Lookup(engine.VLLM)
	call, ok := e.SetVersion("step-7")
	if !ok {
		t.Fatal("vLLM has no version step")
	}
	rep, err := c.Send(context.Background(), fp.URL(), "", call)
	if err != nil || rep.Status != http.StatusOK {
		t.Fatalf("%s %s: %d %v", call.Method, call.Path, rep.Status, err)
	}
	sleep, _ := e.Sleep(2)
	if rep, err := c.Send(context.Background(), fp.URL(), "", sleep); err != nil || rep.Status != http.StatusOK {
		t.Fatalf("sleep: %d %v", rep.Status, err)
	}
	a = probe(t, c, s)
	if !a.HasVersion || a.Version != 7 || a.WeightVersion != "step-7" || !a.Asleep {
		t.Errorf("after version and sleep: %+v; want step-7 (7), asleep", a)
	}
	if calls := fp.Calls(); count(calls, "POST /sleep?level=2") != 1 {
		t.Errorf("calls %v; want POST /sleep?level=2", calls)
	}
}

// An older vLLM (no /weight_info, /is_sleeping) answers 404 once each:
// remembered, never asked again, no version, and the version step is
// optional (skipped on its 404).
func TestVLLMLegacy(t *testing.T) {
	fp, s := fake(t, engine.VLLM)
	fp.SetLegacy(true)
	c := &engine.Client{HTTP: http.DefaultClient}
	for range 3 {
		if a := probe(t, c, s); a.HasVersion || a.Asleep {
			t.Fatalf("legacy vLLM: %+v; want no version, awake", a)
		}
	}
	calls := fp.Calls()
	if n, m := count(calls, "GET /weight_info"), count(calls, "GET /is_sleeping"); n != 1 || m != 1 {
		t.Errorf("/weight_info asked %d times, /is_sleeping %d; want once each (calls %v)", n, m, calls)
	}
	e, _ := engine.Lookup(engine.VLLM)
	if call, _ := e.SetVersion("1"); !call.Optional {
		t.Error("vLLM's version step is not optional: an older server's 404 would fail the update")
	}
}

// SGLang: /model_info first; a server without it (older than 0.5.15)
// is read on /get_model_info, and /model_info is not asked again. Asleep
// comes from the policy's asleep record (Policy.SleepMarked), as
// registered or changed since.
func TestSGLangVersionAndAsleep(t *testing.T) {
	fp, s := fake(t, engine.SGLang)
	fp.SetWeightVersion("v3")
	c := &engine.Client{HTTP: http.DefaultClient}
	if a := probe(t, c, s); a.Version != 3 || a.Asleep {
		t.Fatalf("got %+v; want version 3, awake", a)
	}
	if calls := fp.Calls(); count(calls, "GET /model_info") != 1 || count(calls, "GET /get_model_info") != 0 {
		t.Errorf("calls %v; want /model_info only", calls)
	}
	s.SetSleepMarked(true)
	if a := probe(t, c, s); !a.Asleep {
		t.Errorf("marked asleep: %+v", a)
	}
	s.SetSleepMarked(false)
	if a := probe(t, c, s); a.Asleep {
		t.Errorf("mark cleared: %+v; want awake", a)
	}
	// Registered with the record (a restarted router): asleep from the
	// first probe.
	marked, err := engine.NewServer(routing.Policy{ID: "m", URL: fp.URL(), Engine: engine.SGLang, Capacity: 1, SleepMarked: true})
	if err != nil {
		t.Fatal(err)
	}
	if a := probe(t, c, marked); !a.Asleep {
		t.Errorf("registered marked: %+v; want asleep", a)
	}

	old, ls := fake(t, engine.SGLang)
	old.SetLegacy(true)
	old.SetWeightVersion("v4")
	for range 3 {
		if a := probe(t, c, ls); a.Version != 4 {
			t.Fatalf("legacy SGLang: %+v; want version 4", a)
		}
	}
	if calls := old.Calls(); count(calls, "GET /model_info") != 1 || count(calls, "GET /get_model_info") != 3 {
		t.Errorf("calls %v; want /model_info once, then /get_model_info", calls)
	}
}

// SGLang: the first probe reads how the server streams from its server
// info (/server_info, else /get_server_info, remembered), and later
// probes do not ask again until one fails (a restart may change the
// flags). A server without the info leaves the form unknown, and is not
// asked again either.
func TestSGLangStreamForm(t *testing.T) {
	c := &engine.Client{HTTP: http.DefaultClient}
	for _, legacy := range []bool{false, true} {
		fp, s := fake(t, engine.SGLang)
		fp.SetLegacy(legacy)
		if inc, known := s.IncrementalStreaming(); known {
			t.Fatalf("legacy %v: known (%v) before any probe", legacy, inc)
		}
		fp.SetIncrementalStreaming(true)
		for range 3 {
			probe(t, c, s)
		}
		if inc, known := s.IncrementalStreaming(); !inc || !known {
			t.Errorf("legacy %v: incremental %v, known %v; want incremental", legacy, inc, known)
		}
		newer, older := 1, 0
		if legacy {
			older = 1
		}
		if calls := fp.Calls(); count(calls, "GET /server_info") != newer || count(calls, "GET /get_server_info") != older {
			t.Errorf("legacy %v: calls %v; want the info asked for once", legacy, calls)
		}
		// Restarted cumulative: a failed probe, then the info again.
		fp.SetIncrementalStreaming(false)
		fp.SetMode(fakepolicy.ModeFail)
		if _, err := engine.Probe(context.Background(), c, s); err == nil {
			t.Fatalf("legacy %v: a failing server probed fine", legacy)
		}
		fp.SetMode(fakepolicy.ModeNormal)
		probe(t, c, s)
		if inc, known := s.IncrementalStreaming(); inc || !known {
			t.Errorf("legacy %v, after the restart: incremental %v, known %v; want cumulative", legacy, inc, known)
		}
	}

	fp, s := fake(t, engine.SGLang)
	fp.SetIncrementalStreaming(true)
	fp.SetNoServerInfo(true)
	for range 3 {
		probe(t, c, s)
	}
	if inc, known := s.IncrementalStreaming(); known {
		t.Errorf("without server info: incremental %v, known; want unknown", inc)
	}
	if calls := fp.Calls(); count(calls, "GET /server_info") != 1 || count(calls, "GET /get_server_info") != 1 {
		t.Errorf("without server info: calls %v; want each path asked once", calls)
	}

	// Engines that do not say: unknown.
	for _, name := range []string{engine.VLLM, engine.Native} {
		_, s := fake(t, name)
		probe(t, c, s)
		if _, known := s.IncrementalStreaming(); known {
			t.Errorf("%s: stream form known", name)
		}
	}
}

// SGLang's /update_weight_version defaults abort_all_requests to true
// upstream: the step sends false explicitly.
func TestSGLangVersionKeepsRequests(t *testing.T) {
	e, _ := engine.Lookup(engine.SGLang)
	call, ok := e.SetVersion("9")
	if !ok {
		t.Fatal("SGLang has no version step")
	}
	var body map[string]any
	if err := json.Unmarshal(call.Body, &body); err != nil {
		t.Fatal(err)
	}
	if v, present := body["abort_all_requests"]; !present || v != false {
		t.Errorf("body %s; want abort_all_requests: false, explicitly", call.Body)
	}
	if body["new_version"] != "9" || call.Path != "/update_weight_version" {
		t.Errorf("call %s %s", call.Path, call.Body)
	}
}

// llama.cpp: the load is the slots processing (a request beyond the
// slots waits and does not show), idle below the capacity; models from
// /v1/models; no version, never paused or asleep.
func TestLlamaCppProbe(t *testing.T) {
	f, err := fakepolicy.New(1, nil, fakepolicy.Options{Engine: engine.LlamaCpp, MaxRunning: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	fp := f.Policy(0)
	s, err := engine.NewServer(routing.Policy{ID: "p", URL: f.URL(0), Engine: engine.LlamaCpp, Capacity: 2})
	if err != nil {
		t.Fatal(err)
	}
	c := &engine.Client{HTTP: http.DefaultClient}
	for _, want := range []struct {
		load int64
		idle bool
	}{{0, true}, {1, true}, {2, false}, {2, false}} {
		a := probe(t, c, s)
		if first := want.load == 0; first && (!a.HasModels || !slices.Equal(a.Models, []string{"fake-policy"})) {
			t.Errorf("first probe: models %v (has %t); want [fake-policy]", a.Models, a.HasModels)
		}
		if !a.HasLoad || a.Load != want.load || a.Idle != want.idle {
			t.Errorf("load %d idle %t (has %t); want load %d idle %t", a.Load, a.Idle, a.HasLoad, want.load, want.idle)
		}
		if a.HasVersion || a.Paused || a.Asleep {
			t.Errorf("got %+v; want no version, not paused or asleep", a)
		}
		fp.StartWorkFor(time.Minute)
	}
	if calls := fp.Calls(); count(calls, "GET /slots") != 4 {
		t.Errorf("calls %v; want GET /slots on each of 4 probes", calls)
	}
}

// A llama.cpp probe that fails names /slots; a server whose /health
// answers while /slots does not (started with --no-slots) is told apart
// from one that is down; an answer of another shape is a DecodeError.
func TestLlamaCppProbeErrors(t *testing.T) {
	f, err := fakepolicy.New(1, nil, fakepolicy.Options{Engine: engine.LlamaCpp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	c := &engine.Client{HTTP: http.DefaultClient}
	s, err := engine.NewServer(routing.Policy{ID: "p", URL: f.URL(0), Engine: engine.LlamaCpp, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	f.Policy(0).SetMode(fakepolicy.ModeFail)
	_, err = engine.Probe(context.Background(), c, s)
	if !engine.IsStatus(err, http.StatusInternalServerError) || !strings.Contains(err.Error(), "/slots") || strings.Contains(err.Error(), "--no-slots") {
		t.Errorf("failing server: %v; want status 500 naming /slots, the server not up", err)
	}
	f.Policy(0).SetMode(fakepolicy.ModeGarbage)
	var de *engine.DecodeError
	if _, err = engine.Probe(context.Background(), c, s); !errors.As(err, &de) {
		t.Errorf("garbage answer: %v; want a DecodeError", err)
	}

	noSlots := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			_, _ = w.Write([]byte(`{"status": "ok"}`))
		case "/slots":
			w.WriteHeader(http.StatusNotImplemented)
			_, _ = w.Write([]byte(`{"error": {"code": 501, "message": "This server does not support slots endpoint. Start it with ` + "`--slots`" + `", "type": "not_supported_error"}}`))
		default:
			_, _ = w.Write([]byte(`[{"id": 0, "n_ctx": 4096}]`))
		}
	}))
	t.Cleanup(noSlots.Close)
	s, err = engine.NewServer(routing.Policy{ID: "n", URL: noSlots.URL, Engine: engine.LlamaCpp, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err = engine.Probe(context.Background(), c, s); !engine.IsStatus(err, http.StatusNotImplemented) || !strings.Contains(err.Error(), "--no-slots") {
		t.Errorf("--no-slots server: %v; want status 501 and the hint", err)
	}
}

// llama.cpp's capacity is its /props total_slots; a server that does not
// answer gets llama-server's default.
func TestLlamaCppCapacity(t *testing.T) {
	f, err := fakepolicy.New(1, nil, fakepolicy.Options{Engine: engine.LlamaCpp, MaxRunning: 6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	c := &engine.Client{HTTP: http.DefaultClient}
	if n, err := c.Capacity(context.Background(), routing.Policy{URL: f.URL(0), Engine: engine.LlamaCpp}); n != 6 || err != nil {
		t.Errorf("Capacity = %d, %v; want 6 (total_slots)", n, err)
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	n, err := c.Capacity(context.Background(), routing.Policy{URL: dead.URL, Engine: engine.LlamaCpp})
	if n != engine.LlamaCppDefaultCapacity || n != engine.DefaultCapacity(engine.LlamaCpp) || err == nil || !strings.Contains(err.Error(), "/props") {
		t.Errorf("Capacity of a dead server = %d, %v; want %d and an error naming /props", n, err, engine.LlamaCppDefaultCapacity)
	}
}

// llama.cpp has no update steps and no lifecycle calls: an update only
// drains it, and the fleet's sleep and wake skip it.
func TestLlamaCppHasNoSteps(t *testing.T) {
	e, ok := engine.Lookup(engine.LlamaCpp)
	if !ok {
		t.Fatal("llamacpp is not in the table")
	}
	if !slices.Equal(e.PauseModes(), []string{engine.PauseWait}) {
		t.Errorf("pause modes %v; want [wait]", e.PauseModes())
	}
	for name, has := range map[string]bool{
		"pause": second(e.Pause(engine.PauseWait)), "load": second(e.LoadFromDisk("/ckpt", "1")),
		"version": second(e.SetVersion("1")), "resume": second(e.Resume()),
		"sleep": second(e.Sleep(1)), "wake": second(e.Wake(nil)),
	} {
		if has {
			t.Errorf("llamacpp has a %s call; llama-server has no such endpoint", name)
		}
	}
}

func second(_ engine.Call, ok bool) bool { return ok }

// The KV cache's size comes with the probe's answer where the engine
// says it: SGLang's max_total_num_tokens in its server info, vLLM's
// num_gpu_blocks × block_size in its cache config's info gauge; an engine
// that does not say answers 0.
func TestProbeKVTokens(t *testing.T) {
	c := &engine.Client{HTTP: http.DefaultClient}
	for _, tt := range []struct {
		name string
		kv   int
		want int64
	}{
		{engine.SGLang, 4096, 4096}, {engine.VLLM, 4096, 4096}, {engine.SGLang, 0, 0}, {engine.Native, 4096, 0},
	} {
		t.Run(tt.name+"/"+strconv.Itoa(tt.kv), func(t *testing.T) {
			f, err := fakepolicy.New(1, nil, fakepolicy.Options{Engine: tt.name, KVTokens: tt.kv})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = f.Close() })
			s, err := engine.NewServer(routing.Policy{ID: "p", URL: f.URL(0), Engine: tt.name, Capacity: 1})
			if err != nil {
				t.Fatal(err)
			}
			if got := probe(t, c, s).KVTokens; got != tt.want {
				t.Errorf("KVTokens %d; want %d", got, tt.want)
			}
		})
	}
}

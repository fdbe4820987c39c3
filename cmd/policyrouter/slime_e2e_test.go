package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/policyrouter/policyrouter/internal/poll"
)

// The slime replay: every HTTP call slime's rollout path makes to its
// router and to its engines, in slime's order and shapes, against the real
// binary and simulated SGLang engines (`policyrouter fake-policy --engine
// sglang`). slime is THUDM/slime at commit 624b824a898a:
//
//  1. registration, SGLangEngine._register_to_router in
//     slime/backends/sglang_utils/sglang_engine.py: POST {router}/workers
//     {"url": "http://host:port", "worker_type": "regular"}, then
//     response.raise_for_status(). Before v0.3.1 (a6272da0d; the code of
//     052c174d2) slime sent the older router POST /add_worker?url=... when
//     sglang_router <= 0.2.1: the third engine is registered that way;
//  2. rollouts, generate in slime/rollout/sglang_rollout.py: POST
//     {router}/generate {"input_ids", "sampling_params", "return_logprob":
//     true}, with X-SMG-Routing-Key: the sample's session_id (a uuid4 per
//     sample) when --router-policy is consistent_hashing, without it
//     otherwise; http_utils._post retries anything but a 2xx, and slime
//     reads output["text"], output["meta_info"], and in it "finish_reason"
//     ["type"], "weight_version" if there and "output_token_logprobs" if
//     there (Sample.append_response_tokens in slime/utils/types.py);
//  3. abort, abort in sglang_rollout.py: GET {router}/workers, its
//     ["workers"][i]["url"], then abort_servers_until_idle in
//     slime/backends/sglang_utils/server_control.py on each url: POST
//     {url}/abort_request {"abort_all": true}, GET {url}/v1/loads?include=core
//     (num_requests_from_load: loads[].num_running_reqs + num_waiting_reqs),
//     again every 3 s until 0; then the rollouts still pending end;
//  4. shutdown, SGLangEngine.shutdown: GET {router}/workers, the worker
//     whose ["url"] is the engine's, DELETE {router}/workers/{["id"]},
//     raise_for_status().
//
// What slime reads that the router cannot honestly fill: nothing in these
// calls. The /generate answers are the engine's own, passed through (the
// fakes send no output_token_logprobs, which slime reads only when
// present); of GET /workers slime reads url and id, both real. The
// fields of SMG's WorkerInfo slime does not read are filled as far as a
// policy has them: model_id is absent (policies store no model list),
// priority and cost are SMG's defaults (other values are refused), load
// is the policy's occupancy rather than SMG's in-flight count.
func TestSlimeReplay(t *testing.T) {
	const (
		engines    = 3
		maxRunning = 8 // each engine's max_running_requests: its capacity
		rollouts   = 256
	)
	urls := startFakeEngines(t, engines, "--engine", "sglang", "--max-running", fmt.Sprint(maxRunning),
		"--min-work", "20ms", "--max-work", "120ms")
	p := start(t, nil, "serve", "--addr", "127.0.0.1:0", "--default-engine", "sglang", "--poll-interval", "50ms")
	router := "http://" + p.addr

	// 1. Registration.
	for i, u := range urls {
		var code int
		var body string
		if i < engines-1 {
			code, body = post(t, router+"/workers", "", `{"url": "`+u+`", "worker_type": "regular"}`)
		} else {
			code, body = postNoBody(t, router+"/add_worker?url="+url.QueryEscape(u))
		}
		if code/100 != 2 {
			t.Fatalf("registering %s: %d %s (slime raises)", u, code, body)
		}
	}
	// Routable within one probe: each registration answered after its
	// worker's first probe, so all are ready now, at their engine's
	// capacity.
	workers := getWorkers(t, router)
	if len(workers) != engines {
		t.Fatalf("GET /workers lists %d workers; want %d", len(workers), engines)
	}
	for _, w := range workers {
		if w.Status != "ready" || !w.IsHealthy || w.Capacity != maxRunning || w.RuntimeType != "sglang" {
			t.Errorf("worker %s just registered: status %q healthy %t capacity %d runtime %q; want ready, true, %d, sglang",
				w.URL, w.Status, w.IsHealthy, w.Capacity, w.RuntimeType, maxRunning)
		}
	}

	// 2. Rollouts: all at once, as slime's semaphore
	// (sglang_server_concurrency 512 x engines) lets them; half with a
	// routing key.
	type answer struct {
		status int
		body   map[string]any
		err    error
	}
	answers := make([]answer, rollouts)
	var done atomic.Int64
	var wg sync.WaitGroup
	for i := range rollouts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer done.Add(1)
			key := ""
			if i%2 == 0 {
				key = uuid.NewString()
			}
			status, body, err := slimeGenerate(router, key, i)
			answers[i] = answer{status: status, body: body, err: err}
		}()
	}
	// slime aborts once it has what it needs, with rollouts in flight.
	poll.Until(t, "three quarters of the rollouts answered", func() bool { return done.Load() >= rollouts*3/4 })

	// 3. Abort until idle, on each url GET /workers lists. slime runs the
	// engines' loops at once and waits 3 s between tries; here they run
	// one after another, 5 ms apart (poll.Until).
	for _, w := range getWorkers(t, router) {
		poll.Until(t, "engine "+w.URL+" idle after abort_all", func() bool {
			abortAll(t, w.URL)
			return engineRequests(t, w.URL) <= 0
		})
	}
	wg.Wait()
	aborted := 0
	for i, a := range answers {
		if a.err != nil || a.status != http.StatusOK {
			t.Fatalf("rollout %d: %d %v %v (slime retries anything but a 2xx)", i, a.status, a.err, a.body)
		}
		_, hasText := a.body["text"].(string)
		meta, hasMeta := a.body["meta_info"].(map[string]any)
		reason, _ := meta["finish_reason"].(map[string]any)
		typ, _ := reason["type"].(string)
		if !hasText || !hasMeta || (typ != "length" && typ != "stop" && typ != "abort") {
			t.Fatalf("rollout %d: %v; want text, and meta_info.finish_reason.type length, stop or abort", i, a.body)
		}
		if v, ok := meta["weight_version"]; ok {
			if _, isString := v.(string); !isString {
				t.Errorf("rollout %d: meta_info.weight_version %v is not a string", i, v)
			}
		}
		if typ == "abort" {
			aborted++
		}
	}
	t.Logf("%d rollouts, %d aborted by abort_all", rollouts, aborted)

	// No engine ever ran more than its capacity, and each had work.
	for _, u := range urls {
		pk := peak(t, u)
		if pk.PeakLoad > maxRunning || pk.Works == 0 {
			t.Errorf("engine %s: peak load %d, %d requests; want at most %d, some", u, pk.PeakLoad, pk.Works, maxRunning)
		}
	}

	// 4. Shutdown of the first engine: find its id by its url, delete it.
	gone := urls[0]
	var id string
	for _, w := range getWorkers(t, router) {
		if w.URL == gone {
			id = w.ID
		}
	}
	if id == "" {
		t.Fatalf("GET /workers does not list %s", gone)
	}
	req, _ := http.NewRequest(http.MethodDelete, router+"/workers/"+id, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("DELETE /workers/%s: %d (slime raises)", id, res.StatusCode)
	}
	// A removed worker gets no further traffic, keyed or not.
	before := peak(t, gone).Works
	for i := range 64 {
		key := ""
		if i%2 == 0 {
			key = uuid.NewString()
		}
		status, body, err := slimeGenerate(router, key, i)
		if err != nil || status != http.StatusOK {
			t.Fatalf("rollout after the removal: %d %v %v", status, err, body)
		}
	}
	if after := peak(t, gone).Works; after != before {
		t.Errorf("the removed engine got %d requests after its DELETE; want none", after-before)
	}
	for _, w := range getWorkers(t, router) {
		if w.ID == id || w.URL == gone {
			t.Errorf("GET /workers still lists the removed worker: %+v", w)
		}
	}
}

// startFakeEngines runs `policyrouter fake-policy --n n args...` and
// returns the engines' URLs, which it prints one a line.
func startFakeEngines(tb testing.TB, n int, args ...string) []string {
	tb.Helper()
	cmd := exec.Command(binary, append([]string{"fake-policy", "--addr", "127.0.0.1:0", "--n", fmt.Sprint(n)}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var urls []string
	for len(urls) < n {
		select {
		case u, ok := <-lines:
			if !ok {
				tb.Fatalf("fake-policy exited after %d URLs: %s", len(urls), stderr.String())
			}
			urls = append(urls, strings.TrimSpace(u))
		case <-time.After(poll.Timeout):
			tb.Fatalf("fake-policy printed %d URLs in %v", len(urls), poll.Timeout)
		}
	}
	return urls
}

func postNoBody(tb testing.TB, u string) (int, string) {
	tb.Helper()
	res, err := http.Post(u, "", nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// slimeWorker is what a test reads of GET /workers: the keys slime reads
// (id, url) and the state a replay checks.
type slimeWorker struct {
	ID          string `json:"id"`
	URL         string `json:"url"`
	Status      string `json:"status"`
	IsHealthy   bool   `json:"is_healthy"`
	Capacity    int    `json:"capacity"`
	RuntimeType string `json:"runtime_type"`
}

func getWorkers(tb testing.TB, router string) []slimeWorker {
	tb.Helper()
	res, err := http.Get(router + "/workers")
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	var v struct {
		Workers *[]slimeWorker `json:"workers"`
	}
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil || res.StatusCode != http.StatusOK || v.Workers == nil {
		tb.Fatalf("GET /workers: %d, %v; slime reads [\"workers\"]", res.StatusCode, err)
	}
	for _, w := range *v.Workers {
		if w.ID == "" || w.URL == "" {
			tb.Fatalf("GET /workers: worker %+v lacks id or url, which slime reads", w)
		}
	}
	return *v.Workers
}

// slimeGenerate sends the /generate of generate in sglang_rollout.py.
func slimeGenerate(router, key string, i int) (int, map[string]any, error) {
	payload := fmt.Sprintf(`{"sampling_params": {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 64,
		"stop": null, "stop_token_ids": null, "skip_special_tokens": false, "no_stop_trim": true,
		"spaces_between_special_tokens": false}, "return_logprob": true, "input_ids": [1, 2, 3, %d]}`, i)
	req, err := http.NewRequest(http.MethodPost, router+"/generate", strings.NewReader(payload))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("X-SMG-Routing-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	var body map[string]any
	err = json.NewDecoder(res.Body).Decode(&body)
	return res.StatusCode, body, err
}

// abortAll is _abort_server_once: POST {url}/abort_request {"abort_all": true}.
func abortAll(tb testing.TB, engine string) {
	tb.Helper()
	code, body := post(tb, engine+"/abort_request", "", `{"abort_all": true}`)
	if code != http.StatusOK {
		tb.Fatalf("POST %s/abort_request: %d %s", engine, code, body)
	}
}

// engineRequests is _get_server_num_requests: num_requests_from_load of
// GET {url}/v1/loads?include=core, running plus waiting over the ranks.
func engineRequests(tb testing.TB, engine string) int {
	tb.Helper()
	res, err := http.Get(engine + "/v1/loads?include=core")
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	var v struct {
		Loads []struct {
			Running *int `json:"num_running_reqs"`
			Waiting *int `json:"num_waiting_reqs"`
		} `json:"loads"`
	}
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil || res.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s/v1/loads: %d %v", engine, res.StatusCode, err)
	}
	n := 0
	for _, l := range v.Loads {
		if l.Running == nil || l.Waiting == nil {
			tb.Fatalf("GET %s/v1/loads: a rank without num_running_reqs or num_waiting_reqs", engine)
		}
		n += *l.Running + *l.Waiting
	}
	return n
}

type enginePeak struct {
	PeakLoad int64 `json:"peak_load"`
	Works    int64 `json:"works"`
}

func peak(tb testing.TB, engine string) enginePeak {
	tb.Helper()
	res, err := http.Get(engine + "/peak")
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	var v enginePeak
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
		tb.Fatal(err)
	}
	return v
}

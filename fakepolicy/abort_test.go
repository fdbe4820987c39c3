package fakepolicy

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/internal/poll"
)

// POST /abort_request with abort_all, as slime's abort-until-idle sends
// it, ends every generation in flight with finish reason abort and
// leaves the load at 0 in GET /v1/loads; an abort of one rid, which the
// fake does not track, aborts nothing. Both answer 200 with no body, as
// SGLang does.
func TestAbortRequest(t *testing.T) {
	f, err := New(1, rand.NewPCG(1, 2), Options{Engine: EngineSGLang, TokensPerSecond: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	answers := make(chan map[string]any, 3)
	for range 3 {
		go func() {
			res, err := http.Post(f.URL(0)+"/generate", "application/json",
				strings.NewReader(`{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":1000},"return_logprob":true}`))
			if err != nil {
				answers <- map[string]any{"error": err.Error()}
				return
			}
			defer res.Body.Close()
			var v map[string]any
			if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
				v = map[string]any{"error": err.Error()}
			}
			answers <- v
		}()
	}
	poll.Until(t, "three generations in flight", func() bool { return f.Policy(0).Load() == 3 })

	abort := func(body string) {
		t.Helper()
		res, err := http.Post(f.URL(0)+"/abort_request", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || len(b) != 0 {
			t.Fatalf("POST /abort_request %s: %d %q; want 200 and no body", body, res.StatusCode, b)
		}
	}
	abort(`{"rid":"not-tracked"}`)
	if n := f.Policy(0).Load(); n != 3 {
		t.Fatalf("load after an abort of one rid: %d; want 3 (nothing aborted)", n)
	}
	abort(`{"abort_all":true}`)
	for range 3 {
		v := <-answers
		meta, _ := v["meta_info"].(map[string]any)
		reason, _ := meta["finish_reason"].(map[string]any)
		if reason["type"] != "abort" {
			t.Errorf("generation after abort_all: %v; want meta_info.finish_reason.type abort", v)
		}
	}
	res, err := http.Get(f.URL(0) + "/v1/loads?include=core")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var loads struct {
		Loads []struct {
			Running int `json:"num_running_reqs"`
			Waiting int `json:"num_waiting_reqs"`
		} `json:"loads"`
	}
	if err := json.NewDecoder(res.Body).Decode(&loads); err != nil {
		t.Fatal(err)
	}
	if len(loads.Loads) != 1 || loads.Loads[0].Running+loads.Loads[0].Waiting != 0 {
		t.Errorf("GET /v1/loads after abort_all: %+v; want one rank with nothing running or waiting", loads)
	}
}

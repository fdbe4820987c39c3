package fakepolicy

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// call sends one request and returns the answer's status and body.
func call(tb testing.TB, method, url, body string) (int, string) {
	tb.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// weightInfo is what GET /weight_info reports.
func weightInfo(tb testing.TB, p *Policy) string {
	tb.Helper()
	status, body := call(tb, "GET", p.URL()+"/weight_info", "")
	var v struct {
		WeightVersion *string `json:"weight_version"`
	}
	if err := json.Unmarshal([]byte(body), &v); status != http.StatusOK || err != nil || v.WeightVersion == nil {
		tb.Fatalf("GET /weight_info: %d %s", status, body)
	}
	return *v.WeightVersion
}

// The weight-transfer sequence of a simulated vLLM, with upstream's
// answers and refusals: the label starts "default", update_weights
// leaves it, finish_weight_update publishes the one it is given and keeps
// it when given none; every call is logged in order.
func TestVLLMWeightTransfer(t *testing.T) {
	f := newFleet(t, 1, Options{Engine: EngineVLLM, PerPolicyListeners: true})
	p := f.Policy(0)
	if got := weightInfo(t, p); got != "default" {
		t.Fatalf("initial weight_version %q; want \"default\"", got)
	}
	for _, tt := range []struct {
		path, body string
		status     int
		answer     string
	}{
		{"/init_weight_transfer_engine", `{}`, 400, `{"detail":"Missing 'init_info' in request body"}`},
		{"/init_weight_transfer_engine", `not json`, 400, `{"detail":"Invalid JSON format"}`},
		{"/init_weight_transfer_engine", `{"init_info": {"master_address": "10.0.0.1", "master_port": 29500, "rank_offset": 1, "world_size": 3}}`, 200, `{"message":"Weight transfer initialized"}`},
		{"/start_weight_update", ``, 200, `{"message":"Weight update started"}`},
		{"/update_weights", `{"update_info": null}`, 400, `{"detail":"Missing 'update_info' in request body"}`},
		{"/update_weights", `{"update_info": {"names": ["w"], "dtype_names": ["bfloat16"], "shapes": [[2, 2]]}}`, 200, `{"message":"Weights updated"}`},
		{"/finish_weight_update", `{"weight_version": 8}`, 422, ""},
		{"/finish_weight_update", `{"weight_version": "step-8"}`, 200, `{"message":"Weight update finished"}`},
	} {
		status, answer := call(t, "POST", p.URL()+tt.path, tt.body)
		if status != tt.status || (tt.answer != "" && strings.TrimSpace(answer) != tt.answer) {
			t.Errorf("POST %s %s: %d %s; want %d %s", tt.path, tt.body, status, answer, tt.status, tt.answer)
		}
		if tt.path == "/update_weights" {
			if got := weightInfo(t, p); got != "default" {
				t.Errorf("after update_weights, weight_version %q; want \"default\" until the finish", got)
			}
		}
	}
	if got := weightInfo(t, p); got != "step-8" {
		t.Errorf("after finish_weight_update, weight_version %q; want \"step-8\"", got)
	}
	if status, _ := call(t, "POST", p.URL()+"/finish_weight_update", ""); status != http.StatusOK {
		t.Errorf("finish_weight_update without a body: %d", status)
	}
	if got := weightInfo(t, p); got != "step-8" {
		t.Errorf("after a finish without a version, weight_version %q; want \"step-8\" kept", got)
	}
	want := []string{
		"GET /weight_info",
		"POST /init_weight_transfer_engine", "POST /init_weight_transfer_engine", "POST /init_weight_transfer_engine",
		"POST /start_weight_update",
		"POST /update_weights", "GET /weight_info", "POST /update_weights", "GET /weight_info",
		"POST /finish_weight_update", "POST /finish_weight_update", "GET /weight_info",
		"POST /finish_weight_update", "GET /weight_info",
	}
	if got := p.Calls(); !slices.Equal(got, want) {
		t.Errorf("calls\n%v\nwant\n%v", got, want)
	}

	// A server from before weight versions has the transfer but no label.
	p.SetLegacy(true)
	if status, _ := call(t, "POST", p.URL()+"/finish_weight_update", `{"weight_version": "step-9"}`); status != http.StatusOK {
		t.Errorf("legacy finish_weight_update: %d", status)
	}
	if p.WeightVersion() != "step-8" {
		t.Errorf("a legacy server took the label %q", p.WeightVersion())
	}
}

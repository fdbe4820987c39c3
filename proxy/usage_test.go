package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/policyrouter/policyrouter/metrics"
	"github.com/policyrouter/policyrouter/routing"
)

// The tokens of each answer, as the engine counted them, reach
// policyrouter_proxy_tokens_total, whatever the answer's form: SGLang's
// meta_info (the last chunk of a stream counts), OpenAI's usage.
func TestAnswersCountTheirTokens(t *testing.T) {
	answers := map[string]string{
		"/generate": `{"text":"ab","output_ids":[1,2],"meta_info":{"id":"x","prompt_tokens":40,"completion_tokens":2,"cached_tokens":0,"finish_reason":{"type":"length"}}}`,
		"/v1/completions": `{"id":"c","object":"text_completion","choices":[{"index":0,"text":"ab","finish_reason":"length"}],` +
			`"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`,
	}
	stream := "data: " + `{"text":"a","output_ids":[1],"meta_info":{"id":"x","prompt_tokens":5,"completion_tokens":1,"finish_reason":null}}` + "\n\n" +
		"data: " + `{"text":"ab","output_ids":[1,2],"meta_info":{"id":"x","prompt_tokens":5,"completion_tokens":2,"finish_reason":{"type":"length"}}}` + "\n\ndata: [DONE]\n\n"
	policy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, stream)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answers[r.URL.Path])
	}))
	t.Cleanup(policy.Close)
	m := metrics.New(routing.New(routing.Options{}))
	l := &fakeLeaser{policies: []routing.Policy{{Index: 0, ID: "p0", URL: policy.URL}}}
	var ew errorWriter
	p := New(Config{Options: Options{Resume: true}, Leaser: l, WriteError: ew.write, Metrics: m})
	t.Cleanup(p.CloseIdleConnections)
	for _, req := range []struct{ path, body string }{
		{"/generate", `{"input_ids":[1,2,3]}`},                   // resumable: read whole
		{"/generate", `{"text":"hi"}`},                           // passed through
		{"/v1/completions", `{"model":"m","prompt":"hi"}`},       // OpenAI usage
		{"/generate", `{"input_ids":[1,2,3],"stream":true}`},     // a resumable stream
		{"/v1/completions", `{"model":"m","prompt":"hi","n":1}`}, // once more
	} {
		rec := httptest.NewRecorder()
		p.Forward(rec, httptest.NewRequest(http.MethodPost, req.path, strings.NewReader(req.body)))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", req.path, rec.Code, rec.Body)
		}
	}
	got := map[string]float64{}
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "policyrouter_proxy_tokens_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			got[label(s, "kind")] = s.GetCounter().GetValue()
		}
	}
	if want := map[string]float64{"prompt": 40 + 40 + 7 + 5 + 7, "completion": 2 + 2 + 3 + 2 + 3}; got["prompt"] != want["prompt"] || got["completion"] != want["completion"] {
		t.Errorf("tokens %v; want %v", got, want)
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

package proxy

import (
	"errors"
	"testing"

	"github.com/policyrouter/policyrouter/routing"
)

// modelCases hold bodies requestModel must read as encoding/json does.
var modelCases = []string{
	`{"model":"m","prompt":"hi"}`,
	` { "prompt" : "a \"model\": \"x\"" , "model" : "llama-3" } `,
	`{"prompt":{"model":"inner"},"messages":[{"model":"x"},[1,2,{"a":"}"}]],"model":"outer"}`,
	`{"Model":"upper"}`,
	`{"MODEL":"a","model":"b"}`,
	`{"model":"a","model":null}`,
	`{"model":null}`,
	`{"model":42}`,
	`{"model":{"name":"x"}}`,
	`{"model":["x"]}`,
	`{"model":true}`,
	`{"model":"esc\"aped\u00e9"}`,
	"{\"model\":\"caf\xc3\xa9\"}",
	"{\"model\":\"bad\xffutf8\"}",
	`{"mod\u0065l":"escaped-key"}`,
	"{\"mod\xc3\xa9l\":\"x\"}",
	`{"models":"no","model_x":"no"}`,
	`{}`,
	`[]`,
	`["model"]`,
	`"model"`,
	`null`,
	``,
	`{"model":"unterminated"`,
	`{"model":"x",}`,
	`{"model":"x"} trailing`,
	`{"a":1e5,"b":-0.5,"c":[],"d":{},"model":"after-numbers"}`,
	"{\"a\":[\n1,\t2\r],\"model\"\n:\n\"spaced\"\n}",
}

func TestRequestModel(t *testing.T) {
	for _, body := range modelCases {
		checkModel(t, []byte(body))
	}
}

func FuzzRequestModel(f *testing.F) {
	for _, body := range modelCases {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkModel(t, body) })
}

// checkModel compares requestModel with requestModelJSON on body.
func checkModel(t *testing.T, body []byte) {
	t.Helper()
	got, gotErr := requestModel(readFields(body))
	want, wantErr := requestModelJSON(body)
	var ge, we *routing.InputError
	if got != want || (gotErr == nil) != (wantErr == nil) || gotErr != nil && (!errors.As(gotErr, &ge) || !errors.As(wantErr, &we) || ge.Field != we.Field) {
		t.Errorf("%q: got %q, %v; want %q, %v", body, got, gotErr, want, wantErr)
	}
}

// BenchmarkRequestModel: the scan beside encoding/json, on a chat body.
//
// go test -run '^$' -bench RequestModel ./proxy
func BenchmarkRequestModel(b *testing.B) {
	body := []byte(`{"model":"llama-3-8b","messages":[{"role":"system","content":"You are a helpful assistant."},` +
		`{"role":"user","content":"Write a haiku about \"routers\"."}],"max_tokens":64,"temperature":0.7,"stream":false}`)
	for _, c := range []struct {
		name string
		f    func([]byte) (string, error)
	}{
		{"scan", func(b []byte) (string, error) { return requestModel(readFields(b)) }},
		{"json", requestModelJSON},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if m, err := c.f(body); m != "llama-3-8b" || err != nil {
					b.Fatal(m, err)
				}
			}
		})
	}
}

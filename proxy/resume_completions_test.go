package proxy

import (
	"strings"
	"testing"
)

// Why a /v1/completions request is not resumable, by the two-field
// decode or the whole one.
func TestParseResumableCompletionReasons(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"model":"m","prompt":"hi"}`, "text prompt"},
		{`{"model":"m","prompt":"hi","stream":true}`, "streaming"},
		{`{"model":"m","prompt":[1,2],"stream":true}`, "streaming"},
		{`{"model":"m"}`, "no prompt"},
		{`{"model":"m","prompt":["a","b"]}`, "batch request"},
		{`{"model":"m","prompt":[1,2]}`, "no return_token_ids"},
		{`{"model":"m","prompt":[1,2],"return_token_ids":true}`, ""},
		{`[1]`, "not a JSON object"},
		{`{"prompt":"hi"`, "not a JSON object"},
		{`{"prompt":[1],"n":"x"}`, "fields not understood"},
		{`{"prompt":"hi","n":"x"}`, "text prompt"}, // the first reason found
	} {
		_, got := parseResumableCompletion(readFields([]byte(tc.body)))
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.body, got, tc.want)
		}
	}
}

func BenchmarkParseResumableCompletion(b *testing.B) {
	body := []byte(`{"model":"policy","prompt":"` + strings.Repeat("once upon a time ", 8) + `","max_tokens":16,"temperature":0}`)
	b.ReportAllocs()
	for b.Loop() {
		parseResumableCompletion(readFields(body))
	}
}

// headCases hold bodies completionHead must read as encoding/json does.
var headCases = []string{
	`{"model":"m","prompt":"hi"}`,
	`{"prompt":"hi","stream":true}`,
	`{"prompt":[1,2],"stream":false}`,
	`{"prompt":[1,2],"stream":null}`,
	`{"prompt":"hi","stream":"yes"}`,
	`{"prompt":"hi","stream":1}`,
	`{"STREAM":true,"prompt":[1]}`,
	`{"stream":true,"Stream":false,"prompt":[1]}`,
	`{"stream":"x","stream":true}`,
	`{"stream":true,"stream":null}`,
	`{"Prompt":"a","prompt":[1]}`,
	`{"prompt":[1],"PROMPT":"a"}`,
	`{"prompt":null}`,
	`{"prompt":{"stream":true},"x":["stream",true]}`,
	`{"str\u0065am":true}`,
	"{\"stre\xc3\xa9m\":true}",
	`{"prompt":"hi"`,
	`{"prompt":"hi",}`,
	`[{"stream":true}]`,
	`"stream"`,
	` {"stream":true}`,
	``,
	"{\"prompt\"\n:\n\"spaced\" ,\t\"stream\" : true }",
}

func TestCompletionHead(t *testing.T) {
	for _, body := range headCases {
		checkHead(t, []byte(body))
	}
}

func FuzzCompletionHead(f *testing.F) {
	for _, body := range headCases {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkHead(t, body) })
}

// checkHead compares completionHead with completionHeadJSON on body.
func checkHead(t *testing.T, body []byte) {
	t.Helper()
	if got, want := completionHead(readFields(body)), completionHeadJSON(body); got != want {
		t.Errorf("%q: got %q, want %q", body, got, want)
	}
}

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
		_, got := parseResumableCompletion([]byte(tc.body))
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.body, got, tc.want)
		}
	}
}

func BenchmarkParseResumableCompletion(b *testing.B) {
	body := []byte(`{"model":"policy","prompt":"` + strings.Repeat("once upon a time ", 8) + `","max_tokens":16,"temperature":0}`)
	b.ReportAllocs()
	for b.Loop() {
		parseResumableCompletion(body)
	}
}

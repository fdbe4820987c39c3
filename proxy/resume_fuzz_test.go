package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/routing"
)

// Whatever a client sends, reading it for resuming never panics, and a
// request it takes has a prompt to continue from.
func FuzzParseResumable(f *testing.F) {
	for _, s := range []string{
		`{"input_ids":[1,2],"stream":true,"sampling_params":{"max_new_tokens":5,"min_new_tokens":2}}`,
		`{"text":"hi"}`, `{"input_ids":[[1],[2]]}`, `{"input_ids":null}`, `[]`, `null`, `{"sampling_params":[]}`,
		`{"model":"m","prompt":[1,2],"return_token_ids":true,"max_tokens":null,"min_tokens":3}`,
		`{"model":"m","prompt":"hi","return_token_ids":true}`, `{"prompt":[1],"return_token_ids":true,"n":2}`,
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, body string, completions bool) {
		path := "/generate"
		if completions {
			path = "/v1/completions"
		}
		rs, why := parseFor(path, readFields([]byte(body)))
		if (rs == nil) == (why == "") {
			t.Fatalf("%s %q: state %v, why %q; want exactly one", path, body, rs != nil, why)
		}
		if rs == nil {
			return
		}
		rs.ids = []int64{7}
		var cont map[string]any
		next := rs.continuation()
		if completions {
			next = rs.completionContinuation()
		}
		if err := json.Unmarshal(next, &cont); err != nil {
			t.Fatalf("%s %q: continuation %s: %v", path, body, next, err)
		}
	})
}

// Whatever an engine streams, following it never panics, and the client
// gets at most one [DONE].
func FuzzStreamBody(f *testing.F) {
	chunk := func(ids string, n int, finish string) string {
		return `data: {"text":"x","output_ids":[` + ids + `],"meta_info":{"completion_tokens":` + strings.Repeat("1", min(n, 1)) +
			`,"finish_reason":` + finish + `,"output_token_logprobs":[[-1,5,null]],"weight_version":"v"}}` + "\n\n"
	}
	for _, s := range []string{
		chunk("5", 1, "null") + chunk("5,6", 2, `{"type":"length"}`) + "data: [DONE]\n\n",
		chunk("5", 1, "null") + chunk("6", 2, `{"type":"abort"}`) + "data: [DONE]\n\n",
		chunk("5", 1, "null") + "data: {\"error\":{\"message\":\"x\"}}\n\ndata: [DONE]\n\n",
		": comment\n\ndata: [DONE]\n\n", "data: {\"output_ids\":\"x\"}\n\n", "data: {", "\n\n\n",
		"data: {\"meta_info\":{\"output_token_logprobs\":[[1]],\"finish_reason\":{\"type\":\"abort\",\"status_code\":400}}}\n\n",
	} {
		f.Add(s, 0)
		f.Add(s, 1)
	}
	f.Fuzz(func(t *testing.T, stream string, left int) {
		rs, why := parseResumable(readFields([]byte(`{"input_ids":[1],"stream":true,"sampling_params":{"max_new_tokens":4}}`)))
		if why != "" {
			t.Fatal(why)
		}
		rs.left = left % 3
		for range 2 { // the first policy's stream, then a continuation's
			a := &attempt{d: routing.Decision{Policy: routing.Policy{ID: "p", URL: "http://p"}}}
			res := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
				Body: io.NopCloser(strings.NewReader(stream))}
			if err := rs.resumeStream(res, a); err != nil {
				t.Fatalf("resumeStream: %v", err)
			}
			out, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if n := bytes.Count(out, []byte("data: [DONE]")); n > 1 {
				t.Fatalf("%d [DONE] in %q", n, out)
			}
			if rs.stream.done || !a.retry {
				return
			}
		}
	})
}

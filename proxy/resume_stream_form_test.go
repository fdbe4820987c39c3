package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/routing"
)

// formsOf is a StreamForms that knows the form of the policies it names.
type formsOf map[string]bool

func (f formsOf) IncrementalStreaming(p routing.Policy) (incremental, known bool) {
	incremental, known = f[p.ID]
	return incremental, known
}

// A stream aborted at its first chunk is continued in the form
// StreamForms gives for its first policy; unknown, cumulative. The
// continuation's own form (cumulative here) is read from its chunks,
// whatever StreamForms says of it.
func TestResumedStreamKnownForm(t *testing.T) {
	const aborted = `data: {"text":"e","output_ids":[5],"meta_info":{"completion_tokens":1,"finish_reason":{"type":"abort"}}}` + "\n\ndata: [DONE]\n\n"
	const continued = `data: {"text":"f","output_ids":[6],"meta_info":{"completion_tokens":1,"finish_reason":null}}` + "\n\n" +
		`data: {"text":"fg","output_ids":[6,7],"meta_info":{"completion_tokens":2,"finish_reason":null}}` + "\n\n" +
		`data: {"text":"fgh","output_ids":[6,7,8],"meta_info":{"completion_tokens":3,"finish_reason":{"type":"length"}}}` + "\n\ndata: [DONE]\n\n"
	for _, tt := range []struct {
		name  string
		forms StreamForms
		want  [][]int64
	}{
		{"incremental", formsOf{"p": true}, [][]int64{{5, 6}, {7}, {8}}},
		{"cumulative", formsOf{"p": false}, [][]int64{{5, 6}, {5, 6, 7}, {5, 6, 7, 8}}},
		{"unknown", formsOf{"q": false}, [][]int64{{5, 6}, {5, 6, 7}, {5, 6, 7, 8}}},
		// The info of the continuation's server says incremental, its
		// chunks' completion_tokens cumulative: they win.
		{"stale info", formsOf{"p": true, "q": true}, [][]int64{{5, 6}, {7}, {8}}},
		{"no StreamForms", nil, [][]int64{{5, 6}, {5, 6, 7}, {5, 6, 7, 8}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs, why := parseResumable(readFields([]byte(`{"input_ids":[1],"stream":true,"sampling_params":{"max_new_tokens":4}}`)))
			if why != "" {
				t.Fatal(why)
			}
			rs.left, rs.stream.forms = 1, tt.forms
			var out []byte
			for i, stream := range []string{aborted, continued} {
				id := []string{"p", "q"}[i]
				a := &attempt{d: routing.Decision{Policy: routing.Policy{ID: id, URL: "http://" + id}}}
				res := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
					Body: io.NopCloser(strings.NewReader(stream))}
				if err := rs.resumeStream(res, a); err != nil {
					t.Fatalf("resumeStream: %v", err)
				}
				b, err := io.ReadAll(res.Body)
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 && (len(b) != 0 || !a.retry) {
					t.Fatalf("the aborted stream: %q, retry %v; want it held back and continued", b, a.retry)
				}
				out = append(out, b...)
			}
			var got [][]int64
			for _, ev := range strings.Split(string(out), "\n\n") {
				data, ok := strings.CutPrefix(ev, "data: ")
				if !ok || data == "[DONE]" {
					continue
				}
				var c struct {
					OutputIDs []int64 `json:"output_ids"`
				}
				if err := json.Unmarshal([]byte(data), &c); err != nil {
					t.Fatalf("%q: %v", data, err)
				}
				got = append(got, c.OutputIDs)
			}
			if !slices.EqualFunc(got, tt.want, slices.Equal) {
				t.Errorf("the client's output_ids %v; want %v", got, tt.want)
			}
		})
	}
}

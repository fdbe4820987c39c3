package proxy

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/policyrouter/policyrouter/prefix"
	"github.com/policyrouter/policyrouter/routing"
)

// Under prefix-cache affinity the proxy hashes the prompt of each route
// into blocks, hands them to the Leaser with the request, names what the
// decision expected cached (X-Prefix-Match, in tokens or bytes) and its
// outcome, and releases the lease with the blocks and the cached tokens
// the engine reported; X-Prefix-Affinity: 0 opts out, another value is a
// 422 naming the header.
func TestPrefixAffinity(t *testing.T) {
	ids := make([]string, 40) // two whole blocks of 16, and 8 tokens more
	for i := range ids {
		ids[i] = strconv.Itoa(i + 1)
	}
	idList := "[" + strings.Join(ids, ",") + "]"
	text := strings.Repeat("abcdefgh", 20) // 160 bytes: two blocks of 64
	answer := `{"text":"ok","output_ids":[1],"meta_info":{"finish_reason":{"type":"length"},"cached_tokens":32,"completion_tokens":1}}`
	policy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(policy.Close)
	for _, tt := range []struct {
		name, path, body, header string
		resume                   bool
		blocks, match            int // the prompt's blocks, X-Prefix-Match of a decision matching 2
		cached                   bool
	}{
		{"generate ids", "/generate", `{"input_ids":` + idList + `}`, "", false, 2, 32, true},
		{"generate ids, resumable", "/generate", `{"input_ids":` + idList + `}`, "", true, 2, 32, true},
		// The engine's count is capped below what it holds: not read.
		{"generate ids, input logprobs from 0", "/generate", `{"input_ids":` + idList + `,"return_logprob":true,"logprob_start_len":0}`, "", true, 2, 32, false},
		{"generate ids, output logprobs", "/generate", `{"input_ids":` + idList + `,"return_logprob":true,"logprob_start_len":-1}`, "", false, 2, 32, true},
		{"completions ids, prompt_logprobs", "/v1/completions", `{"model":"m","prompt":` + idList + `,"prompt_logprobs":1}`, "", false, 2, 32, false},
		{"generate text", "/generate", `{"text":"` + text + `"}`, "", false, 2, 128, false},
		{"completions ids", "/v1/completions", `{"model":"m","prompt":` + idList + `}`, "", false, 2, 32, true},
		{"completions text", "/v1/completions", `{"model":"m","prompt":"` + text + `"}`, "", false, 2, 128, false},
		{"chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"` + text + `"}]}`, "", false, 3, 128, false},
		{"opted out", "/generate", `{"input_ids":` + idList + `}`, "0", false, 0, 0, false},
		{"a batch", "/generate", `{"input_ids":[` + idList + `,` + idList + `]}`, "", false, 0, 0, false},
		{"under a block", "/generate", `{"input_ids":[1,2,3]}`, "", false, 0, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := &fakeLeaser{policies: []routing.Policy{{Index: 0, ID: "p0", URL: policy.URL}}, match: 2}
			var ew errorWriter
			p := New(Config{Options: Options{PrefixAffinity: true, Resume: tt.resume}, Leaser: l, WriteError: ew.write})
			t.Cleanup(p.CloseIdleConnections)
			req := httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(tt.body))
			if tt.header != "" {
				req.Header.Set(HeaderPrefixAffinity, tt.header)
			}
			rec := httptest.NewRecorder()
			p.Forward(rec, req)
			if rec.Code != http.StatusOK || len(ew.errs) > 0 {
				t.Fatalf("answer %d %q, errors %v", rec.Code, rec.Body, ew.errs)
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			got, out := l.selects[0].Prefix, l.released[1]
			if len(got) != tt.blocks || len(out.Prefix) != tt.blocks {
				t.Fatalf("blocks to the Leaser %d, released %d; want %d", len(got), len(out.Prefix), tt.blocks)
			}
			if tt.blocks == 0 {
				if h := rec.Header().Get(HeaderPrefixMatch); h != "" {
					t.Errorf("X-Prefix-Match %q without affinity", h)
				}
				return
			}
			if h := rec.Header().Get(HeaderPrefixMatch); h != strconv.Itoa(tt.match) || rec.Header().Get(HeaderPrefixOutcome) != "hit" {
				t.Errorf("X-Prefix-Match %q, X-Prefix-Outcome %q; want %d, hit", h, rec.Header().Get(HeaderPrefixOutcome), tt.match)
			}
			if out.CachedKnown != tt.cached || (tt.cached && out.CachedTokens != 32) || out.Unfinished || out.Failure != nil {
				t.Errorf("released %+v; want the engine's 32 cached tokens known %v, over", out, tt.cached)
			}
		})
	}

	l := &fakeLeaser{policies: []routing.Policy{{Index: 0, ID: "p0", URL: policy.URL}}}
	var ew errorWriter
	p := New(Config{Options: Options{PrefixAffinity: true}, Leaser: l, WriteError: ew.write})
	req := httptest.NewRequest(http.MethodPost, "/generate", strings.NewReader(`{"input_ids":[1]}`))
	req.Header.Set(HeaderPrefixAffinity, "yes")
	p.Forward(httptest.NewRecorder(), req)
	var in *routing.InputError
	if len(ew.errs) != 1 || !errors.As(ew.errs[0], &in) || in.Field != HeaderPrefixAffinity || len(l.selects) != 0 {
		t.Errorf("X-Prefix-Affinity: yes: errors %v, %d selects; want one naming the header, none", ew.errs, len(l.selects))
	}
}

// The block hashes the proxy sends are those of package prefix, which
// the Python client computes too: the same ids, the same chain.
func TestPromptOfIsPrefixTokenHashes(t *testing.T) {
	ids := make([]int64, 48)
	for i := range ids {
		ids[i] = int64(i * 7)
	}
	body := `{"input_ids":[`
	for i, id := range ids {
		if i > 0 {
			body += ","
		}
		body += strconv.FormatInt(id, 10)
	}
	body += `]}`
	pr := promptOf("/generate", readFields([]byte(body)), nil, prefix.NewMemo(0))
	want := prefix.TokenHashes(ids, 0)
	if pr == nil || len(pr.hashes) != 3 || pr.kind != prefix.Tokens {
		t.Fatalf("prompt %+v; want 3 token blocks", pr)
	}
	for i := range want {
		if pr.hashes[i] != want[i] {
			t.Errorf("block %d: %s, want %s", i, pr.hashes[i], want[i])
		}
	}
}

// A /generate answered whole releases the blocks of prompt + output: the
// next turn of the conversation, which sends them back as its prompt's
// start, matches them. Streamed or not.
func TestPrefixRecordsTheOutput(t *testing.T) {
	prompt := make([]int64, 24) // one whole block, and 8 tokens
	output := make([]int64, 12) // which complete a second block with 4 of these
	for i := range prompt {
		prompt[i] = int64(100 + i)
	}
	for i := range output {
		output[i] = int64(900 + i)
	}
	ids := func(xs []int64) string {
		s := make([]string, len(xs))
		for i, x := range xs {
			s[i] = strconv.FormatInt(x, 10)
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	policy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		meta := `"meta_info":{"id":"x","finish_reason":{"type":"length","length":12},"completion_tokens":12,"cached_tokens":0}`
		if strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, `data: {"text":"a","output_ids":`+ids(output[:5])+`,"meta_info":{"id":"x","finish_reason":null,"completion_tokens":5}}`+"\n\n")
			_, _ = io.WriteString(w, `data: {"text":"ab","output_ids":`+ids(output)+`,`+meta+`}`+"\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"text":"ab","output_ids":`+ids(output)+`,`+meta+`}`)
	}))
	t.Cleanup(policy.Close)
	want := prefix.TokenHashes(append(slices.Clone(prompt), output...), 0)
	for _, stream := range []bool{false, true} {
		l := &fakeLeaser{policies: []routing.Policy{{Index: 0, ID: "p0", URL: policy.URL}}}
		var ew errorWriter
		p := New(Config{Options: Options{PrefixAffinity: true, Resume: true}, Leaser: l, WriteError: ew.write})
		t.Cleanup(p.CloseIdleConnections)
		body := `{"input_ids":` + ids(prompt) + `,"stream":` + strconv.FormatBool(stream) + `}`
		rec := httptest.NewRecorder()
		p.Forward(rec, httptest.NewRequest(http.MethodPost, "/generate", strings.NewReader(body)))
		l.mu.Lock()
		got := l.released[1].Prefix
		l.mu.Unlock()
		if rec.Code != http.StatusOK || !slices.Equal(got, want) {
			t.Errorf("stream %v: answer %d, released blocks %v; want %v (prompt + output)", stream, rec.Code, got, want)
		}
	}
}

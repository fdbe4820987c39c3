package fakepolicy

import (
	"bufio"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/poll"
)

// The simulated generate endpoints answer in the OpenAI and SGLang
// formats, streaming one event per token and ending with [DONE].
func TestGenerateFormats(t *testing.T) {
	f, err := New(1, rand.NewPCG(1, 2), Options{TokensPerSecond: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ids, _ := Continuation(promptTokens(nil, json.RawMessage(`"hi"`)), 5)
	wantText := Detokenize(ids)
	for _, tt := range []struct{ path, body, object string }{
		{"/v1/chat/completions", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "chat.completion"},
		{"/v1/completions", `{"model":"m","max_tokens":5,"prompt":"hi"}`, "text_completion"},
		{"/generate", `{"text":"hi","sampling_params":{"max_new_tokens":5}}`, ""},
	} {
		res, err := http.Post(f.URL(0)+tt.path, "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		var whole map[string]any
		err = json.NewDecoder(res.Body).Decode(&whole)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d, %v", tt.path, res.StatusCode, err)
		}
		if tt.object != "" && whole["object"] != tt.object {
			t.Errorf("%s: object %v; want %s", tt.path, whole["object"], tt.object)
		}
		if tt.object == "" && (whole["text"] != wantText || whole["meta_info"] == nil) {
			t.Errorf("/generate: %v; want the text and meta_info", whole)
		}

		stream := strings.Replace(tt.body, "{", `{"stream":true,`, 1)
		res, err = http.Post(f.URL(0)+tt.path, "application/json", strings.NewReader(stream))
		if err != nil {
			t.Fatal(err)
		}
		if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("%s stream: Content-Type %q", tt.path, ct)
		}
		var events []string
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "data: ") {
				events = append(events, strings.TrimPrefix(line, "data: "))
			}
		}
		res.Body.Close()
		if len(events) != 6 || events[5] != "[DONE]" {
			t.Fatalf("%s stream: %d events %q; want 5 then [DONE]", tt.path, len(events), events)
		}
		var last map[string]any
		if err := json.Unmarshal([]byte(events[4]), &last); err != nil {
			t.Fatal(err)
		}
		if tt.object == "" && last["text"] != wantText {
			t.Errorf("/generate stream: last text %v; want the cumulative text", last["text"])
		}
	}
}

// An abort pause ends the generations in flight of a simulated engine at
// once, with finish reason "abort": streamed and not.
func TestAbortEndsGenerations(t *testing.T) {
	f, err := New(1, rand.NewPCG(1, 2), Options{Engine: EngineSGLang, TokensPerSecond: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type result struct {
		body string
		err  error
	}
	results := make(chan result, 2)
	for _, body := range []string{
		`{"text":"hi","stream":true,"sampling_params":{"max_new_tokens":100}}`,
		`{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		path := "/generate"
		if strings.Contains(body, "messages") {
			path = "/v1/chat/completions"
		}
		go func() {
			res, err := http.Post(f.URL(0)+path, "application/json", strings.NewReader(body))
			if err != nil {
				results <- result{err: err}
				return
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			results <- result{string(b), err}
		}()
	}
	for f.Policy(0).Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(120 * time.Millisecond) // a few tokens
	res, err := http.Post(f.URL(0)+"/pause_generation", "application/json", strings.NewReader(`{"mode":"abort"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	for range 2 {
		select {
		case r := <-results:
			if r.err != nil {
				t.Fatal(r.err)
			}
			if !strings.Contains(r.body, `"abort"`) {
				t.Errorf("answer after an abort pause: %s; want finish reason abort", r.body)
			}
		case <-time.After(2 * time.Second): // 100 tokens at 20/s would take 5 s
			t.Fatal("the generations did not end at the abort")
		}
	}
}

// A keep pause (SGLang in_place) freezes a stream as it freezes other
// work: no token while paused, the rest after the resume.
func TestInPlacePauseFreezesStreams(t *testing.T) {
	f, err := New(1, rand.NewPCG(1, 2), Options{Engine: EngineSGLang, TokensPerSecond: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := http.Post(f.URL(0)+"/generate", "application/json",
		strings.NewReader(`{"text":"hi","stream":true,"sampling_params":{"max_new_tokens":20}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var mu sync.Mutex
	events, done := 0, make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: {") {
				mu.Lock()
				events++
				mu.Unlock()
			}
		}
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return events }
	poll.Until(t, "the first token", func() bool { return count() > 0 })
	post(t, f.URL(0)+"/pause_generation", `{"mode": "in_place"}`)
	paused := count()
	time.Sleep(300 * time.Millisecond) // 30 tokens' time at 100/s
	// The token being made when the pause came may still arrive.
	if got := count(); got > paused+1 {
		t.Errorf("%d tokens streamed while paused", got-paused)
	}
	post(t, f.URL(0)+"/continue_generation", "{}")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end after the resume")
	}
	if got := count(); got != 20 {
		t.Errorf("%d tokens streamed; want all 20", got)
	}
}

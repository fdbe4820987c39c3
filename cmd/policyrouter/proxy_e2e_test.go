package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/prereq"
)

// TestOpenAINodeSDKStreamsThroughProxy streams a chat completion through
// the real binary's proxy mode with the official OpenAI SDK for Node
// (clients/node, installed by .ci/run), with JWT auth on: the SDK's
// bearer token is the router's route token, which the backend must never
// see. The backend is written here from the OpenAI chunk format.
func TestOpenAINodeSDKStreamsThroughProxy(t *testing.T) {
	dir, _ := filepath.Abs("../../clients/node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		prereq.Missing(t, "the OpenAI SDK is not installed in %s (npm ci --prefix clients/node): %v", dir, err)
	}
	var mu sync.Mutex
	var seen []string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" auth="+r.Header.Get("Authorization"))
		mu.Unlock()
		if r.URL.Path == "/idle" {
			w.Write([]byte(`{"idle": true}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, tok := range []string{"Hel", "lo", "!"} {
			w.Write([]byte(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"` + tok + `"},"finish_reason":null}]}` + "\n\n"))
			w.(http.Flusher).Flush()
			time.Sleep(10 * time.Millisecond)
		}
		w.Write([]byte("data: [DONE]\n\n"))
	}))
	defer backend.Close()

	secret := strings.Repeat("k", 40)
	p := start(t, []string{"POLICYROUTER_JWT_SECRET=" + secret}, "serve", "--addr", "127.0.0.1:0", "--poll-interval", "50ms")
	mint := func(scope string) string {
		out, err := exec.Command(binary, "token", "--jwt-secret", secret, "--scope", scope, "--ttl", "1h").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	admin, route := mint("admin"), mint("route")
	base := "http://" + p.addr
	if code, body := post(t, base+"/policies", admin, `{"url":"`+backend.URL+`","capacity":4}`); code != 201 {
		t.Fatalf("register: %d %s", code, body)
	}
	node := exec.Command("node", "stream_chat.mjs", base, route)
	node.Dir = dir
	out, err := node.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s\nrouter log:\n%s", err, out, p.stderr)
	}
	if got, want := string(out), "chunk Hel\nchunk lo\nchunk !\ndone 0 3\n"; got != want {
		t.Errorf("the SDK printed %q; want %q", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if strings.Contains(s, route) || strings.Contains(s, "Bearer") {
			t.Errorf("the backend saw the router's token: %s", s)
		}
	}
	if !slices.Contains(seen, "POST /v1/chat/completions auth=") {
		t.Errorf("backend saw %v; want the chat completion without Authorization", seen)
	}
}

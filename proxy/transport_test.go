package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/policyrouter/policyrouter/routing"
)

// The policy receives the client's request as sent: the body whole, the
// router's token replaced by the policy's key, no Accept-Encoding added
// (so that no answer is decompressed on its way through), and the answer
// comes back with the policy's headers.
func TestForwardSendsTheRequestAsIs(t *testing.T) {
	type seen struct {
		body, auth string
		encoding   []string
	}
	var mu sync.Mutex
	var got []seen
	policy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{string(b), r.Header.Get("Authorization"), r.Header["Accept-Encoding"]})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"text":"ok"}`)
	}))
	defer policy.Close()
	l := &fakeLeaser{policies: []routing.Policy{{Index: 130, ID: "p-130", URL: policy.URL}}}
	var ew errorWriter
	p := New(Config{Leaser: l, WriteError: ew.write, Options: Options{APIKey: func(routing.Policy) string { return "engine-key" }}})
	defer p.CloseIdleConnections()

	body := `{"model":"m","prompt":"` + strings.Repeat("x", 10_000) + `"}`
	for _, encoding := range []string{"", "gzip"} {
		req := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer router-token")
		if encoding != "" {
			req.Header.Set("Accept-Encoding", encoding)
		}
		rec := httptest.NewRecorder()
		p.Forward(rec, req)
		if rec.Code != http.StatusOK || rec.Body.String() != `{"text":"ok"}` || rec.Header().Get(HeaderPolicyIndex) != "130" ||
			rec.Header().Get(HeaderPolicyID) != "p-130" || rec.Header().Get(HeaderWeightVersion) != "7" {
			t.Fatalf("answer %d %q, headers %v", rec.Code, rec.Body, rec.Header())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("the policy saw %d requests, want 2", len(got))
	}
	for i, want := range [][]string{nil, {"gzip"}} {
		g := got[i]
		if g.body != body || g.auth != "Bearer engine-key" || strings.Join(g.encoding, ",") != strings.Join(want, ",") {
			t.Errorf("request %d: body of %d bytes (want %d), Authorization %q, Accept-Encoding %q (want %q)",
				i, len(g.body), len(body), g.auth, g.encoding, want)
		}
	}
}

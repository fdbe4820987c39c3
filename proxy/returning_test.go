package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/routing"
)

// The fake Leaser of these tests takes no policy out of routing itself.
func (l *fakeLeaser) Returning(context.Context, string) (time.Time, bool) { return time.Time{}, false }

// returningLeaser is a fakeLeaser whose policies the router took out
// (Returning says they come back by until) when back is set, and whose
// every policy reads unavailable once one aborted: every engine paused
// at once, as a whole-fleet update or sleep does.
type returningLeaser struct {
	*fakeLeaser
	back    bool
	aborted atomic.Bool

	mu    sync.Mutex
	asked []string // Returning's policy ids
}

func (l *returningLeaser) Returning(_ context.Context, id string) (time.Time, bool) {
	l.mu.Lock()
	l.asked = append(l.asked, id)
	l.mu.Unlock()
	if !l.back {
		return time.Time{}, false
	}
	return time.Now().Add(time.Hour), true
}

func (l *returningLeaser) Available(ctx context.Context) ([]routing.Policy, error) {
	if l.aborted.Load() {
		return nil, nil
	}
	return l.fakeLeaser.Available(ctx)
}

// abortOnceEngine answers its first /generate aborted after 3 tokens and
// any later one (the continuation, which must send the 3 tokens on) with
// the 2 left of max_new_tokens 5.
func abortOnceEngine(t *testing.T, l *returningLeaser) *httptest.Server {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			InputIDs []int64 `json:"input_ids"`
			Sampling struct {
				MaxNewTokens int `json:"max_new_tokens"`
			} `json:"sampling_params"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if n.Add(1) == 1 {
			l.aborted.Store(true)
			_, _ = io.WriteString(w, `{"text":"abc","output_ids":[1,2,3],"meta_info":{"id":"a","prompt_tokens":2,"completion_tokens":3,`+
				`"weight_version":"1","finish_reason":{"type":"abort","message":"paused"}}}`)
			return
		}
		if len(req.InputIDs) != 5 || req.Sampling.MaxNewTokens != 2 {
			http.Error(w, "not the continuation: "+string(b), http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, `{"text":"de","output_ids":[4,5],"meta_info":{"id":"b","prompt_tokens":5,"completion_tokens":2,`+
			`"weight_version":"2","finish_reason":{"type":"length","length":2}}}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A generation aborted by a policy the router took out, with no other
// policy to go on, waits for that policy to return and completes whole
// on it; one aborted by a policy the router did not take out (a
// framework's own abort) ends at once with the tokens so far.
func TestResumeWaitsOnlyForReturningPolicies(t *testing.T) {
	for _, tt := range []struct {
		name       string
		back       bool
		wantResume string
		wantText   string
		selects    int
	}{
		{name: "router's pause", back: true, wantResume: "resumed", wantText: "abcde", selects: 2},
		{name: "framework's abort", back: false, wantResume: "incomplete (answered 200; no other policy available)", wantText: "abc", selects: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := &returningLeaser{fakeLeaser: &fakeLeaser{}, back: tt.back}
			srv := abortOnceEngine(t, l)
			l.policies = []routing.Policy{{Index: 0, ID: "p0", URL: srv.URL}}
			var ew errorWriter
			p := New(Config{Options: Options{Retries: 2, Resume: true}, Leaser: l, WriteError: ew.write, DefaultSelectWait: time.Second})
			t.Cleanup(p.CloseIdleConnections)
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/generate", strings.NewReader(`{"input_ids":[7,8],"sampling_params":{"max_new_tokens":5}}`))
			p.Forward(rec, req)

			var got struct {
				Text      string  `json:"text"`
				OutputIDs []int64 `json:"output_ids"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK {
				t.Fatalf("answer %d %s: %v", rec.Code, rec.Body, err)
			}
			if got.Text != tt.wantText || rec.Header().Get(HeaderResume) != tt.wantResume {
				t.Errorf("text %q, X-Resume %q; want %q, %q", got.Text, rec.Header().Get(HeaderResume), tt.wantText, tt.wantResume)
			}
			l.mu.Lock()
			asked := l.asked
			l.mu.Unlock()
			l.fakeLeaser.mu.Lock()
			defer l.fakeLeaser.mu.Unlock()
			if len(l.selects) != tt.selects || len(asked) != 1 || asked[0] != "p0" {
				t.Fatalf("selects %+v, Returning asked for %v; want %d selects, one question for p0", l.selects, asked, tt.selects)
			}
			if tt.back {
				// The wait is the operation's bound, not the request's, and
				// the policy that aborted may serve the continuation.
				if s := l.selects[1]; len(s.Exclude) != 0 || s.Wait <= time.Second || s.StickyWait > s.Wait || !s.AwaitReturn {
					t.Errorf("the continuation's select %+v; want no exclusion and a wait past the select timeout", s)
				}
			}
		})
	}
}

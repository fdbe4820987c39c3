package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/policyrouter/policyrouter/routing"
)

// fakeLeaser hands out its policies in order, skipping the excluded ones,
// and records what the proxy asks of it: the Leaser contract as a remote
// implementation sees it, without a routing.State.
type fakeLeaser struct {
	policies []routing.Policy
	err      error // Select's answer when set
	match    int   // the decisions' PrefixMatch, when the request has a prefix

	mu       sync.Mutex
	next     uint64
	selects  []Request
	released map[uint64]Outcome
}

var _ Leaser = (*fakeLeaser)(nil)

func (l *fakeLeaser) Select(_ context.Context, req Request) (routing.Decision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.selects = append(l.selects, req)
	if l.err != nil {
		return routing.Decision{}, l.err
	}
	for _, p := range l.policies {
		if !slices.Contains(req.Exclude, p.ID) {
			l.next++
			d := routing.Decision{Policy: p, Lease: l.next, LeaseID: strconv.FormatUint(l.next, 10), Version: 7}
			if req.Prefix != nil {
				d.PrefixMatch, d.PrefixOutcome = l.match, "hit"
			}
			return d, nil
		}
	}
	return routing.Decision{}, routing.ErrAllExcluded
}

func (l *fakeLeaser) Release(_ context.Context, d routing.Decision, out Outcome) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.released[d.Lease]; ok {
		return errors.New("lease " + d.LeaseID + " released twice")
	}
	if l.released == nil {
		l.released = make(map[uint64]Outcome)
	}
	l.released[d.Lease] = out
	return nil
}

func (l *fakeLeaser) Available(context.Context) ([]routing.Policy, error) { return l.policies, nil }

func (l *fakeLeaser) ServedModels(context.Context) ([]string, error) { return nil, nil }

// errorWriter records what the proxy asked WriteError to answer.
type errorWriter struct {
	mu   sync.Mutex
	errs []error
}

func (e *errorWriter) write(w http.ResponseWriter, _ *http.Request, err error) {
	e.mu.Lock()
	e.errs = append(e.errs, err)
	e.mu.Unlock()
	http.Error(w, err.Error(), http.StatusServiceUnavailable)
}

// A policy that refuses connections is retried on the next one: each
// attempt is one Select and one Release, the failed one's with its
// failure, and the retry excludes the policy that failed.
func TestForwardLeasesEachAttempt(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/generate" || r.Header.Get("Authorization") != "Bearer key-1" {
			http.Error(w, "wrong request: "+r.URL.Path+" "+r.Header.Get("Authorization"), http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, `{"text":"ok"}`)
	}))
	t.Cleanup(good.Close)
	l := &fakeLeaser{policies: []routing.Policy{{Index: 0, ID: "p0", URL: dead.URL}, {Index: 1, ID: "p1", URL: good.URL}}}
	var ew errorWriter
	p := New(Config{Options: Options{Retries: 1, APIKey: func(p routing.Policy) string { return "key-" + strconv.Itoa(p.Index) }},
		Leaser: l, WriteError: ew.write})
	t.Cleanup(p.CloseIdleConnections)

	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/generate", strings.NewReader(`{"text":"hi"}`))
	req.Header.Set(HeaderEnvID, "env-3")
	p.Forward(rec, req)

	if rec.Code != http.StatusOK || rec.Body.String() != `{"text":"ok"}` || rec.Header().Get(HeaderPolicyIndex) != "1" ||
		rec.Header().Get(HeaderPolicyID) != "p1" || rec.Header().Get(HeaderWeightVersion) != "7" {
		t.Fatalf("answer %d %q, headers %v; want 200 from p1 at version 7", rec.Code, rec.Body, rec.Header())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.selects) != 2 || l.selects[0].EnvID != "env-3" || l.selects[0].Route != "/generate" ||
		!slices.Equal(l.selects[1].Exclude, []string{"p0"}) {
		t.Errorf("selects %+v; want two for env-3 on /generate, the second excluding p0", l.selects)
	}
	// Neither is unfinished: the first request never reached p0, and p1's
	// answer was read to its end.
	if o, ok := l.released[1]; !ok || o.Failure == nil || !strings.Contains(o.Failure.Reason, "connect") || o.Unfinished {
		t.Errorf("lease 1 (p0): released %v, %+v; want released finished, with a connect failure", ok, o)
	}
	if o, ok := l.released[2]; !ok || o.Failure != nil || o.Unfinished {
		t.Errorf("lease 2 (p1): released %v, %+v; want released finished, without failure", ok, o)
	}
	if len(ew.errs) != 0 {
		t.Errorf("WriteError called with %v; want never", ew.errs)
	}
}

// The Leaser's errors are the proxy's answers, through WriteError, and
// nothing is released that was not leased.
func TestForwardWritesLeaserErrors(t *testing.T) {
	l := &fakeLeaser{err: routing.ErrNoPolicies}
	var ew errorWriter
	p := New(Config{Leaser: l, WriteError: ew.write})
	rec := httptest.NewRecorder()
	p.Forward(rec, httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(`{"model":"m","prompt":"hi"}`)))
	if len(ew.errs) != 1 || !errors.Is(ew.errs[0], routing.ErrNoPolicies) || rec.Code != http.StatusServiceUnavailable {
		t.Errorf("WriteError got %v, answer %d; want routing.ErrNoPolicies once, 503", ew.errs, rec.Code)
	}
	if len(l.selects) != 1 || l.selects[0].Model != "m" || len(l.released) != 0 {
		t.Errorf("selects %+v, released %v; want one for model m, none released", l.selects, l.released)
	}
}

package poller

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/routing"
)

// fakeClock is a time that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// A window counts the probes of the last Window, to within a bucket:
// probes a whole Window old are gone, the later ones stay.
func TestProbeWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	var w probeWindow
	w.add(t0, false)
	w.add(t0, true)
	w.add(t0.Add(time.Second), false)
	w.add(t0.Add(2*time.Minute), true)
	for _, tt := range []struct {
		at   time.Duration
		want ProbeCounts
	}{
		{0, ProbeCounts{Probes: 3, Failures: 1}}, // t0 and t0+1s share a bucket
		{time.Minute, ProbeCounts{Probes: 3, Failures: 1}},
		{Window - bucketWidth, ProbeCounts{Probes: 4, Failures: 2}},
		{Window + bucketWidth, ProbeCounts{Probes: 1, Failures: 1}},
		{2*time.Minute + Window + bucketWidth, ProbeCounts{}},
	} {
		if got := w.counts(t0.Add(tt.at)); got != tt.want {
			t.Errorf("counts at t0+%v = %+v; want %+v", tt.at, got, tt.want)
		}
	}
	// A bucket reused a Window later starts again from 0.
	w.add(t0.Add(Window), false)
	if got := w.counts(t0.Add(Window)); got != (ProbeCounts{Probes: 2, Failures: 1}) {
		t.Errorf("after reusing t0's bucket: %+v; want the probe at 2m and the new one", got)
	}
	// A clock before 1970 does not index outside the buckets.
	w.add(time.Unix(-1, 0), false)
}

// The poller's recent counts, overall and per policy, follow its clock:
// equal to the lifetime counts while every probe is recent, none once the
// clock is a Window further, while the lifetime counts stay.
func TestPollerRecentProbes(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"idle": true}`)
	}))
	defer ok.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer failing.Close()
	st := routing.New(routing.Options{})
	register(t, st, ok.URL, failing.URL)
	clock := &fakeClock{now: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
	p := New(st, Config{Interval: 5 * time.Millisecond, Logger: discard(), Now: clock.Now})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	poll.Until(t, "a few probes of each policy", func() bool { return p.RecentProbes("p1").Probes >= 3 && p.RecentProbes("p0").Probes >= 3 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}

	s := p.Stats()
	if s.Recent != (ProbeCounts{Probes: s.ProbesTotal, Failures: s.FailuresTotal}) || s.FailuresTotal == 0 {
		t.Errorf("recent %+v; want the lifetime counts %d (%d failed), some failed", s.Recent, s.ProbesTotal, s.FailuresTotal)
	}
	p0, p1 := p.RecentProbes("p0"), p.RecentProbes("p1")
	if p0.Failures != 0 || p1.Failures != p1.Probes || p0.Probes+p1.Probes != s.ProbesTotal {
		t.Errorf("p0 %+v, p1 %+v; want p0 never failing, p1 always, %d probes between them", p0, p1, s.ProbesTotal)
	}
	if got := p.RecentProbes("p9"); got != (ProbeCounts{}) {
		t.Errorf("an unknown policy: %+v; want none", got)
	}

	clock.Add(Window + bucketWidth)
	if s2 := p.Stats(); s2.Recent != (ProbeCounts{}) || s2.ProbesTotal != s.ProbesTotal || s2.FailuresTotal != s.FailuresTotal {
		t.Errorf("a Window later: recent %+v, lifetime %d (%d failed); want none recent, the lifetime counts unchanged", s2.Recent, s2.ProbesTotal, s2.FailuresTotal)
	}
	if got := p.RecentProbes("p1"); got != (ProbeCounts{}) {
		t.Errorf("p1 a Window later: %+v; want none", got)
	}
}

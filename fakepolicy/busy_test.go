package fakepolicy

import (
	"math"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/fakeclock"
)

func TestBusyLedger(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type item struct{ start, end float64 }
	tests := []struct {
		name  string
		items []item
		now   float64
		want  time.Duration
	}{
		{"nothing", nil, 5, 0},
		{"one item, done", []item{{0, 2}}, 5, 2 * time.Second},
		{"one item, in progress", []item{{0, 2}}, 1.5, 1500 * time.Millisecond},
		{"before the first start", []item{{1, 2}}, 0.5, 0},
		{"overlapping items count once", []item{{0, 2}, {1, 3}}, 5, 3 * time.Second},
		{"nested item", []item{{0, 4}, {1, 2}}, 5, 4 * time.Second},
		{"gap between periods", []item{{0, 1}, {2, 3}}, 5, 2 * time.Second},
		{"back to back", []item{{0, 1}, {1, 2}}, 5, 2 * time.Second},
		{"queued item not started yet", []item{{0, 1}, {1, 2}}, 0.5, 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b busyLedger
			for _, it := range tt.items {
				b.add(at(it.start), at(it.end))
			}
			if got := b.at(at(tt.now)); got != tt.want {
				t.Errorf("busy at %gs = %v, want %v", tt.now, got, tt.want)
			}
		})
	}
}

func TestBusyTimeFollowsTheClock(t *testing.T) {
	clk := fakeclock.New()
	f := newFleet(t, 2, Options{Now: clk.Now})
	p := f.Policy(0)
	p.StartWorkFor(time.Second)
	p.StartWorkFor(500 * time.Millisecond) // side by side: counts once
	clk.Advance(300 * time.Millisecond)
	if got, want := p.BusyTime(), 300*time.Millisecond; got != want {
		t.Errorf("busy after 300ms = %v, want %v", got, want)
	}
	clk.Advance(2 * time.Second)
	if got, want := f.BusyTimes(), []time.Duration{time.Second, 0}; !slices.Equal(got, want) {
		t.Errorf("BusyTimes = %v, want %v", got, want)
	}
}

func TestSerialQueuesWork(t *testing.T) {
	clk := fakeclock.New()
	f := newFleet(t, 1, Options{Now: clk.Now, Serial: true})
	p := f.Policy(0)
	p.StartWorkFor(time.Second)
	p.StartWorkFor(time.Second) // starts when the first ends
	clk.Advance(1500 * time.Millisecond)
	if got, want := p.Load(), 1; got != want {
		t.Errorf("load after 1.5s = %d, want %d", got, want)
	}
	if got, want := p.BusyTime(), 1500*time.Millisecond; got != want {
		t.Errorf("busy after 1.5s = %v, want %v", got, want)
	}
	clk.Advance(time.Second)
	if got, want := p.BusyTime(), 2*time.Second; got != want {
		t.Errorf("busy after 2.5s = %v, want %v", got, want)
	}
}

// TestSerialGenerateWaitsItsTurn sends two /generate at once to a serial
// policy: the second answers only after both items' work, so the policy's
// busy time covers both and the two calls together take at least as long.
func TestSerialGenerateWaitsItsTurn(t *testing.T) {
	const work = 50 * time.Millisecond
	f := newFleet(t, 1, Options{MinWork: work, MaxWork: work, Serial: true})
	start := time.Now()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			resp, err := http.Post(f.URL(0)+"/generate", "application/json", nil)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		})
	}
	wg.Wait()
	if took := time.Since(start); took < 2*work {
		t.Errorf("two serial generations of %v took %v, want at least %v", work, took, 2*work)
	}
	if got := f.Policy(0).BusyTime(); got != 2*work {
		t.Errorf("busy time %v, want %v", got, 2*work)
	}
}

func TestLogNormalWork(t *testing.T) {
	const median = 100 * time.Millisecond
	f := newFleet(t, 1, Options{GenMedian: median, GenSigma: 0.5})
	const n = 4001
	d := make([]time.Duration, n)
	for i := range d {
		d[i] = f.workDuration()
	}
	slices.Sort(d)
	// The sample median of 4001 draws is within 5% of the median with
	// overwhelming probability (and the source is seeded, so it is fixed).
	if got := d[n/2]; math.Abs(float64(got-median)) > 0.05*float64(median) {
		t.Errorf("sample median %v, want about %v", got, median)
	}
	// sigma 0.5: the 84th percentile is about median * e^0.5.
	if got, want := float64(d[n*84/100]), float64(median)*math.Exp(0.5); math.Abs(got-want) > 0.1*want {
		t.Errorf("84th percentile %v, want about %v", time.Duration(got), time.Duration(want))
	}
	if _, err := New(1, nil, Options{GenMedian: median, GenSigma: -1}); err == nil {
		t.Error("negative GenSigma accepted")
	}
}

func TestUniformWorkStaysTheDefault(t *testing.T) {
	f := newFleet(t, 1, Options{MinWork: 10 * time.Millisecond, MaxWork: 20 * time.Millisecond})
	for range 1000 {
		if d := f.workDuration(); d < 10*time.Millisecond || d > 20*time.Millisecond {
			t.Fatalf("work %v outside [10ms, 20ms]", d)
		}
	}
}

package fakepolicy

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/internal/fakeclock"
)

// post sends an engine control call and checks it answers 200.
func post(tb testing.TB, url, body string) {
	tb.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("POST %s: %d", url, resp.StatusCode)
	}
}

// TestPauseFreezesWork pauses a simulated engine in each mode that keeps
// the work in flight, for 1 s of the fleet's clock in the middle of a 100
// ms item: the item ends 1 s later than it would have, and the pause does
// not count as busy time.
func TestPauseFreezesWork(t *testing.T) {
	tests := []struct {
		engine, pause, resume, body string
	}{
		{EngineSGLang, "/pause_generation", "/continue_generation", `{"mode": "in_place"}`},
		{EngineSGLang, "/pause_generation", "/continue_generation", `{"mode": "retract"}`},
		{EngineVLLM, "/pause?mode=keep", "/resume", ""},
	}
	for _, tt := range tests {
		t.Run(tt.engine+tt.body+tt.pause, func(t *testing.T) {
			clk := fakeclock.New()
			f := newFleet(t, 1, Options{Now: clk.Now, Engine: tt.engine})
			p := f.Policy(0)
			p.StartWorkFor(100 * time.Millisecond)
			clk.Advance(40 * time.Millisecond)
			post(t, p.URL()+tt.pause, tt.body)
			clk.Advance(time.Second)
			if got, want := p.BusyTime(), 40*time.Millisecond; got != want {
				t.Errorf("busy while paused = %v, want %v", got, want)
			}
			if got, want := p.Load(), 1; got != want {
				t.Errorf("load while paused = %d, want %d", got, want)
			}
			post(t, p.URL()+tt.resume, "{}")
			clk.Advance(50 * time.Millisecond) // 90 ms of its 100 done
			if got, want := p.Load(), 1; got != want {
				t.Errorf("load 50 ms after the resume = %d, want %d: the item ran on while paused", got, want)
			}
			clk.Advance(20 * time.Millisecond)
			if got, want := p.Load(), 0; got != want {
				t.Errorf("load 70 ms after the resume = %d, want %d", got, want)
			}
			if got, want := p.BusyTime(), 100*time.Millisecond; got != want {
				t.Errorf("busy at the end = %v, want %v", got, want)
			}
		})
	}
}

// TestAbortEndsBusyTime aborts a 100 ms item after 30 ms: the policy was
// busy 30 ms, not the item's whole length.
func TestAbortEndsBusyTime(t *testing.T) {
	clk := fakeclock.New()
	f := newFleet(t, 1, Options{Now: clk.Now, Engine: EngineSGLang})
	p := f.Policy(0)
	p.StartWorkFor(100 * time.Millisecond)
	clk.Advance(30 * time.Millisecond)
	post(t, p.URL()+"/pause_generation", `{"mode": "abort"}`)
	clk.Advance(time.Second)
	if got, want := p.BusyTime(), 30*time.Millisecond; got != want {
		t.Errorf("busy = %v, want %v", got, want)
	}
}

// TestPausedHoldsNewWork sends a generation to a paused engine: it does
// not start (the policy stays idle) until the resume.
func TestPausedHoldsNewWork(t *testing.T) {
	f := newFleet(t, 1, Options{Engine: EngineSGLang, MinWork: time.Millisecond, MaxWork: time.Millisecond})
	p := f.Policy(0)
	post(t, p.URL()+"/pause_generation", `{"mode": "abort"}`)
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Post(p.URL()+"/generate", "application/json", strings.NewReader(`{}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	// The generation is held: no work item has been given yet. (This
	// would read 1 if the gate let it through, however long it waited.)
	for range 20 {
		if p.Works() != 0 {
			t.Fatal("a generation started on a paused engine")
		}
		time.Sleep(time.Millisecond)
	}
	post(t, p.URL()+"/continue_generation", "{}")
	<-done
	if got, want := p.Works(), uint64(1); got != want {
		t.Errorf("works after the resume = %d, want %d", got, want)
	}
}

package fakepolicy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/policyrouter/policyrouter/internal/fakeclock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newFleet(tb testing.TB, n int, opts Options) *Fleet {
	tb.Helper()
	f, err := New(n, rand.NewPCG(7, 7), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := f.Close(); err != nil {
			tb.Error(err)
		}
	})
	return f
}

// do sends one request and returns the status and body; a transport error
// fails the test.
func do(tb testing.TB, c *http.Client, method, url string) (int, string) {
	tb.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func TestWorkMakesBusy(t *testing.T) {
	for _, perPolicy := range []bool{false, true} {
		t.Run(map[bool]string{false: "shared", true: "per-policy"}[perPolicy], func(t *testing.T) {
			clk := fakeclock.New()
			f := newFleet(t, 3, Options{PerPolicyListeners: perPolicy, MinWork: time.Second, MaxWork: 2 * time.Second, Now: clk.Now})
			c := &http.Client{}
			defer c.CloseIdleConnections()

			if got, want := f.Len(), 3; got != want {
				t.Fatalf("Len() = %d, want %d", got, want)
			}
			if !perPolicy && !strings.HasSuffix(f.URL(2), "/p/2") {
				t.Errorf("URL(2) = %q, want suffix /p/2", f.URL(2))
			}
			if perPolicy && f.URL(0) == f.URL(1) {
				t.Errorf("per-policy URLs are equal: %q", f.URL(0))
			}
			if code, body := do(t, c, "GET", f.URL(1)+"/idle"); code != 200 || body != `{"idle":true,"load":0}` {
				t.Fatalf("idle before work: %d %s", code, body)
			}
			code, body := do(t, c, "POST", f.URL(1)+"/work")
			if code != http.StatusAccepted {
				t.Fatalf("POST /work: %d %s", code, body)
			}
			var wb workBody
			if err := json.Unmarshal([]byte(body), &wb); err != nil {
				t.Fatal(err)
			}
			if wb.Index != 1 || wb.Load != 1 || wb.BusyMS < 1000 || wb.BusyMS > 2000 {
				t.Errorf("POST /work answer = %+v", wb)
			}
			f.Policy(1).StartWorkFor(5 * time.Second)
			if code, body := do(t, c, "GET", f.URL(1)+"/idle"); code != 200 || body != `{"idle":false,"load":2}` {
				t.Fatalf("idle during work: %d %s", code, body)
			}
			if code, body := do(t, c, "GET", f.URL(0)+"/idle"); body != `{"idle":true,"load":0}` {
				t.Fatalf("other policy: %d %s", code, body)
			}
			clk.Advance(2 * time.Second)
			if got, want := f.Policy(1).Load(), 1; got != want {
				t.Errorf("load after 2s = %d, want %d", got, want)
			}
			clk.Advance(3 * time.Second)
			if !f.Policy(1).Idle() {
				t.Errorf("policy busy after its work ended")
			}
			if got, want := f.Policy(1).Probes(), uint64(2); got != want {
				t.Errorf("Probes() = %d, want %d", got, want)
			}
			if got, want := f.Policy(1).Works(), uint64(2); got != want {
				t.Errorf("Works() = %d, want %d", got, want)
			}
			if got, want := f.Probes(), uint64(3); got != want {
				t.Errorf("fleet Probes() = %d, want %d", got, want)
			}
			open, accepted := f.Conns()
			if want := map[bool]int{false: 1, true: 2}[perPolicy]; open != want || accepted != uint64(want) {
				t.Errorf("Conns() = %d open, %d accepted; want %d, %d (keep-alive)", open, accepted, want, want)
			}
		})
	}
}

func TestModes(t *testing.T) {
	f := newFleet(t, 1, Options{})
	c := &http.Client{}
	defer c.CloseIdleConnections()
	p := f.Policy(0)
	tests := []struct {
		mode     Mode
		wantCode int
		wantBody string
	}{
		{ModeNormal, 200, `{"idle":true,"load":0}`},
		{ModeBare, 200, `true`},
		{ModeFail, 500, `{"error":"simulated failure"}`},
		{ModeGarbage, 200, `<html>not an idle answer</html>`},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			p.SetMode(tt.mode)
			if got := p.Mode(); got != tt.mode {
				t.Fatalf("Mode() = %v, want %v", got, tt.mode)
			}
			code, body := do(t, c, "GET", p.URL()+"/idle")
			if code != tt.wantCode || body != tt.wantBody {
				t.Errorf("GET /idle = %d %q, want %d %q", code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
	t.Run("bare busy", func(t *testing.T) {
		p.SetMode(ModeBare)
		p.StartWorkFor(time.Hour)
		if code, body := do(t, c, "GET", p.URL()+"/idle"); code != 200 || body != "false" {
			t.Errorf("GET /idle = %d %q, want 200 false", code, body)
		}
	})
}

func TestFlap(t *testing.T) {
	f := newFleet(t, 1, Options{FlapProbes: 2})
	c := &http.Client{}
	defer c.CloseIdleConnections()
	f.Policy(0).SetMode(ModeFlap)
	var got []int
	for range 7 {
		code, _ := do(t, c, "GET", f.URL(0)+"/idle")
		got = append(got, code)
	}
	want := []int{200, 200, 500, 500, 200, 200, 500}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("flap statuses = %v, want %v", got, want)
		}
	}
}

func TestHangAndDelay(t *testing.T) {
	f := newFleet(t, 2, Options{PerPolicyListeners: true})
	c := &http.Client{}
	defer c.CloseIdleConnections()

	f.Policy(0).SetMode(ModeHang)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.URL(0)+"/idle", nil)
	if resp, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		if resp != nil {
			resp.Body.Close()
		}
		t.Errorf("hung policy: err = %v, want deadline exceeded", err)
	}

	// A slow answer still comes, and takes at least the delay.
	f.Policy(1).SetDelay(20 * time.Millisecond)
	start := time.Now()
	if code, body := do(t, c, "GET", f.URL(1)+"/idle"); code != 200 || body != `{"idle":true,"load":0}` {
		t.Errorf("slow policy: %d %q", code, body)
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Errorf("slow policy answered in %v, before its 20ms delay", took)
	}
}

func TestCloseEndsHungRequests(t *testing.T) {
	f, err := New(2, nil, Options{MinWork: time.Hour, MaxWork: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f.Policy(0).SetMode(ModeHang)
	c := &http.Client{}
	defer c.CloseIdleConnections()

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	started := make(chan struct{}, 2)
	for _, u := range []string{f.URL(0) + "/idle", f.URL(1) + "/generate"} {
		method := map[bool]string{true: "GET", false: "POST"}[strings.HasSuffix(u, "/idle")]
		wg.Go(func() {
			req, _ := http.NewRequest(method, u, nil)
			started <- struct{}{}
			resp, err := c.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					errs <- errors.New(method + " answered 200")
				}
			}
		})
	}
	<-started
	<-started
	// Wait until both requests reached their handlers.
	for f.Policy(0).Probes() == 0 || f.Policy(1).Works() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a request in flight at Close: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestWorkDurationsDeterministic(t *testing.T) {
	draw := func() []time.Duration {
		f := newFleet(t, 1, Options{MinWork: 10 * time.Millisecond, MaxWork: 20 * time.Millisecond})
		var out []time.Duration
		for range 20 {
			out = append(out, f.Policy(0).StartWork())
		}
		return out
	}
	a, b := draw(), draw()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same source, different durations: %v vs %v", a, b)
		}
		if a[i] < 10*time.Millisecond || a[i] > 20*time.Millisecond {
			t.Errorf("duration %v outside [10ms, 20ms]", a[i])
		}
	}
}

func TestGenerateWaitsForWork(t *testing.T) {
	f := newFleet(t, 1, Options{MinWork: 15 * time.Millisecond, MaxWork: 15 * time.Millisecond})
	c := &http.Client{}
	defer c.CloseIdleConnections()
	start := time.Now()
	code, body := do(t, c, "POST", f.URL(0)+"/generate")
	if code != 200 {
		t.Fatalf("POST /generate: %d %s", code, body)
	}
	if took := time.Since(start); took < 15*time.Millisecond {
		t.Errorf("/generate answered after %v, before its 15ms of work", took)
	}
	if !f.Policy(0).Idle() {
		t.Errorf("policy busy after /generate answered")
	}
}

func TestNotFound(t *testing.T) {
	f := newFleet(t, 2, Options{})
	c := &http.Client{}
	defer c.CloseIdleConnections()
	base := strings.TrimSuffix(f.URL(0), "/p/0")
	for _, path := range []string{"/p/2/idle", "/p/-1/idle", "/p/x/idle", "/idle"} {
		if code, _ := do(t, c, "GET", base+path); code != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", path, code)
		}
	}
	if code, _ := do(t, c, "GET", f.URL(0)+"/work"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /work = %d, want 405", code)
	}
	if _, err := New(-1, nil, Options{}); err == nil {
		t.Errorf("New(-1) succeeded")
	}
}

func TestPrefixCache(t *testing.T) {
	f, err := New(1, nil, Options{MinWork: 40 * time.Millisecond, MaxWork: 40 * time.Millisecond, PrefixCache: 2, PrefixSpeedup: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	generate := func(session string) workBody {
		t.Helper()
		resp, err := http.Post(f.URL(0)+"/generate", "application/json", strings.NewReader(`{"session_id":"`+session+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b workBody
		if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	// a, b miss; a hits; c evicts the least recent (b); b misses again.
	for i, step := range []struct {
		session string
		hit     bool
	}{{"a", false}, {"b", false}, {"a", true}, {"c", false}, {"b", false}, {"", false}} {
		got := generate(step.session)
		if got.PrefixHit != step.hit {
			t.Errorf("step %d (%q): hit %t; want %t", i, step.session, got.PrefixHit, step.hit)
		}
		if want := 40.0; step.hit {
			want = 10
			if got.BusyMS != want {
				t.Errorf("step %d: a hit took %g ms; want %g (4 times faster)", i, got.BusyMS, want)
			}
		} else if got.BusyMS != want {
			t.Errorf("step %d: a miss took %g ms; want %g", i, got.BusyMS, want)
		}
	}
	if got, want := f.PrefixStats(), (PrefixStats{Hits: 1, Misses: 4, Size: 2}); got != want {
		t.Errorf("PrefixStats = %+v; want %+v", got, want)
	}
	resp, err := http.Get(f.URL(0) + "/cache")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ps PrefixStats
	if err := json.NewDecoder(resp.Body).Decode(&ps); err != nil || ps.Hits != 1 {
		t.Errorf("GET /cache = %+v, %v; want 1 hit", ps, err)
	}
}

// A policy given a weight version reports it in /idle.
func TestVersionReported(t *testing.T) {
	f, err := New(1, rand.NewPCG(1, 1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Policy(0).SetVersion(8)
	resp, err := http.Get(f.URL(0) + "/idle")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct{ Version int64 }
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got.Version != 8 {
		t.Errorf("/idle version %d, %v; want 8", got.Version, err)
	}
}

// A weight update makes the policy busy for UpdateTime, then it reports
// the new version; on the shared listener too. Told to fail, it answers
// 500 and keeps its version.
func TestWeightUpdate(t *testing.T) {
	for _, perPolicy := range []bool{false, true} {
		f, err := New(1, rand.NewPCG(1, 1), Options{UpdateTime: 30 * time.Millisecond, PerPolicyListeners: perPolicy})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		p := f.Policy(0)
		p.SetVersion(3)
		resp, err := http.Post(f.URL(0)+"/update_weights_from_disk", "application/json", strings.NewReader(`{"model_path": "/ckpt/9", "version": 9}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || p.Updates() != 1 {
			t.Fatalf("update: %d, %d updates; want 200 and 1", resp.StatusCode, p.Updates())
		}
		var idle struct{ Version int64 }
		if r, err := http.Get(f.URL(0) + "/idle"); err == nil {
			_ = json.NewDecoder(r.Body).Decode(&idle)
			r.Body.Close()
		}
		if idle.Version != 9 {
			t.Errorf("/idle version %d after the update; want 9", idle.Version)
		}
		p.SetFailUpdates(true)
		resp, err = http.Post(f.URL(0)+"/update_weights_from_disk", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError || p.Updates() != 1 {
			t.Errorf("failing update: %d, %d updates; want 500 and still 1", resp.StatusCode, p.Updates())
		}
	}
}

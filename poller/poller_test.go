package poller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/routing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// register replaces st's policies with p0..pn-1 at the given URLs.
func register(tb testing.TB, st *routing.State, urls ...string) {
	tb.Helper()
	ps := make([]routing.Policy, len(urls))
	for i, u := range urls {
		ps[i] = routing.Policy{Index: i, ID: fmt.Sprintf("p%d", i), URL: u}
	}
	if err := st.Update(ps, routing.Topology{}); err != nil {
		tb.Fatal(err)
	}
}

// start runs a poller of target until the test ends, then checks that Run
// returned nil.
func start(tb testing.TB, target Target, cfg Config) *Poller {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = discard()
	}
	p := New(target, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Run: %v", err)
		}
	})
	return p
}

func policyStats(st *routing.State, index int) routing.PolicyStats {
	for _, ps := range st.Stats().Policies {
		if ps.Policy.Index == index {
			return ps
		}
	}
	return routing.PolicyStats{}
}

// healthOf returns the indices of st's healthy and unhealthy policies.
func healthOf(st *routing.State) (healthy, unhealthy []int) {
	for _, ps := range st.Stats().Policies {
		if ps.Healthy {
			healthy = append(healthy, ps.Policy.Index)
		} else {
			unhealthy = append(unhealthy, ps.Policy.Index)
		}
	}
	return healthy, unhealthy
}

// logRecorder is a slog handler that keeps every record's level, message
// and policy id.
type logRecorder struct {
	mu   sync.Mutex
	recs []logRec
}

type logRec struct {
	level slog.Level
	msg   string
	id    string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRec{level: r.Level, msg: r.Message}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "policy_id" {
			rec.id = a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, rec)
	return nil
}

// count returns how many records at level have message msg and policy id.
func (l *logRecorder) count(level slog.Level, msg, id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if r.level == level && r.msg == msg && r.id == id {
			n++
		}
	}
	return n
}

func TestRoutingFollowsHealth(t *testing.T) {
	var flapFails atomic.Bool
	idle := answerWith(200, `{"idle": true}`)
	good := newFake(t, idle)
	servers := []*fake{
		0: good,
		1: newFake(t, hang),
		2: newFake(t, answerWith(500, `{"idle": true}`)),
		3: newFake(t, answerWith(200, "garbage")),
		4: newFake(t, func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(20 * time.Millisecond)
			idle(w, r)
		}),
		5: newFake(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, good.URL+"/idle", http.StatusTemporaryRedirect)
		}),
		6: newFake(t, func(w http.ResponseWriter, r *http.Request) {
			if flapFails.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			idle(w, r)
		}),
	}
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.URL
	}
	st := routing.New(routing.Options{Grace: time.Minute, FailThreshold: 3, PassThreshold: 2})
	register(t, st, urls...)
	logs := &logRecorder{}
	const timeout = 500 * time.Millisecond
	began := time.Now()
	p := start(t, st, Config{Interval: 50 * time.Millisecond, Timeout: timeout, Logger: slog.New(logs)})

	wantHealthy, wantUnhealthy := []int{0, 4, 6}, []int{1, 2, 3, 5}
	poll.Until(t, "policies 1, 2, 3 and 5 unhealthy", func() bool {
		_, unhealthy := healthOf(st)
		return slices.Equal(unhealthy, wantUnhealthy)
	})
	if healthy, _ := healthOf(st); !slices.Equal(healthy, wantHealthy) {
		t.Fatalf("healthy policies %v, want %v", healthy, wantHealthy)
	}
	checkRouted(t, st, wantHealthy)

	// Unhealthy policies keep being probed, so that they can come back.
	before := servers[2].hits.Load()
	poll.Until(t, "probes of an unhealthy policy", func() bool { return servers[2].hits.Load() > before })

	flapFails.Store(true)
	poll.Until(t, "flapping policy unhealthy", func() bool { return !policyStats(st, 6).Healthy })
	for range 20 {
		if sel, err := st.Select(context.Background(), routing.SelectRequest{Wait: time.Hour, Router: routing.SelectRoundRobin, EnvID: ""}); err != nil || sel.Policy.Index == 6 {
			t.Fatalf("round robin gave %d, %v while policy 6 is unhealthy", sel.Policy.Index, err)
		}
	}
	flapFails.Store(false)
	poll.Until(t, "flapping policy healthy again", func() bool { return policyStats(st, 6).Healthy })

	// Each transition is logged once, at Debug (the round's summary is
	// the Warn line: healthlog_test.go).
	for _, id := range []string{"p1", "p2", "p3", "p5", "p6"} {
		if got := logs.count(slog.LevelDebug, "policy unhealthy", id); got != 1 {
			t.Errorf("%s: %d unhealthy logs, want 1", id, got)
		}
	}
	if got := logs.count(slog.LevelDebug, "policy healthy again", "p6"); got != 1 {
		t.Errorf("p6: %d healthy-again logs, want 1", got)
	}
	for _, id := range []string{"p0", "p4"} {
		if got := logs.count(slog.LevelDebug, "policy unhealthy", id); got != 0 {
			t.Errorf("%s: %d unhealthy logs for a healthy policy", id, got)
		}
	}
	checkNotQueued(t, servers[1], time.Since(began), timeout)
	if n := good.hits.Load(); n == 0 {
		t.Errorf("policy 0 never probed")
	}
	if s := p.Stats(); s.FailuresTotal == 0 || s.ProbesTotal <= s.FailuresTotal || s.Sweeps == 0 || s.Policies != 7 {
		t.Errorf("Stats() = %+v", s)
	}
}

// checkRouted checks that every router hands out exactly the policies
// want, and no other.
func checkRouted(tb testing.TB, st *routing.State, want []int) {
	tb.Helper()
	seen := map[int]bool{}
	for range 3 * len(want) {
		sel, err := st.Select(context.Background(), routing.SelectRequest{Wait: time.Hour, Router: routing.SelectRoundRobin, EnvID: ""})
		if err != nil {
			tb.Fatal(err)
		}
		seen[sel.Policy.Index] = true
	}
	a, err := st.Assign(routing.AssignRequest{Kind: routing.AssignLeastLoaded, NumTasks: 3 * len(want)})
	if err != nil {
		tb.Fatal(err)
	}
	for _, i := range a.Indices {
		seen[i] = true
	}
	for range want {
		sel, err := st.Select(context.Background(), routing.SelectRequest{Wait: time.Hour, Router: routing.SelectIdle, EnvID: ""})
		if err != nil {
			tb.Fatal(err)
		}
		seen[sel.Policy.Index] = true
	}
	got := slices.Sorted(func(yield func(int) bool) {
		for i := range seen {
			if !yield(i) {
				return
			}
		}
	})
	if !slices.Equal(got, want) {
		tb.Errorf("routed to %v, want exactly %v", got, want)
	}
	// Every healthy policy is leased now (Grace is long): nothing idle is left.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if sel, err := st.Select(ctx, routing.SelectRequest{Wait: time.Hour, Router: routing.SelectIdle, EnvID: ""}); err == nil {
		tb.Errorf("select with every healthy policy leased gave policy %d", sel.Policy.Index)
	}
}

// TestHealthyProbedOnSchedule checks that hung policies, filling half the
// probe slots, do not slow the probing of healthy ones, and are never
// probed twice at once.
//
// The bound leaves room for a starved machine (a probe that takes longer
// than the interval is rightly skipped once): it asks for a fifth of the
// probes the interval calls for, still twice what a poller that waited on
// the hung probes could send, at most one per Timeout.
func TestHealthyProbedOnSchedule(t *testing.T) {
	const interval = 20 * time.Millisecond
	var urls []string
	var healthy, hung []*fake
	for i := range 8 {
		if i%2 == 0 {
			f := newFake(t, hang)
			hung = append(hung, f)
			urls = append(urls, f.URL)
		} else {
			f := newFake(t, answerWith(200, "true"))
			healthy = append(healthy, f)
			urls = append(urls, f.URL)
		}
	}
	st := routing.New(routing.Options{})
	register(t, st, urls...)
	const timeout = 10 * interval
	began := time.Now()
	p := start(t, st, Config{Interval: interval, Timeout: timeout, Concurrency: 8})

	poll.Until(t, "first probes", func() bool { return p.Stats().Sweeps >= 2 })
	t0 := time.Now()
	before := make([]int64, len(healthy))
	for i, f := range healthy {
		before[i] = f.hits.Load()
	}
	time.Sleep(2 * time.Second)
	elapsed := time.Since(t0)
	want := int64(elapsed/interval) / 5
	for i, f := range healthy {
		if got := f.hits.Load() - before[i]; got < want {
			t.Errorf("healthy policy %d probed %d times in %v, want at least %d (a fifth of one per %v)", i, got, elapsed, want, interval)
		}
	}
	for _, f := range hung {
		checkNotQueued(t, f, time.Since(began), timeout)
	}
	if s := p.Stats(); s.SkippedTotal == 0 || s.LastPeriod < interval {
		t.Errorf("Stats() = %+v, want probes skipped while hung policies were in flight, periods of at least %v", s, interval)
	}
}

// TestAllWorkersBusy: with every worker taken by a hung policy the next
// probe waits for one, and the others are still probed.
func TestAllWorkersBusy(t *testing.T) {
	hung := newFake(t, hang)
	oks := []*fake{newFake(t, answerWith(200, "true")), newFake(t, answerWith(200, "true"))}
	st := routing.New(routing.Options{})
	register(t, st, hung.URL, oks[0].URL, oks[1].URL)
	const timeout = 50 * time.Millisecond
	began := time.Now()
	p := start(t, st, Config{Interval: 10 * time.Millisecond, Timeout: timeout, Concurrency: 1})
	poll.Until(t, "three probes of each healthy policy", func() bool {
		return oks[0].hits.Load() >= 3 && oks[1].hits.Load() >= 3
	})
	checkNotQueued(t, hung, time.Since(began), timeout)
	if s := p.Stats(); s.InFlight > 1 {
		t.Errorf("%d probes in flight with Concurrency 1", s.InFlight)
	}
}

// checkNotQueued checks that a hung policy polled for d was never probed
// while its previous probe was in flight: each probe holds it for at least
// timeout, so there can be no more than d/timeout+1 of them. (Counting
// requests in flight on the server would not do: it sees a timed-out
// request end only some time after the client gave up.)
func checkNotQueued(tb testing.TB, hung *fake, d, timeout time.Duration) {
	tb.Helper()
	if got, limit := hung.hits.Load(), int64(d/timeout)+1; got > limit {
		tb.Errorf("hung policy probed %d times in %v with a %v timeout, want at most %d: probes were queued", got, d, timeout, limit)
	}
}

// TestGraceNoDoubleHandout: a policy that keeps answering idle is not
// handed out again while its on_idle lease (the seed's contract) is within
// Grace, and is after.
func TestGraceNoDoubleHandout(t *testing.T) {
	srv := newFake(t, answerWith(200, `{"idle": true}`))
	for _, grace := range []time.Duration{time.Minute, 100 * time.Millisecond} {
		t.Run(fmt.Sprint("grace=", grace), func(t *testing.T) {
			st := routing.New(routing.Options{Grace: grace})
			register(t, st, srv.URL)
			var afterSelect atomic.Int64 // unix ns; probes sent later are counted
			afterSelect.Store(1 << 62)
			var idleSince atomic.Int64
			start(t, st, Config{Interval: 10 * time.Millisecond, OnProbe: func(_ string, p routing.Probe, _ routing.Transition) {
				if p.OK && p.Idle && p.SentAt.UnixNano() > afterSelect.Load() {
					idleSince.Add(1)
				}
			}})
			poll.Until(t, "first probe", func() bool { return policyStats(st, 0).Probes > 0 })

			beforeSelect := time.Now() // no later than the lease's start
			first, err := st.Select(context.Background(), routing.SelectRequest{Wait: time.Hour, Router: routing.SelectIdle, Release: routing.ReleaseOnIdle, EnvID: ""})
			if err != nil {
				t.Fatal(err)
			}
			afterSelect.Store(time.Now().UnixNano())
			if grace == time.Minute {
				poll.Until(t, "idle answers after the selection", func() bool { return idleSince.Load() >= 3 })
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
				defer cancel()
				if sel, err := st.Select(ctx, routing.SelectRequest{Wait: time.Hour, Router: routing.SelectIdle, Release: routing.ReleaseOnIdle, EnvID: ""}); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("second select within grace = %+v, %v; want deadline exceeded", sel, err)
				}
				if got := policyStats(st, 0).Inflight; got != 1 {
					t.Errorf("inflight = %d, want 1", got)
				}
				if _, err := st.Release(first.Lease); err != nil {
					t.Fatal(err)
				}
			}
			// Released, or freed by an idle answer sent Grace after the selection.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			second, err := st.Select(ctx, routing.SelectRequest{Wait: time.Hour, Router: routing.SelectIdle, Release: routing.ReleaseOnIdle, EnvID: ""})
			if err != nil {
				t.Fatal(err)
			}
			if second.Policy.Index != 0 || second.Lease == first.Lease {
				t.Errorf("second select = %+v, want policy 0 on a new lease", second)
			}
			if grace != time.Minute {
				if took := time.Since(beforeSelect); took < grace {
					t.Errorf("policy handed out again %v after its selection, within grace %v", took, grace)
				}
			}
		})
	}
}

func TestPolicySetChanges(t *testing.T) {
	a := newFake(t, answerWith(200, "true"))
	b := newFake(t, answerWith(200, "true"))
	c := newFake(t, answerWith(200, "true"))
	st := routing.New(routing.Options{})
	register(t, st, a.URL)
	p := start(t, st, Config{Interval: 10 * time.Millisecond})
	poll.Until(t, "a probed", func() bool { return a.hits.Load() >= 2 })

	register(t, st, a.URL, b.URL)
	poll.Until(t, "b probed after being added", func() bool { return b.hits.Load() >= 2 })
	if got := p.Stats().Policies; got != 2 {
		t.Errorf("Stats().Policies = %d, want 2", got)
	}

	// p0 moves from a to c; p1 stays on b.
	if err := st.Update([]routing.Policy{{Index: 0, ID: "p0", URL: c.URL}, {Index: 1, ID: "p1", URL: b.URL}}, routing.Topology{}); err != nil {
		t.Fatal(err)
	}
	// Probes are counted when they arrive. Once no probe is pending, a's
	// last one, dispatched before p0 moved, has arrived.
	poll.Until(t, "c probed after p0 moved, then no probe pending", func() bool {
		return c.hits.Load() >= 2 && p.pending.Load() == 0
	})
	sweeps := p.Stats().Sweeps
	aHits := a.hits.Load()
	poll.Until(t, "three more sweeps", func() bool { return p.Stats().Sweeps >= sweeps+3 })
	if got := a.hits.Load(); got != aHits {
		t.Errorf("a probed %d more times after p0 moved away", got-aHits)
	}

	register(t, st)
	sweeps = p.Stats().Sweeps
	poll.Until(t, "a sweep over no policy, then no probe pending", func() bool {
		return p.Stats().Sweeps >= sweeps+2 && p.pending.Load() == 0
	})
	bHits, cHits := b.hits.Load(), c.hits.Load()
	poll.Until(t, "three more sweeps", func() bool { return p.Stats().Sweeps >= sweeps+5 })
	if b.hits.Load() != bHits || c.hits.Load() != cHits {
		t.Errorf("policies probed after they were all removed")
	}
	if got := p.Stats().Policies; got != 0 {
		t.Errorf("Stats().Policies = %d, want 0", got)
	}
}

// A policy registered while the poller sleeps is probed at once, not at the
// next period: the router gives it no work until it has answered.
func TestNewPolicyProbedAtOnce(t *testing.T) {
	st := routing.New(routing.Options{Polled: true})
	first, second := newFake(t, answerWith(200, `{"idle": true}`)), newFake(t, answerWith(200, `{"idle": true}`))
	register(t, st, first.URL)
	start(t, st, Config{Interval: time.Hour})
	poll.Until(t, "the first probe of the policy present at start", func() bool { return first.hits.Load() == 1 })
	register(t, st, first.URL, second.URL)
	poll.Until(t, "the first probe of the policy registered later", func() bool { return second.hits.Load() == 1 })
	poll.Until(t, "the new policy to be routable", func() bool { return policyStats(st, 1).State == routing.StateIdle })
	if got := first.hits.Load(); got != 1 {
		t.Errorf("the policy present at start was probed %d times within the hour's period; want 1", got)
	}
}

// TestLeaseKeptWhileWorkerPrepares: with the default grace, an on_idle
// lease's env worker
// that holds its lease for 2 s before it sends its request (the policy
// answering idle all along, every 10 ms) keeps it, and nobody else is
// handed the policy; once the policy answers busy and then idle, the
// lease is freed without a release.
func TestLeaseKeptWhileWorkerPrepares(t *testing.T) {
	var busy atomic.Bool
	srv := newFake(t, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"idle": %t}`, !busy.Load())
	})
	st := routing.New(routing.Options{Polled: true})
	register(t, st, srv.URL)
	var probesAfter atomic.Int64
	var selectedAt atomic.Int64
	selectedAt.Store(1 << 62)
	start(t, st, Config{Interval: 10 * time.Millisecond, OnProbe: func(_ string, p routing.Probe, _ routing.Transition) {
		if p.OK && p.SentAt.UnixNano() > selectedAt.Load() {
			probesAfter.Add(1)
		}
	}})
	poll.Until(t, "first probe", func() bool { return policyStats(st, 0).Probes > 0 })

	sel, err := st.Select(context.Background(), routing.SelectRequest{Wait: time.Hour, Router: routing.SelectIdle, Release: routing.ReleaseOnIdle})
	if err != nil {
		t.Fatal(err)
	}
	selectedAt.Store(time.Now().UnixNano())
	time.Sleep(2 * time.Second) // the env worker steps its environment
	if n := probesAfter.Load(); n < 10 {
		t.Fatalf("only %d idle answers while the worker prepared", n)
	}
	if !st.LeaseValid(sel.Lease) {
		t.Fatal("lease freed by idle answers before its work began")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if other, err := st.Select(ctx, routing.SelectRequest{Wait: time.Hour, Router: routing.SelectIdle, Release: routing.ReleaseOnIdle}); err == nil {
		t.Fatalf("policy handed out twice: %+v", other)
	}

	busy.Store(true) // the request arrives
	seen := probesAfter.Load()
	poll.Until(t, "a busy answer", func() bool { return probesAfter.Load() > seen+1 })
	if !st.LeaseValid(sel.Lease) {
		t.Fatal("lease freed while its work runs")
	}
	busy.Store(false) // and ends
	poll.Until(t, "the lease freed by the idle answer after the work", func() bool { return !st.LeaseValid(sel.Lease) })
}

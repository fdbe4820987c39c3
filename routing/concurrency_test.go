package routing

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentSelectRelease runs many selectors against registration,
// drain, health, assignment and stats traffic, and checks that no policy is
// ever held by more callers than its capacity.
func TestConcurrentSelectRelease(t *testing.T) {
	const (
		selectors = 16
		rounds    = 1000
	)
	ps := densePolicies(8)
	totalCap := 0
	for i := range ps {
		ps[i].Capacity = 1 + i%3
		totalCap += ps[i].Capacity
	}
	topo := nodes(map[string][2][]int{
		"a": {ints(0, 1), ints(0, 1, 2)},
		"b": {ints(2), ints(3, 4)},
		"c": {ints(3, 4), ints(5, 6, 7)},
	})
	st := newState(t, Options{}, ps, topo)
	holders := make([]atomic.Int32, len(ps))

	var wg sync.WaitGroup
	for g := range selectors {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range rounds {
				kind := []Selector{SelectIdle, SelectIdleAffinity}[r.IntN(2)]
				sel, err := st.Select(context.Background(), SelectRequest{Wait: time.Hour, Router: kind, EnvID: "env-" + strconv.Itoa(r.IntN(6))})
				if err != nil {
					t.Errorf("Select: %v", err)
					return
				}
				i := sel.Policy.Index
				if n := holders[i].Add(1); int(n) > ps[i].Capacity {
					t.Errorf("policy %d held %d times; capacity %d", i, n, ps[i].Capacity)
				}
				runtime.Gosched()
				holders[i].Add(-1)
				if _, err := st.Release(sel.Lease); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}

	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		r := rand.New(rand.NewPCG(99, 1))
		for {
			select {
			case <-stop:
				return
			default:
			}
			p := ps[r.IntN(len(ps))]
			switch r.IntN(6) {
			case 0:
				if err := st.Update(ps, topo); err != nil {
					t.Errorf("Update: %v", err)
				}
			case 1:
				_ = st.SetDraining(p.ID, true)
				runtime.Gosched()
				_ = st.SetDraining(p.ID, false)
			case 2:
				// Failed probes past the threshold, then enough passes: a
				// busy answer (it holds the policy's idle slots), then an
				// idle one that gives them back. Both were sent at time
				// zero, before any hand-out, so no lease is freed behind
				// its holder.
				for range 3 {
					st.ObserveProbe(p.ID, Probe{OK: false})
				}
				runtime.Gosched()
				st.ObserveProbe(p.ID, Probe{OK: true, Idle: false})
				runtime.Gosched()
				st.ObserveProbe(p.ID, Probe{OK: true, Idle: true})
			case 3:
				if _, err := st.Assign(AssignRequest{Kind: AssignNodeAffinity, NumTasks: 3, EnvIDs: []string{"env-0", "env-2", "env-x"}}); err != nil && !errors.Is(err, ErrNoPolicies) {
					t.Errorf("Assign: %v", err)
				}
			case 4:
				if _, err := st.Select(context.Background(), SelectRequest{Wait: time.Hour, Router: SelectRoundRobin, EnvID: "env-3"}); err != nil && !errors.Is(err, ErrNoPolicies) {
					t.Errorf("round robin: %v", err)
				}
			case 5:
				s := st.Stats()
				if s.Leases > totalCap {
					t.Errorf("Stats: %d leases for capacity %d", s.Leases, totalCap)
				}
			}
		}
	})
	wg.Wait()
	close(stop)
	bg.Wait()

	wantAllIdle(t, st, totalCap)
}

// wantAllIdle checks that every slot is back: no lease, no waiter, every
// policy healthy and idle to its capacity.
func wantAllIdle(tb testing.TB, st *State, totalCap int) {
	tb.Helper()
	s := st.Stats()
	if s.Leases != 0 || s.Waiters != 0 || s.Idle != totalCap {
		tb.Errorf("Stats: %d leases, %d waiters, %d idle; want 0, 0, %d", s.Leases, s.Waiters, s.Idle, totalCap)
	}
	for _, p := range s.Policies {
		if p.Inflight != 0 || p.IdleCapacity != p.Capacity || p.State != StateIdle {
			tb.Errorf("policy %d: inflight %d, idle %d of %d, state %s", p.Policy.Index, p.Inflight, p.IdleCapacity, p.Capacity, p.State)
		}
	}
}

// TestWaitersFIFO queues waiters one by one on a busy policy and checks that
// releases serve them in arrival order.
func TestWaitersFIFO(t *testing.T) {
	const waiters = 8
	for _, kind := range []Selector{SelectIdle, SelectIdleAffinity} {
		t.Run(fmt.Sprintf("%T", kind), func(t *testing.T) {
			topo := nodes(map[string][2][]int{"a": {ints(0), ints(0)}})
			st := newState(t, Options{}, densePolicies(1), topo)
			held := mustSelect(t, st, kind, "env-0")

			type served struct {
				waiter int
				lease  uint64
				err    error
			}
			got := make(chan served)
			var wg sync.WaitGroup
			for w := range waiters {
				wg.Go(func() {
					sel, err := st.Select(context.Background(), SelectRequest{Wait: time.Hour, Router: kind, EnvID: "env-" + strconv.Itoa(w%2)})
					got <- served{w, sel.Lease, err}
				})
				waitForWaiters(t, st, w+1)
			}
			lease := held.Lease
			for w := range waiters {
				mustRelease(t, st, lease)
				s := <-got
				if s.err != nil {
					t.Fatalf("waiter %d: %v", s.waiter, s.err)
				}
				if s.waiter != w {
					t.Errorf("release %d served waiter %d; want %d (FIFO)", w, s.waiter, w)
				}
				lease = s.lease
			}
			mustRelease(t, st, lease)
			wg.Wait()
			wantAllIdle(t, st, 1)
		})
	}
}

// TestCancelledWaiterIsSkipped: a waiter that gives up leaves the queue and
// the next release goes to the one behind it.
func TestCancelledWaiterIsSkipped(t *testing.T) {
	st := newState(t, Options{}, densePolicies(1), Topology{})
	held := mustSelect(t, st, SelectIdle, "")

	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error)
	go func() {
		_, err := st.Select(ctx, SelectRequest{Wait: time.Hour, Router: SelectIdle, EnvID: ""})
		first <- err
	}()
	waitForWaiters(t, st, 1)
	second := make(chan Decision)
	go func() {
		sel, err := st.Select(context.Background(), SelectRequest{Wait: time.Hour, Router: SelectIdle, EnvID: ""})
		if err != nil {
			t.Errorf("second waiter: %v", err)
		}
		second <- sel
	}()
	waitForWaiters(t, st, 2)

	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v; want context.Canceled", err)
	}
	if got := st.Stats().Waiters; got != 1 {
		t.Fatalf("%d waiters after a cancel; want 1", got)
	}
	mustRelease(t, st, held.Lease)
	sel := <-second
	mustRelease(t, st, sel.Lease)
	wantAllIdle(t, st, 1)
}

// TestMaxWaiters fills the waiter list of a busy policy and checks that one
// more waiting Select is refused with ErrOverloaded at once, that a try
// without waiting is not, and that a freed place is taken again.
func TestMaxWaiters(t *testing.T) {
	const max = 3
	topo := nodes(map[string][2][]int{"a": {ints(0), ints(0)}})
	st := newState(t, Options{MaxWaiters: max}, densePolicies(1), topo)
	held := mustSelect(t, st, SelectIdle, "env-0")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, max+1)
	for w := range max {
		go func() {
			_, err := st.Select(ctx, SelectRequest{Wait: time.Hour, Router: SelectIdle})
			errs <- err
		}()
		waitForWaiters(t, st, w+1)
	}
	// Bounded, so that a missing limit fails rather than hangs.
	over, cancelOver := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelOver()
	if _, err := st.Select(over, SelectRequest{Wait: time.Hour, Router: SelectIdle}); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("Select beyond %d waiters = %v; want ErrOverloaded", max, err)
	}
	if _, err := st.Select(cancelled(), SelectRequest{Router: SelectIdle}); !errors.Is(err, ErrNoIdlePolicy) {
		t.Errorf("non-waiting Select with %d waiters = %v; want ErrNoIdlePolicy", max, err)
	}
	if got := st.Stats().Waiters; got != max {
		t.Errorf("%d waiters after the refusal; want %d", got, max)
	}

	// Serving one waiter frees a place.
	mustRelease(t, st, held.Lease)
	if err := <-errs; err != nil {
		t.Fatalf("served waiter: %v", err)
	}
	waitForWaiters(t, st, max-1)
	go func() {
		_, err := st.Select(ctx, SelectRequest{Wait: time.Hour, Router: SelectIdle})
		errs <- err
	}()
	waitForWaiters(t, st, max)
	cancel()
	for range max {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled waiter: %v; want context.Canceled", err)
		}
	}
}

// TestCancelledWaitersConsumeNothing cancels waiters while their slots are
// being released, so that some are granted a slot just as they give up:
// whatever the interleaving, every slot must come back.
func TestCancelledWaitersConsumeNothing(t *testing.T) {
	const (
		rounds  = 50
		waiters = 20
	)
	ps := withCapacity(densePolicies(3), 2)
	const totalCap = 6
	st := newState(t, Options{}, ps, Topology{})
	r := rand.New(rand.NewPCG(5, 5))
	for round := range rounds {
		var held []uint64
		for range totalCap {
			held = append(held, mustSelect(t, st, SelectIdle, "").Lease)
		}

		type result struct {
			w   int
			sel Decision
			err error
		}
		results := make(chan result, waiters)
		cancels := make([]context.CancelFunc, waiters)
		for w := range waiters {
			ctx, cancel := context.WithCancel(context.Background())
			cancels[w] = cancel
			go func() {
				sel, err := st.Select(ctx, SelectRequest{Wait: time.Hour, Router: SelectIdle, EnvID: ""})
				results <- result{w, sel, err}
			}()
		}
		waitForWaiters(t, st, waiters)

		victims := r.Perm(waiters)[:waiters/2]
		cancelled := map[int]bool{}
		for _, w := range victims {
			cancelled[w] = true
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for _, l := range held {
				if _, err := st.Release(l); err != nil {
					t.Errorf("Release: %v", err)
				}
				runtime.Gosched()
			}
		})
		wg.Go(func() {
			for _, w := range victims {
				cancels[w]()
				runtime.Gosched()
			}
		})

		// Served waiters give their slot straight back, so that every
		// waiter that was not cancelled is served in the end.
		for range waiters {
			res := <-results
			switch {
			case res.err == nil:
				mustRelease(t, st, res.sel.Lease)
			case !cancelled[res.w] || !errors.Is(res.err, context.Canceled):
				t.Errorf("round %d: waiter %d (cancelled %v) failed: %v", round, res.w, cancelled[res.w], res.err)
			}
		}
		wg.Wait()
		for _, c := range cancels {
			c()
		}
		wantAllIdle(t, st, totalCap)
		if t.Failed() {
			t.Fatalf("round %d", round)
		}
	}
}

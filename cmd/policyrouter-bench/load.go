package main

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/policyrouter/policyrouter/client"
	"github.com/policyrouter/policyrouter/internal/benchkit"
)

// Bounds of one phase, beside its duration.
const (
	// maxOpsPerPhase caps the operations of one phase over all goroutines.
	maxOpsPerPhase = 50_000_000
	// drainGrace is how long operations in flight at the end of a phase
	// may take to finish; those still running then are cancelled and
	// counted as cut, neither done nor failed. A phase in which no
	// operation has finished yet waits for the first, up to firstOpWait:
	// on a loaded machine one big operation can outlast the whole phase,
	// and a phase of nothing but cuts measures nothing.
	drainGrace  = 500 * time.Millisecond
	firstOpWait = time.Minute
)

// phase is the outcome of driving one server for one duration.
type phase struct {
	Ops     int     `json:"ops"`
	Errors  int     `json:"errors"`
	Seconds float64 `json:"seconds"`
	// Throughput is successful operations per second.
	Throughput float64 `json:"throughput"`
	// P50MS and P99MS are the latencies of successful operations.
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	// LeaseGone counts select+release operations whose lease the poller
	// had freed before the release came (counted as done too).
	LeaseGone int `json:"lease_gone"`
	// Cut counts operations cancelled because they were still running
	// drainGrace after the end of the phase.
	Cut int `json:"cut"`
	// FirstError is the first error seen, if any.
	FirstError string `json:"first_error,omitempty"`
}

// drive runs op from concurrency goroutines against c, each at least
// once, until d has passed (or maxOpsPerPhase operations are done, or ctx is done) and
// measures each operation. Operations still in flight drainGrace after d
// are cancelled.
func drive(ctx context.Context, c *client.Client, op opFunc, concurrency int, d time.Duration) phase {
	type result struct {
		lat    []time.Duration
		errors int
		cut    int
		gone   int
		first  error
	}
	results := make([]result, concurrency)
	perWorker := maxOpsPerPhase / concurrency
	start := time.Now()
	deadline := start.Add(d)
	opCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var finished atomic.Int64 // operations done, failed or not
	firstDone := make(chan struct{})
	var firstOnce sync.Once
	go func() {
		t := time.NewTimer(time.Until(deadline.Add(drainGrace)))
		defer t.Stop()
		select {
		case <-t.C:
		case <-opCtx.Done():
			return
		}
		if finished.Load() == 0 {
			cap := time.NewTimer(firstOpWait)
			defer cap.Stop()
			select {
			case <-firstDone:
			case <-cap.C:
			case <-opCtx.Done():
			}
		}
		cancel()
	}()

	var wg sync.WaitGroup
	for w := range concurrency {
		benchkit.GoLabelled(&wg, benchkit.SideClient, func() {
			res := &results[w]
			res.lat = make([]time.Duration, 0, 1024)
			for seq := 0; seq < perWorker && opCtx.Err() == nil; seq++ {
				t0 := time.Now()
				if seq > 0 && !t0.Before(deadline) {
					break // each worker starts one operation at least, however late it was scheduled
				}
				err := op(opCtx, c, w, seq)
				if opCtx.Err() == nil {
					finished.Add(1)
					firstOnce.Do(func() { close(firstDone) })
				}
				if err != nil && opCtx.Err() != nil && ctx.Err() == nil {
					res.cut++
					continue
				}
				if errors.Is(err, errLeaseGone) {
					res.gone++
					err = nil
				}
				if err != nil {
					res.errors++
					if res.first == nil {
						res.first = err
					}
					continue
				}
				res.lat = append(res.lat, time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	var p phase
	var lat []time.Duration
	for _, r := range results {
		lat = append(lat, r.lat...)
		p.Errors += r.errors
		p.Cut += r.cut
		p.LeaseGone += r.gone
		if r.first != nil && p.FirstError == "" {
			p.FirstError = r.first.Error()
		}
	}
	slices.Sort(lat)
	p.Ops = len(lat)
	p.Seconds = elapsed.Seconds()
	p.Throughput = float64(p.Ops) / elapsed.Seconds()
	p.P50MS = benchkit.MS(benchkit.Percentile(lat, 0.50))
	p.P99MS = benchkit.MS(benchkit.Percentile(lat, 0.99))
	return p
}

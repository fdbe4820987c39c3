package poller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/policyrouter/policyrouter/fakepolicy"
	"github.com/policyrouter/policyrouter/internal/poll"
	"github.com/policyrouter/policyrouter/routing"
)

// TestOccupancyAgainstEngines is the trial's repro against simulated SGLang
// and vLLM engines of capacity 2, probed for real: with leases A and B out,
// A's request running on the engine and B's holder not yet sending, the
// engine's load (1) ends neither lease over many probes, a third /select
// waits, and both releases say released. Then, with nothing out and a load
// of 1 from traffic that did not come through the router, exactly one
// hand-out.
func TestOccupancyAgainstEngines(t *testing.T) {
	for _, engine := range []string{fakepolicy.EngineSGLang, fakepolicy.EngineVLLM} {
		t.Run(engine, func(t *testing.T) {
			fleet, err := fakepolicy.New(1, nil, fakepolicy.Options{Engine: engine, MaxRunning: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = fleet.Close() })
			st := routing.New(routing.Options{Polled: true, Grace: 100 * time.Millisecond})
			pol := routing.Policy{Index: 0, ID: "p0", URL: fleet.URL(0), Capacity: 2, Engine: engine}
			if err := st.Update([]routing.Policy{pol}, routing.Topology{}); err != nil {
				t.Fatal(err)
			}
			start(t, st, Config{Interval: 10 * time.Millisecond})
			poll.Until(t, "the engine's first answer", func() bool { return policyStats(st, 0).State == routing.StateIdle })

			ctx := context.Background()
			a, errA := st.Select(ctx, routing.SelectRequest{Router: routing.SelectIdle})
			b, errB := st.Select(ctx, routing.SelectRequest{Router: routing.SelectIdle})
			if errA != nil || errB != nil {
				t.Fatalf("two selects on capacity 2: %v, %v", errA, errB)
			}
			work := fleet.Policy(0)
			work.StartWorkFor(time.Hour) // A's request runs; B's holder steps its env
			poll.Until(t, "the engine's load of 1 read", func() bool {
				ps := policyStats(st, 0)
				return ps.EngineLoadKnown && ps.EngineLoad == 1
			})
			// Many more probes, idle answers all (load 1 < capacity 2), each
			// well past Grace.
			seen := policyStats(st, 0).Probes
			poll.Until(t, "30 more probes", func() bool { return policyStats(st, 0).Probes >= seen+30 })
			ps := policyStats(st, 0)
			if ps.Inflight != 2 || ps.Occupancy != 2 {
				t.Fatalf("leases %d occupancy %d after 30 probes at load 1; want 2 and 2", ps.Inflight, ps.Occupancy)
			}
			var we *routing.WaitError
			if d, err := st.Select(ctx, routing.SelectRequest{Router: routing.SelectIdle, Wait: 50 * time.Millisecond}); !errors.As(err, &we) {
				t.Fatalf("third select = policy %d, %v; want it to wait in vain", d.Policy.Index, err)
			}
			for _, l := range []uint64{a.Lease, b.Lease} {
				if _, err := st.Release(l); err != nil {
					t.Fatalf("release: %v; want released", err)
				}
			}

			// Nothing out now; the engine still runs that request: outside
			// load 1 of 2.
			poll.Until(t, "the outside load read", func() bool { return policyStats(st, 0).OutsideLoad == 1 })
			if _, err := st.Select(ctx, routing.SelectRequest{Router: routing.SelectIdle}); err != nil {
				t.Fatalf("select with outside load 1 of 2: %v", err)
			}
			if d, err := st.Select(ctx, routing.SelectRequest{Router: routing.SelectIdle, Wait: 50 * time.Millisecond}); !errors.As(err, &we) {
				t.Fatalf("second select with outside load 1 of 2 = policy %d, %v; want it to wait in vain", d.Policy.Index, err)
			}
			if got := st.LeasesEnded()["probe"]; got != 0 {
				t.Errorf("%d leases ended by a probe; want none", got)
			}
		})
	}
}

package handlers

import (
	"sync/atomic"
	"time"

	"github.com/policyrouter/policyrouter/api"
)

// waitBoundsMS are the upper bounds, in milliseconds, of the /select wait
// histogram in /stats; a last bucket counts longer waits.
var waitBoundsMS = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000}

// decisionCounts counts routing decisions for /stats, so that the live page
// can draw rates and wait quantiles without Prometheus: cumulative
// counters whose differences between two reads are what happened between
// them.
type decisionCounts struct {
	assigns atomic.Uint64
	selects atomic.Uint64
	// waits counts /select calls by how long they took to be answered
	// (waiting for an idle policy included), bucketed by waitBoundsMS.
	waits [18]atomic.Uint64
}

func (d *decisionCounts) observe(endpoint string, took time.Duration) {
	if endpoint == "assign" {
		d.assigns.Add(1)
		return
	}
	d.selects.Add(1)
	ms := float64(took) / float64(time.Millisecond)
	i := 0
	for i < len(waitBoundsMS) && ms > waitBoundsMS[i] {
		i++
	}
	d.waits[i].Add(1)
}

func (d *decisionCounts) stats() api.DecisionStats {
	out := api.DecisionStats{
		AssignTotal: d.assigns.Load(),
		SelectTotal: d.selects.Load(),
		SelectWait:  api.Histogram{BoundsMS: waitBoundsMS, Counts: make([]uint64, len(d.waits))},
	}
	for i := range d.waits {
		out.SelectWait.Counts[i] = d.waits[i].Load()
	}
	return out
}
